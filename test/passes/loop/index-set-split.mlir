// RUN: llm-opt %s --split-input-file -p index-set-split | filecheck %s
// RUN: llm-opt %s --split-input-file -p index-set-split --check-numerics 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// RUN: llm-opt %s --split-input-file -p 'index-set-split,fuse-kernels{recompute_limit=0}' | filecheck %s --check-prefix=FUSED
// RUN: llm-opt %s --split-input-file -p 'index-set-split,fuse-kernels{recompute_limit=0},loop-to-tile,warp-gemv' | filecheck %s --check-prefix=GEMV
// RUN: llm-opt %s --split-input-file -p 'index-set-split,fuse-kernels{recompute_limit=0},loop-to-tile,warp-gemv,tile-to-kernel,canonicalize,cse,kernel-to-cuda' --check-numerics 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// RUN: llm-opt %s --split-input-file -p 'index-set-split{max_rows=0}' | filecheck %s --check-prefix=NONE
// A decode step's rotary embedding, as fuse-kernels leaves it, reading a projection of one
// row: two heads of eight, ``q[h, d] = p[8h + d]·cos[d] + rot(p)[8h + d]·sin[d]`` with
// ``rot(p)[d] = d < 4 ? -p[d + 4] : p[d - 4]``. Inputs: (1) that embedding; (2) the same
// over a projection of 32 rows (a prompt's): left alone; (3) a comparison with the loop
// variable over a buffer no product fills: left alone; (4) a comparison that is not one
// value over a piece (`d != 4`): it compares `d + 4` in the second piece.

// CHECK-LABEL: func.func @rotary
// CHECK:       loop.kernel @rope
// CHECK:         loop.for %h = 0 to 2 {
// CHECK-NEXT:      loop.for %d = 0 to 4 {
// CHECK-NOT:         arith.cmpi
// CHECK-NOT:         arith.select
// CHECK-DAG:         %[[LO:.*]] = loop.load %{{.*}}[((%h * 8) + %d), 0] : memref<16x1xf32>
// CHECK-DAG:         %[[HI:.*]] = loop.load %{{.*}}[(((%h * 8) + %d) + 4), 0] : memref<16x1xf32>
// CHECK:             arith.negf %[[HI]] : f32
// CHECK:             loop.store %{{.*}}, %{{.*}}[%h, %d] : memref<2x8xf32>
// CHECK-NOT:         loop.load %{{.*}} : memref<16x1xf32>
// CHECK:             loop.store %{{.*}}, %{{.*}}[%h, (%d + 4)] : memref<2x8xf32>

// FUSED-LABEL: func.func @rotary
// FUSED-NOT:   loop.kernel @proj
// FUSED:       loop.kernel @rope
// FUSED:         loop.for %d = 0 to 4 {
// FUSED:           loop.reduce add %k = 0 to 32 : f32 {
// FUSED:             loop.load %{{.*}}[((%h * 8) + %d), %k] : memref<16x32xf32>
// FUSED:           loop.reduce add %{{.*}} = 0 to 32 : f32 {
// FUSED:             loop.load %{{.*}}[(((%h * 8) + %d) + 4), %{{.*}}] : memref<16x32xf32>
// FUSED-NOT:       loop.reduce
// FUSED:           loop.store %{{.*}}, %{{.*}}[%h, %d] : memref<2x8xf32>
// FUSED:           loop.store %{{.*}}, %{{.*}}[%h, (%d + 4)] : memref<2x8xf32>

// GEMV-LABEL: func.func @rotary
// GEMV:       tile.kernel @rope
// GEMV:         tile.forall (%{{[a-z0-9_]+}}, %l) in [1, 32] over block_threads {
// GEMV:           loop.store %{{.*}}, %part[
// GEMV-NEXT:      loop.store %{{.*}}, %part_1[
// GEMV:         tile.forall (%{{[a-z0-9_]+}}) in [1] over block_threads {
// GEMV:           loop.store %{{.*}}, %o[%h, (%nb + %w_1)] : memref<2x8xf32>
// GEMV-NEXT:      loop.store %{{.*}}, %o[%h, ((%nb + %w_1) + 4)] : memref<2x8xf32>
// GEMV:       } {llmopt.gemv = {rows = 1 : i64, slices = 1 : i64, vector = 4 : i64}}

