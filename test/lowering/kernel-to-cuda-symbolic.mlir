// RUN: sed -e '/^\/\/ ERRORS BELOW/,$d' %s | llm-opt -p kernel-to-cuda -t cuda | filecheck %s
// RUN: sed -e '/^\/\/ ERRORS BELOW/,$d' %s | llm-opt -p "kernel-to-cuda{index_bitwidth=64}" -t cuda | filecheck %s --check-prefix=WIDE
// RUN: sed -e '/^\/\/ ERRORS BELOW/,$d' %s | llm-opt -p kernel-to-cuda > %t
// RUN: llm-opt %t | diff - %t
// RUN: sed -e '/^\/\/ TWO LENGTHS/,$d' %s | not llm-opt --split-input-file -p kernel-to-cuda 2>&1 >/dev/null | filecheck %s --check-prefix=ERR
// RUN: sed -n '/^\/\/ TWO LENGTHS/,$p' %s | not llm-opt -p kernel-to-cuda 2>&1 >/dev/null | filecheck %s --check-prefix=TWO
// A symbolic length at CUDA IR: the length is an int parameter of the __global__ function,
// and every ? extent of a buffer is that length, so strides that span a ? dim are products
// with it (row-major at the length the program runs with). The length is at most the
// symbol's llmopt.max (128), so this kernel without a register array computes its indices in int
// by default; with 64-bit indices the length is widened to a long long once.

kernel.func @scores(%s: memref<1x4x?x?xf32>, %q: memref<1x2x?x16xf32>, %o: memref<1x4x?x?xf32>, %n: index) block [128, 1, 1] {
  %0 = kernel.block_id x
  %1 = kernel.thread_id x
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c3 = arith.constant 3 : index
  %v = kernel.load %s[%c0, %c3, %0, %1] : memref<1x4x?x?xf32>
  %w = kernel.load %q[%c0, %c1, %0, %c3] : memref<1x2x?x16xf32>
  %x = arith.addf %v, %w : f32
  kernel.store %x, %o[%c0, %c3, %0, %1] : memref<1x4x?x?xf32>
  kernel.return
}
func.func @forward(%x: memref<1x4x?x?xf32> {llmopt.input = "x", llmopt.dynamic = ["seq", "seq"]}, %y: memref<1x2x?x16xf32> {llmopt.input = "y", llmopt.dynamic = ["seq"]}, %seq: index {llmopt.symbol = "seq", llmopt.max = 128 : i64}) -> memref<1x4x?x?xf32> {
  %out = memref.alloc(%seq, %seq) : memref<1x4x?x?xf32>
  kernel.launch @scores grid [%seq max 128, 1, 1] block [128, 1, 1] smem 0 (%x, %y, %out, %seq) : memref<1x4x?x?xf32>, memref<1x2x?x16xf32>, memref<1x4x?x?xf32>, index
  func.return %out : memref<1x4x?x?xf32>
}

// CHECK:      extern "C" __global__ void __launch_bounds__(128) scores(
// CHECK-NEXT:     const float* __restrict__ s,
// CHECK-NEXT:     const float* __restrict__ q,
// CHECK-NEXT:     float* __restrict__ o,
// CHECK-NEXT:     int n) {
// CHECK-NEXT:   const int bid = (int)blockIdx.x;
// CHECK:        o[3 * n * n + bid * n + tid] = s[3 * n * n + bid * n + tid] + q[16 * n + bid * 16 + 3];
// WIDE:         int n) {
// WIDE-NEXT:    const long long n_index = (long long)n;
// WIDE:         o[3 * n_index * n_index + bid * n_index + tid] = s[3 * n_index * n_index + bid * n_index + tid] + q[16 * n_index + bid * 16 + 3];

// ERRORS BELOW

// -----

kernel.func @copy(%a: memref<2x?xf32>, %o: memref<2x?xf32>, %n: index) block [32, 1, 1] {
  %0 = kernel.thread_id x
  %c1 = arith.constant 1 : index
  %v = kernel.load %a[%c1, %0] : memref<2x?xf32>
  kernel.store %v, %o[%c1, %0] : memref<2x?xf32>
  kernel.return
}
func.func @forward(%x: memref<2x?xf32> {llmopt.input = "x", llmopt.dynamic = ["seq"]}, %seq: index {llmopt.symbol = "seq", llmopt.max = 32 : i64}) -> memref<2x?xf32> {
  %c2 = arith.constant 2 : index
  %m = arith.muli %seq, %c2 : index
  %out = memref.alloc(%m) : memref<2x?xf32>
  kernel.launch @copy grid [1, 1, 1] block [32, 1, 1] smem 0 (%x, %out, %seq) : memref<2x?xf32>, memref<2x?xf32>, index
  func.return %out : memref<2x?xf32>
}
// A buffer whose only ? is its first extent (memref<?xf32>) has static strides: such a
// kernel needs no length, and its extent is not checked.
// ERR: operand #1 of the launch of @copy has a ? extent that is not the length it passes (operand #2); its strides would be wrong

// TWO LENGTHS

kernel.func @two(%a: memref<2x?xf32>, %n: index, %m: index) block [32, 1, 1] {
  kernel.return
}
func.func @forward(%x: memref<2x?xf32> {llmopt.input = "x", llmopt.dynamic = ["seq"]}, %seq: index {llmopt.symbol = "seq", llmopt.max = 32 : i64}) {
  kernel.launch @two grid [1, 1, 1] block [32, 1, 1] smem 0 (%x, %seq, %seq) : memref<2x?xf32>, index, index
  func.return
}
// TWO: kernel @two has buffers with ? extents and 2 lengths (index parameters or lengths it loads); kernel-to-cuda binds every ? extent to one length
