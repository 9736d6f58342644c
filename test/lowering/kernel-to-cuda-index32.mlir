// RUN: llm-opt %s --split-input-file -p "kernel-to-cuda{index_bitwidth=32}" -t cuda | filecheck %s
// RUN: llm-opt %s --split-input-file -p "kernel-to-cuda{index_bitwidth=64}" -t cuda | filecheck %s --check-prefix=WIDE
// RUN: llm-opt %s --split-input-file -p kernel-to-cuda -t cuda | filecheck %s --check-prefix=DEFAULT
// RUN: not llm-opt %s --split-input-file -p "kernel-to-cuda{index_bitwidth=16}" 2>&1 >/dev/null | filecheck %s --check-prefix=ERR
// kernel-to-cuda{index_bitwidth=32} computes a kernel's indices in 32-bit int when interval
// arithmetic over its shape proves every index, loop variable and buffer offset in range;
// otherwise in long long. By default (index_bitwidth unset) kernels of 16-bit tensor-core
// products and kernels that keep no register array (no kernel.local: no product) are
// narrowed where proven; the others (an f32 product's register tile) stay long long.

// ERR: llm-opt: error: invalid options for pass 'kernel-to-cuda': index_bitwidth must be one of 32, 64 or 0 (not set), got 16

// A grid-stride loop launched on 4 blocks: i < 1000 + 4·256, offsets < 1000.
func.func @main(%x: memref<1000xf32>) -> memref<1000xf32> {
  %y = memref.alloc() : memref<1000xf32>
  kernel.launch @grid_stride grid [4, 1, 1] block [256, 1, 1] smem 0 (%x, %y) : memref<1000xf32>, memref<1000xf32>
  func.return %y : memref<1000xf32>
}
kernel.func @grid_stride(%x: memref<1000xf32>, %y: memref<1000xf32>) block [256, 1, 1] {
  %tid = kernel.thread_id x
  %bid = kernel.block_id x
  %bdim = kernel.block_dim x
  %gdim = kernel.grid_dim x
  %c1000 = arith.constant 1000 : index
  %c7 = arith.constant 7 : index
  %t0 = arith.muli %bid, %bdim : index
  %start = arith.addi %t0, %tid : index
  %stride = arith.muli %gdim, %bdim : index
  scf.for %i = %start to %c1000 step %stride {
    %r = arith.remui %i, %c7 : index
    %v = kernel.load %x[%i] : memref<1000xf32>
    %w = kernel.load %x[%r] : memref<1000xf32>
    %s = arith.addf %v, %w : f32
    kernel.store %s, %y[%i] : memref<1000xf32>
  }
  kernel.return
}

// CHECK-LABEL: grid_stride(
// CHECK:         const int bdim = (int)blockDim.x;
// CHECK-NEXT:    const int stride = (int)gridDim.x * bdim;
// CHECK-NEXT:    for (int i = (int)blockIdx.x * bdim + (int)threadIdx.x; i < 1000; i += stride) {
// CHECK-NEXT:      y[i] = x[i] + x[(int)((unsigned int)i % 7u)];
// CHECK-NOT:   long long
// WIDE-LABEL:  grid_stride(
// WIDE:          for (long long i = (long long)blockIdx.x * bdim + (long long)threadIdx.x; i < 1000; i += stride) {
// DEFAULT-LABEL: grid_stride(
// DEFAULT:         for (int i = (int)blockIdx.x * bdim + (int)threadIdx.x; i < 1000; i += stride) {

// -----

// A kernel that keeps a register array (an f32 product's accumulators) stays long long by
// default, though its indices fit.
func.func @main(%x: memref<64x8xf32>) -> memref<64xf32> {
  %y = memref.alloc() : memref<64xf32>
  kernel.launch @register_array grid [1, 1, 1] block [64, 1, 1] smem 0 (%x, %y) : memref<64x8xf32>, memref<64xf32>
  func.return %y : memref<64xf32>
}
kernel.func @register_array(%x: memref<64x8xf32>, %y: memref<64xf32>) block [64, 1, 1] {
  %t = kernel.thread_id x
  %c0 = arith.constant 0 : index
  %acc = kernel.local : memref<1xf32>
  %v = kernel.load %x[%t, %c0] : memref<64x8xf32>
  kernel.store %v, %acc[%c0] : memref<1xf32>
  %w = kernel.load %acc[%c0] : memref<1xf32>
  kernel.store %w, %y[%t] : memref<64xf32>
  kernel.return
}

// CHECK-LABEL: register_array(
// CHECK:         const int t = (int)threadIdx.x;
// DEFAULT-LABEL: register_array(
// DEFAULT:         const long long t = (long long)threadIdx.x;

// -----

