// RUN: sed -e '/^\/\/ ERRORS BELOW/,$d' %s | llm-opt -p lengths-in-memory | filecheck %s
// RUN: sed -e '/^\/\/ ERRORS BELOW/,$d' %s | llm-opt -p lengths-in-memory --check-numerics --check-numerics-at 1,5,64 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// RUN: sed -e '/^\/\/ ERRORS BELOW/,$d' %s | llm-opt -p lengths-in-memory,kernel-to-cuda -t cuda | filecheck %s --check-prefix=CUDA
// RUN: sed -e '/^\/\/ ERRORS BELOW/,$d' %s | llm-opt -p programmatic-launch,lengths-in-memory | filecheck %s --check-prefix=PDL
// RUN: sed -e '/^\/\/ ERRORS BELOW/,$d' %s | llm-opt -p fuse-tails,lengths-in-memory | filecheck %s --check-prefix=TAIL
// RUN: sed -e '/^\/\/ ERRORS BELOW/,$d' %s | llm-opt -p fuse-tails,lengths-in-memory --check-numerics --check-numerics-at 1,5,64 2>&1 >/dev/null | filecheck %s --check-prefix=TAILNUM
// RUN: sed -n '/^\/\/ ERRORS BELOW/,$p' %s | not llm-opt -p lengths-in-memory 2>&1 >/dev/null | filecheck %s --check-prefix=ERR
// A decode-like step at a runtime length %ctx: a grid-stride kernel over ctx rows (its grid
// computed from ctx on the host), a kernel given the position ctx - 1 and a kernel launched
// with the length at one site and a constant at another. After the pass no launch takes a
// length: the host stores ctx into %lengths, the kernels load it and redo the arithmetic.

// The rows kernel: row i of out = 2 * row i of cache, over ctx rows in a grid-stride loop.
kernel.func @rows(%cache: memref<?x4xf32>, %out: memref<?x4xf32>, %n: index) block [4, 1, 1] {
  %b = kernel.block_id x
  %g = kernel.grid_dim x
  %t = kernel.thread_id x
  %two = arith.constant 2.0 : f32
  scf.for %i = %b to %n step %g {
    %v = kernel.load %cache[%i, %t] : memref<?x4xf32>
    %w = arith.mulf %v, %two : f32
    kernel.store %w, %out[%i, %t] : memref<?x4xf32>
  }
  kernel.return
}
// The last kernel: out = row %p of the cache.
kernel.func @last(%cache: memref<?x4xf32>, %out: memref<4xf32>, %p: index) block [4, 1, 1] {
  %t = kernel.thread_id x
  %v = kernel.load %cache[%p, %t] : memref<?x4xf32>
  kernel.store %v, %out[%t] : memref<4xf32>
  kernel.return
}
// The scale kernel: out[t] = in[t] * k, k a scalar.
kernel.func @scale(%in: memref<4xf32>, %out: memref<4xf32>, %k: index) block [4, 1, 1] {
  %t = kernel.thread_id x
  %v = kernel.load %in[%t] : memref<4xf32>
  %ki = arith.index_cast %k : index to i64
  %kf = arith.sitofp %ki : i64 to f32
  %w = arith.mulf %v, %kf : f32
  kernel.store %w, %out[%t] : memref<4xf32>
  kernel.return
}
func.func @step(%cache: memref<?x4xf32> {llmopt.input = "cache", llmopt.dynamic = ["ctx"]}, %ctx: index {llmopt.symbol = "ctx", llmopt.max = 64 : i64}) -> (memref<4xf32>, memref<4xf32>) {
  %doubled = memref.alloc(%ctx) : memref<?x4xf32>
  %c2 = arith.constant 2 : index
  %grid = arith.ceildivui %ctx, %c2 : index
  kernel.launch @rows grid [%grid max 32, 1, 1] block [4, 1, 1] smem 0 (%cache, %doubled, %ctx) : memref<?x4xf32>, memref<?x4xf32>, index
  %m1 = arith.constant -1 : index
  %pos = arith.addi %ctx, %m1 : index
  %row = memref.alloc() : memref<4xf32>
  kernel.launch @last grid [1, 1, 1] block [4, 1, 1] smem 0 (%doubled, %row, %pos) : memref<?x4xf32>, memref<4xf32>, index
  %a = memref.alloc() : memref<4xf32>
  kernel.launch @scale grid [1, 1, 1] block [4, 1, 1] smem 0 (%row, %a, %ctx) : memref<4xf32>, memref<4xf32>, index
  %b = memref.alloc() : memref<4xf32>
  %c3 = arith.constant 3 : index
  kernel.launch @scale grid [1, 1, 1] block [4, 1, 1] smem 0 (%row, %b, %c3) : memref<4xf32>, memref<4xf32>, index
  func.return %a, %b : memref<4xf32>, memref<4xf32>
}

