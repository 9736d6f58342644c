// RUN: llm-opt %s --split-input-file -p recompute-into-products | filecheck %s
// RUN: llm-opt %s --split-input-file -p recompute-into-products --check-numerics 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// RUN: llm-opt %s --split-input-file -p 'recompute-into-products,loop-to-tile,warp-gemv{rows=4}' | filecheck %s --check-prefix=GEMV
// RUN: llm-opt %s --split-input-file -p 'recompute-into-products,loop-to-tile,warp-gemv,tile-to-kernel,canonicalize,cse,kernel-to-cuda' --check-numerics 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// RUN: llm-opt %s --split-input-file -p 'recompute-into-products{min_bits=32}' | filecheck %s --check-prefix=WIDE
// A decode step's RMSNorm (one row) feeding matrix-vector products is recomputed inside
// them: its sum of squares beside each product, its map at each load of the normalised
// row. Inputs: (1) a norm and one projection; (2) a bf16 norm read by two products of one
// kernel (a gate/up pair: the statistics once, the map in each product); (3) a norm of two
// rows (a prompt): left alone; (4) a norm read outside a product (a residual): left alone.
// With min_bits=32 the f32 norm of (1) is recomputed and the bf16 one of (2) stays a kernel.

// WIDE-LABEL: func.func @proj
// WIDE-NOT:   loop.kernel @norm
// WIDE-LABEL: func.func @gate_up
// WIDE:       loop.kernel @norm

// CHECK-LABEL: func.func @proj
// CHECK-NEXT:  memref.alloc() : memref<1x64xf32>
// CHECK-NOT:   memref.alloc
// CHECK-NOT:   loop.kernel @norm
// CHECK:       loop.kernel @proj (%{{.*}} = %out : memref<1x64xf32>, %{{.*}} = %W : memref<64x256xf32>, %[[X:[a-z0-9_]+]] = %x : memref<1x256xf32>, %[[G:[a-z0-9_]+]] = %w : memref<256xf32>) {
// CHECK:         loop.for %n = 0 to 64 {
// CHECK-NEXT:      %[[ZERO:.*]] = arith.constant 0 : index
// CHECK:           %[[SUM:.*]] = loop.reduce add %r = 0 to 256 : f32 {
// CHECK-NEXT:        loop.load %[[X]][%[[ZERO]], %r] : memref<1x256xf32>
// CHECK:           %[[RS:.*]] = math.rsqrt
// CHECK:           loop.reduce add %k = 0 to 256 : f32 {
// CHECK-NEXT:        %[[XV:.*]] = loop.load %[[X]][%[[ZERO]], %k] : memref<1x256xf32>
// CHECK-NEXT:        %[[GV:.*]] = loop.load %[[G]][%k] : memref<256xf32>
// CHECK-NEXT:        %[[N:.*]] = arith.mulf %[[XV]], %[[RS]] : f32
// CHECK-NEXT:        %[[Y:.*]] = arith.mulf %[[N]], %[[GV]] : f32
// CHECK-NEXT:        loop.load %{{.*}}[%n, %k] : memref<64x256xf32>
// CHECK-NEXT:        arith.mulf %[[Y]], %{{.*}} : f32

// GEMV-LABEL: func.func @proj
// GEMV:       tile.kernel @proj grid [16, 1, 1] block [128, 1, 1]
// GEMV:         tile.forall (%i0, %nb) in [1, 16] over blocks {
// GEMV:           tile.coop_reduce add %r = 0 to 256 : f32 {
// GEMV:           math.rsqrt
// GEMV:           tile.forall (%{{[a-z0-9_]+}}, %l) in [4, 32] over block_threads {
// GEMV:       } {llmopt.gemv = {rows = 4 : i64, slices = 1 : i64, vector = 4 : i64}}

// NUM-NOT: FAIL
// NUM: recompute-into-products {{.*}} ok