// Two launches that fuse-launches merged: the second tests v = blockIdx.x - 4 <u 2, and v
// has no use outside that branch, so v is in [0, 2) there: the unsigned remainder of its
// index sees no negative operand.
func.func @main(%x: memref<1024xf32>, %z: memref<512xf32>) -> memref<1024xf32> {
  kernel.launch @merged grid [6, 1, 1] block [256, 1, 1] smem 0 (%x, %z) : memref<1024xf32>, memref<512xf32>
  func.return %x : memref<1024xf32>
}
kernel.func @merged(%x: memref<1024xf32>, %z: memref<512xf32>) block [256, 1, 1] {
  %bid = kernel.block_id x
  %tid = kernel.thread_id x
  %c4 = arith.constant 4 : index
  %c2 = arith.constant 2 : index
  %c256 = arith.constant 256 : index
  %first = arith.cmpi ult, %bid, %c4 : index
  scf.if %first {
    %t0 = arith.muli %bid, %c256 : index
    %i = arith.addi %t0, %tid : index
    %v = kernel.load %x[%i] : memref<1024xf32>
    kernel.store %v, %x[%i] : memref<1024xf32>
  } else {
    %v2 = arith.subi %bid, %c4 : index
    %second = arith.cmpi ult, %v2, %c2 : index
    scf.if %second {
      %t1 = arith.muli %v2, %c256 : index
      %j = arith.addi %t1, %tid : index
      %c128 = arith.constant 128 : index
      %col = arith.remui %j, %c128 : index
      %w = kernel.load %z[%col] : memref<512xf32>
      kernel.store %w, %z[%j] : memref<512xf32>
    }
  }
  kernel.return
}

// CHECK-LABEL: merged(
// CHECK:         const int bid = (int)blockIdx.x;
// CHECK:         const int v2 = bid - 4;
// CHECK:         z[j] = z[(int)((unsigned int)j % 128u)];
// CHECK-NOT:   long long

// -----

// Without a launch the grid, hence blockIdx, is unbounded: long long.
kernel.func @no_launch(%x: memref<1000xf32>) block [256, 1, 1] {
  %bid = kernel.block_id x
  %v = kernel.load %x[%bid] : memref<1000xf32>
  kernel.store %v, %x[%bid] : memref<1000xf32>
  kernel.return
}

// CHECK-LABEL: no_launch(
// CHECK:         const long long bid = (long long)blockIdx.x;

// -----

// An index read from memory (a token id) is unbounded: the gather stays long long.
func.func @main(%ids: memref<8xi64>, %table: memref<32000x64xf32>) -> memref<8x64xf32> {
  %y = memref.alloc() : memref<8x64xf32>
  kernel.launch @gather grid [8, 1, 1] block [64, 1, 1] smem 0 (%ids, %table, %y) : memref<8xi64>, memref<32000x64xf32>, memref<8x64xf32>
  func.return %y : memref<8x64xf32>
}
kernel.func @gather(%ids: memref<8xi64>, %table: memref<32000x64xf32>, %y: memref<8x64xf32>) block [64, 1, 1] {
  %row = kernel.block_id x
  %col = kernel.thread_id x
  %id = kernel.load %ids[%row] : memref<8xi64>
  %i = arith.index_cast %id : i64 to index
  %v = kernel.load %table[%i, %col] : memref<32000x64xf32>
  kernel.store %v, %y[%row, %col] : memref<8x64xf32>
  kernel.return
}

// CHECK-LABEL: gather(
// CHECK:         y[row * 64 + col] = table[(long long)ids[row] * 64 + col];

// -----

// An offset that may pass 2³¹ - 1 (65535·32769 + 255 ≥ 2³¹) keeps long long.
func.func @main(%x: memref<65536x32769xf32>) -> memref<65536x32769xf32> {
  kernel.launch @huge grid [65536, 1, 1] block [256, 1, 1] smem 0 (%x) : memref<65536x32769xf32>
  func.return %x : memref<65536x32769xf32>
}
kernel.func @huge(%x: memref<65536x32769xf32>) block [256, 1, 1] {
  %row = kernel.block_id x
  %col = kernel.thread_id x
  %v = kernel.load %x[%row, %col] : memref<65536x32769xf32>
  kernel.store %v, %x[%row, %col] : memref<65536x32769xf32>
  kernel.return
}

// CHECK-LABEL: huge(
// CHECK:         const long long row = (long long)blockIdx.x;

// -----

// An unsigned remainder of a value that may be negative: (unsigned) and (unsigned long long)
// of it differ, so long long.
func.func @main(%x: memref<64xf32>) -> memref<64xf32> {
  kernel.launch @negative grid [1, 1, 1] block [64, 1, 1] smem 0 (%x) : memref<64xf32>
  func.return %x : memref<64xf32>
}
kernel.func @negative(%x: memref<64xf32>) block [64, 1, 1] {
  %t = kernel.thread_id x
  %c32 = arith.constant 32 : index
  %c4 = arith.constant 4 : index
  %d = arith.subi %t, %c32 : index
  %q = arith.remui %d, %c4 : index
  %v = kernel.load %x[%t] : memref<64xf32>
  kernel.store %v, %x[%q] : memref<64xf32>
  kernel.return
}

// CHECK-LABEL: negative(
// CHECK:         const long long t = (long long)threadIdx.x;