// The rows kernel loads ctx, computes its old grid and guards its blocks with it; the grid
// is what it read as kernel.grid_dim.
// CHECK:      kernel.func @rows(%cache: memref<?x4xf32>, %out: memref<?x4xf32>, %lengths: memref<1xindex>) block [4, 1, 1] {
// CHECK-NEXT:   %{{.*}} = arith.constant 0 : index
// CHECK-NEXT:   %ctx = kernel.load %lengths[%{{.*}}] {llmopt.length = "ctx"} : memref<1xindex>
// CHECK-NEXT:   %[[TWO:.*]] = arith.constant 2 : index
// CHECK-NEXT:   %[[G:.*]] = arith.ceildivui %ctx, %[[TWO]] : index
// CHECK-NEXT:   %[[B:.*]] = kernel.block_id x
// CHECK-NEXT:   %[[IN:.*]] = arith.cmpi ult, %[[B]], %[[G]] : index
// CHECK-NEXT:   scf.if %[[IN]] {
// CHECK:          scf.for %i = %{{.*}} to %ctx step %[[G]] {
// The last kernel computes the position itself.
// CHECK:      kernel.func @last(%cache: memref<?x4xf32>, %out: memref<4xf32>, %lengths: memref<1xindex>)
// CHECK:        %[[P:.*]] = arith.addi %ctx, %{{.*}} : index
// CHECK:        kernel.load %cache[%[[P]], %{{.*}}] : memref<?x4xf32>
// The scale kernel keeps its constant launch and gets a clone for the length.
// CHECK:      kernel.func @scale(%in: memref<4xf32>, %out: memref<4xf32>, %k: index)
// CHECK:      kernel.func @scale_l0(%in: memref<4xf32>, %out: memref<4xf32>, %lengths: memref<1xindex>)
// CHECK:        arith.index_cast %ctx : index to i64
// The host writes ctx first; the grid is at its maximum and no launch passes ctx.
// CHECK:      func.func @step
// CHECK-NEXT:   %lengths = memref.alloc() : memref<1xindex>
// CHECK-NEXT:   %{{.*}} = arith.constant 0 : index
// CHECK-NEXT:   memref.store %ctx, %lengths[%{{.*}}] : memref<1xindex>
// CHECK:        kernel.launch @rows grid [32, 1, 1] block [4, 1, 1] smem 0 (%cache, %doubled, %lengths)
// CHECK:        kernel.launch @last grid [1, 1, 1] block [4, 1, 1] smem 0 (%doubled, %row, %lengths)
// CHECK:        kernel.launch @scale_l0 grid [1, 1, 1] {{.*}} (%row, %a, %lengths)
// CHECK:        kernel.launch @scale grid [1, 1, 1] {{.*}} (%row, %b, %c3)

// NUM: lengths-in-memory {{.*}} ok

// After programmatic-launch the wait stays first: the lengths are loaded after it, and the
// guard of the blocks beyond the grid does not take it in.
// PDL:      kernel.func @rows(%cache: memref<?x4xf32>, %out: memref<?x4xf32>, %lengths: memref<1xindex>) block [4, 1, 1] {
// PDL-NEXT:   kernel.wait_prior_grids
// PDL-NEXT:   kernel.launch_dependents
// PDL-NEXT:   %{{.*}} = arith.constant 0 : index
// PDL-NEXT:   %ctx = kernel.load %lengths[%{{.*}}] {llmopt.length = "ctx"} : memref<1xindex>
// PDL:        scf.if
// PDL:      kernel.func @scale_l0(
// PDL-NEXT:   kernel.wait_prior_grids
// PDL:        kernel.launch @rows grid [32, 1, 1] block [4, 1, 1] smem {{[0-9]+}} (%cache, %doubled, %lengths) {programmatic}
// PDL:        kernel.launch @scale_l0 grid [1, 1, 1] {{.*}} (%row, %a, %lengths) {programmatic}

// With fuse-tails first, the rows kernel runs the other three in its last block: the guard
// of the blocks beyond its grid leaves the kernel.last_block out, since every block of
// the grid arrives there, idle or not (the op's verifier wants it at the kernel's top level).
// TAIL:      kernel.func @rows__last_last__last_scale__last_scale(
// TAIL:        %[[B:.*]] = kernel.block_id x
// TAIL-NEXT:   %[[IN:.*]] = arith.cmpi ult, %[[B]], %{{.*}} : index
// TAIL-NEXT:   scf.if %[[IN]] {
// TAIL:        kernel.last_block %tail_counter : memref<1xi32> {
// TAIL:        kernel.launch @rows__last_last__last_scale__last_scale grid [32, 1, 1]
// TAILNUM: fuse-tails {{.*}} ok
// TAILNUM: lengths-in-memory {{.*}} ok

// In CUDA the length is a load of the lengths buffer, and the ? strides use it.
// CUDA:      void __launch_bounds__(4) rows(
// CUDA:          const long long* __restrict__ lengths) {
// CUDA-NEXT:   const long long ctx = lengths[0];

// ERRORS BELOW

kernel.func @k(%o: memref<?xf32>, %n: index) block [32, 1, 1] {
  kernel.return
}
func.func @f(%ctx: index {llmopt.symbol = "ctx", llmopt.max = 64 : i64}) -> memref<?xf32> {
  %o = memref.alloc(%ctx) : memref<?xf32>
  %c8 = arith.constant 8 : index
  %small = arith.cmpi ule, %ctx, %c8 : index
  scf.if %small {
    kernel.launch @k grid [1, 1, 1] block [32, 1, 1] smem 0 (%o, %ctx) : memref<?xf32>, index
  }
  func.return %o : memref<?xf32>
}
// ERR: the host chooses between kernels by length here