func.func @proj(%x: memref<1x256xf32>, %w: memref<256xf32>, %W: memref<64x256xf32>) -> memref<1x64xf32> {
  %out = memref.alloc() : memref<1x64xf32>
  %t = memref.alloc() : memref<1x256xf32>
  loop.kernel @norm (%o = %t : memref<1x256xf32>, %a = %x : memref<1x256xf32>, %g = %w : memref<256xf32>) {
    %eps = arith.constant 1.0e-05 : f32
    %inv = arith.constant 3.906250e-03 : f32
    loop.for %i0 = 0 to 1 {
      %s = loop.reduce add %r = 0 to 256 : f32 {
        %v = loop.load %a[%i0, %r] : memref<1x256xf32>
        %sq = arith.mulf %v, %v : f32
        loop.yield %sq : f32
      }
      %mean = arith.mulf %s, %inv : f32
      %m = arith.addf %mean, %eps : f32
      %rs = math.rsqrt %m : f32
      loop.for %j = 0 to 256 {
        %v = loop.load %a[%i0, %j] : memref<1x256xf32>
        %gv = loop.load %g[%j] : memref<256xf32>
        %n = arith.mulf %v, %rs : f32
        %y = arith.mulf %n, %gv : f32
        loop.store %y, %o[%i0, %j] : memref<1x256xf32>
      }
    }
  }
  loop.kernel @proj (%o = %out : memref<1x64xf32>, %y = %t : memref<1x256xf32>, %wm = %W : memref<64x256xf32>) {
    loop.for %i0 = 0 to 1 {
      loop.for %n = 0 to 64 {
        %acc = loop.reduce add %k = 0 to 256 : f32 {
          %a = loop.load %y[%i0, %k] : memref<1x256xf32>
          %b = loop.load %wm[%n, %k] : memref<64x256xf32>
          %p = arith.mulf %a, %b : f32
          loop.yield %p : f32
        }
        loop.store %acc, %o[%i0, %n] : memref<1x64xf32>
      }
    }
  }
  func.return %out : memref<1x64xf32>
}

// -----

// CHECK-LABEL: func.func @gate_up
// CHECK-NOT:   loop.kernel @norm
// CHECK:       loop.for %n = 0 to 48 {
// CHECK-COUNT-1: loop.reduce add %r = 0 to 128 : f32
// CHECK:         loop.reduce add %k = 0 to 128 : f32
// CHECK:           arith.truncf
// CHECK:         loop.reduce add %k2 = 0 to 128 : f32
// CHECK:           arith.truncf
// CHECK-NOT:     loop.reduce

// GEMV-LABEL: func.func @gate_up
// GEMV:       tile.forall (%i0, %nb) in [1, 12] over blocks {
// GEMV-COUNT-1: tile.coop_reduce
// GEMV:       tile.forall (%{{[a-z0-9_]+}}, %l) in [4, 32] over block_threads {
// GEMV:       } {llmopt.gemv = {rows = 4 : i64, slices = 1 : i64, vector = 8 : i64}}

func.func @gate_up(%x: memref<1x128xbf16>, %w: memref<128xbf16>, %Wg: memref<48x128xbf16>, %Wu: memref<48x128xbf16>) -> memref<1x48xbf16> {
  %out = memref.alloc() : memref<1x48xbf16>
  %t = memref.alloc() : memref<1x128xbf16>
  loop.kernel @norm (%o = %t : memref<1x128xbf16>, %a = %x : memref<1x128xbf16>, %g = %w : memref<128xbf16>) {
    %eps = arith.constant 1.0e-05 : f32
    %inv = arith.constant 7.812500e-03 : f32
    loop.for %i0 = 0 to 1 {
      %s = loop.reduce add %r = 0 to 128 : f32 {
        %v = loop.load %a[%i0, %r] : memref<1x128xbf16>
        %e = arith.extf %v : bf16 to f32
        %sq = arith.mulf %e, %e : f32
        loop.yield %sq : f32
      }
      %mean = arith.mulf %s, %inv : f32
      %m = arith.addf %mean, %eps : f32
      %rs = math.rsqrt %m : f32
      loop.for %j = 0 to 128 {
        %v = loop.load %a[%i0, %j] : memref<1x128xbf16>
        %gv = loop.load %g[%j] : memref<128xbf16>
        %e = arith.extf %v : bf16 to f32
        %n = arith.mulf %e, %rs : f32
        %nb = arith.truncf %n : f32 to bf16
        %ne = arith.extf %nb : bf16 to f32
        %ge = arith.extf %gv : bf16 to f32
        %y = arith.mulf %ge, %ne : f32
        %yb = arith.truncf %y : f32 to bf16
        loop.store %yb, %o[%i0, %j] : memref<1x128xbf16>
      }
    }
  }
  loop.kernel @gate_up (%o = %out : memref<1x48xbf16>, %y = %t : memref<1x128xbf16>, %wg = %Wg : memref<48x128xbf16>, %wu = %Wu : memref<48x128xbf16>) {
    loop.for %i0 = 0 to 1 {
      loop.for %n = 0 to 48 {
        %g = loop.reduce add %k = 0 to 128 : f32 {
          %a = loop.load %y[0, %k] : memref<1x128xbf16>
          %b = loop.load %wg[%n, %k] : memref<48x128xbf16>
          %ae = arith.extf %a : bf16 to f32
          %be = arith.extf %b : bf16 to f32
          %p = arith.mulf %ae, %be : f32
          loop.yield %p : f32
        }
        %u = loop.reduce add %k2 = 0 to 128 : f32 {
          %a = loop.load %y[0, %k2] : memref<1x128xbf16>
          %b = loop.load %wu[%n, %k2] : memref<48x128xbf16>
          %ae = arith.extf %a : bf16 to f32
          %be = arith.extf %b : bf16 to f32
          %p = arith.mulf %ae, %be : f32
          loop.yield %p : f32
        }
        %gu = arith.mulf %g, %u : f32
        %r = arith.truncf %gu : f32 to bf16
        loop.store %r, %o[%i0, %n] : memref<1x48xbf16>
      }
    }
  }
  func.return %out : memref<1x48xbf16>
}