// NONE-LABEL: func.func @rotary
// NONE:         loop.for %d = 0 to 8 {
// NONE:           arith.cmpi ult, %d

// NUM-NOT: FAIL
// NUM: index-set-split {{.*}} ok

func.func @rotary(%x: memref<1x32xf32>, %W: memref<16x32xf32>, %cos: memref<8xf32>, %sin: memref<8xf32>) -> memref<2x8xf32> {
  %out = memref.alloc() : memref<2x8xf32>
  %p = memref.alloc() : memref<16x1xf32>
  loop.kernel @proj (%o = %p : memref<16x1xf32>, %a = %x : memref<1x32xf32>, %w = %W : memref<16x32xf32>) {
    loop.for %n = 0 to 16 {
      %acc = loop.reduce add %k = 0 to 32 : f32 {
        %av = loop.load %a[0, %k] : memref<1x32xf32>
        %wv = loop.load %w[%n, %k] : memref<16x32xf32>
        %m = arith.mulf %av, %wv : f32
        loop.yield %m : f32
      }
      loop.store %acc, %o[%n, 0] : memref<16x1xf32>
    }
  }
  loop.kernel @rope (%o = %out : memref<2x8xf32>, %q = %p : memref<16x1xf32>, %c = %cos : memref<8xf32>, %s = %sin : memref<8xf32>) {
    %four = arith.constant 4 : index
    loop.for %h = 0 to 2 {
      loop.for %d = 0 to 8 {
        %v = loop.load %q[%h * 8 + %d, 0] : memref<16x1xf32>
        %cv = loop.load %c[%d] : memref<8xf32>
        %x1 = arith.mulf %v, %cv : f32
        %hi = loop.load %q[%h * 8 + (%d mod 4) + 4, 0] : memref<16x1xf32>
        %neg = arith.negf %hi : f32
        %lo = loop.load %q[%h * 8 + (%d - 4) mod 4, 0] : memref<16x1xf32>
        %first = arith.cmpi ult, %d, %four : index
        %r = arith.select %first, %neg, %lo : f32
        %sv = loop.load %s[%d] : memref<8xf32>
        %x2 = arith.mulf %r, %sv : f32
        %y = arith.addf %x1, %x2 : f32
        loop.store %y, %o[%h, %d] : memref<2x8xf32>
      }
    }
  }
  func.return %out : memref<2x8xf32>
}

// -----

// CHECK-LABEL: func.func @prompt
// CHECK:         loop.for %d = 0 to 8 {
// CHECK:           arith.cmpi ult, %d