// -----

// CHECK-LABEL: func.func @prompt
// CHECK:       memref.alloc() : memref<2x64xf32>
// CHECK:       loop.kernel @norm
// CHECK:       loop.kernel @proj

func.func @prompt(%x: memref<2x64xf32>, %W: memref<16x64xf32>) -> memref<2x16xf32> {
  %out = memref.alloc() : memref<2x16xf32>
  %t = memref.alloc() : memref<2x64xf32>
  loop.kernel @norm (%o = %t : memref<2x64xf32>, %a = %x : memref<2x64xf32>) {
    loop.for %i0 = 0 to 2 {
      %s = loop.reduce add %r = 0 to 64 : f32 {
        %v = loop.load %a[%i0, %r] : memref<2x64xf32>
        %sq = arith.mulf %v, %v : f32
        loop.yield %sq : f32
      }
      %rs = math.rsqrt %s : f32
      loop.for %j = 0 to 64 {
        %v = loop.load %a[%i0, %j] : memref<2x64xf32>
        %n = arith.mulf %v, %rs : f32
        loop.store %n, %o[%i0, %j] : memref<2x64xf32>
      }
    }
  }
  loop.kernel @proj (%o = %out : memref<2x16xf32>, %y = %t : memref<2x64xf32>, %wm = %W : memref<16x64xf32>) {
    loop.for %m = 0 to 2 {
      loop.for %n = 0 to 16 {
        %acc = loop.reduce add %k = 0 to 64 : f32 {
          %a = loop.load %y[%m, %k] : memref<2x64xf32>
          %b = loop.load %wm[%n, %k] : memref<16x64xf32>
          %p = arith.mulf %a, %b : f32
          loop.yield %p : f32
        }
        loop.store %acc, %o[%m, %n] : memref<2x16xf32>
      }
    }
  }
  func.return %out : memref<2x16xf32>
}

// -----

// CHECK-LABEL: func.func @residual
// CHECK:       loop.kernel @norm
// CHECK:       loop.kernel @add

func.func @residual(%x: memref<1x64xf32>) -> memref<1x64xf32> {
  %out = memref.alloc() : memref<1x64xf32>
  %t = memref.alloc() : memref<1x64xf32>
  loop.kernel @norm (%o = %t : memref<1x64xf32>, %a = %x : memref<1x64xf32>) {
    loop.for %i0 = 0 to 1 {
      %s = loop.reduce add %r = 0 to 64 : f32 {
        %v = loop.load %a[%i0, %r] : memref<1x64xf32>
        %sq = arith.mulf %v, %v : f32
        loop.yield %sq : f32
      }
      %rs = math.rsqrt %s : f32
      loop.for %j = 0 to 64 {
        %v = loop.load %a[%i0, %j] : memref<1x64xf32>
        %n = arith.mulf %v, %rs : f32
        loop.store %n, %o[%i0, %j] : memref<1x64xf32>
      }
    }
  }
  loop.kernel @add (%o = %out : memref<1x64xf32>, %y = %t : memref<1x64xf32>, %a = %x : memref<1x64xf32>) {
    loop.for %i0 = 0 to 1 {
      loop.for %j = 0 to 64 {
        %u = loop.load %y[%i0, %j] : memref<1x64xf32>
        %v = loop.load %a[%i0, %j] : memref<1x64xf32>
        %s = arith.addf %u, %v : f32
        loop.store %s, %o[%i0, %j] : memref<1x64xf32>
      }
    }
  }
  func.return %out : memref<1x64xf32>
}