func.func @prompt(%x: memref<32x32xf32>, %W: memref<8x32xf32>, %cos: memref<8xf32>, %sin: memref<8xf32>) -> memref<32x8xf32> {
  %out = memref.alloc() : memref<32x8xf32>
  %p = memref.alloc() : memref<32x8xf32>
  loop.kernel @proj (%o = %p : memref<32x8xf32>, %a = %x : memref<32x32xf32>, %w = %W : memref<8x32xf32>) {
    loop.for %t = 0 to 32 {
      loop.for %n = 0 to 8 {
        %acc = loop.reduce add %k = 0 to 32 : f32 {
          %av = loop.load %a[%t, %k] : memref<32x32xf32>
          %wv = loop.load %w[%n, %k] : memref<8x32xf32>
          %m = arith.mulf %av, %wv : f32
          loop.yield %m : f32
        }
        loop.store %acc, %o[%t, %n] : memref<32x8xf32>
      }
    }
  }
  loop.kernel @rope (%o = %out : memref<32x8xf32>, %q = %p : memref<32x8xf32>, %c = %cos : memref<8xf32>, %s = %sin : memref<8xf32>) {
    %four = arith.constant 4 : index
    loop.for %t = 0 to 32 {
      loop.for %d = 0 to 8 {
        %v = loop.load %q[%t, %d] : memref<32x8xf32>
        %cv = loop.load %c[%d] : memref<8xf32>
        %x1 = arith.mulf %v, %cv : f32
        %hi = loop.load %q[%t, (%d mod 4) + 4] : memref<32x8xf32>
        %neg = arith.negf %hi : f32
        %lo = loop.load %q[%t, (%d - 4) mod 4] : memref<32x8xf32>
        %first = arith.cmpi ult, %d, %four : index
        %r = arith.select %first, %neg, %lo : f32
        %sv = loop.load %s[%d] : memref<8xf32>
        %x2 = arith.mulf %r, %sv : f32
        %y = arith.addf %x1, %x2 : f32
        loop.store %y, %o[%t, %d] : memref<32x8xf32>
      }
    }
  }
  func.return %out : memref<32x8xf32>
}

// -----

// CHECK-LABEL: func.func @no_product
// CHECK:         loop.for %d = 0 to 8 {
// CHECK:           arith.cmpi ult, %d

func.func @no_product(%q: memref<8xf32>) -> memref<8xf32> {
  %out = memref.alloc() : memref<8xf32>
  loop.kernel @half (%o = %out : memref<8xf32>, %a = %q : memref<8xf32>) {
    %four = arith.constant 4 : index
    loop.for %d = 0 to 8 {
      %hi = loop.load %a[(%d mod 4) + 4] : memref<8xf32>
      %lo = loop.load %a[(%d - 4) mod 4] : memref<8xf32>
      %first = arith.cmpi ult, %d, %four : index
      %r = arith.select %first, %hi, %lo : f32
      loop.store %r, %o[%d] : memref<8xf32>
    }
  }
  func.return %out : memref<8xf32>
}

// -----

// CHECK-LABEL: func.func @not_equal
// CHECK:         loop.for %d = 0 to 4 {
// CHECK-NOT:       arith.cmpi ne, %d,
// CHECK:           %[[SHIFT:.*]] = arith.constant 4 : index
// CHECK-NEXT:      %[[AT:.*]] = arith.addi %d, %[[SHIFT]] : index
// CHECK-NEXT:      arith.cmpi ne, %[[AT]], %{{.*}} : index

func.func @not_equal(%x: memref<1x32xf32>, %W: memref<8x32xf32>) -> memref<8xf32> {
  %out = memref.alloc() : memref<8xf32>
  %p = memref.alloc() : memref<8x1xf32>
  loop.kernel @proj (%o = %p : memref<8x1xf32>, %a = %x : memref<1x32xf32>, %w = %W : memref<8x32xf32>) {
    loop.for %n = 0 to 8 {
      %acc = loop.reduce add %k = 0 to 32 : f32 {
        %av = loop.load %a[0, %k] : memref<1x32xf32>
        %wv = loop.load %w[%n, %k] : memref<8x32xf32>
        %m = arith.mulf %av, %wv : f32
        loop.yield %m : f32
      }
      loop.store %acc, %o[%n, 0] : memref<8x1xf32>
    }
  }
  loop.kernel @pick (%o = %out : memref<8xf32>, %q = %p : memref<8x1xf32>) {
    %four = arith.constant 4 : index
    loop.for %d = 0 to 8 {
      %v = loop.load %q[%d, 0] : memref<8x1xf32>
      %hi = loop.load %q[%d mod 4, 0] : memref<8x1xf32>
      %other = arith.cmpi ne, %d, %four : index
      %r = arith.select %other, %v, %hi : f32
      loop.store %r, %o[%d] : memref<8xf32>
    }
  }
  func.return %out : memref<8xf32>
}
