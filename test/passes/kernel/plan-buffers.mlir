// RUN: llm-opt %s --split-input-file -p plan-buffers | filecheck %s
// Temporaries whose lifetimes (first use .. last use) do not overlap share one allocation;
// results, arguments and buffers used by one same op never do.

// A chain of temporaries: %2 takes over %0 (dead after the second launch); the returned
// buffer keeps its own allocation.
func.func @chain(%x: memref<64xf32>) -> memref<64xf32> {
  %0 = memref.alloc() : memref<64xf32>
  kernel.launch @k grid [1, 1, 1] block [64, 1, 1] smem 0 (%0, %x) : memref<64xf32>, memref<64xf32>
  %1 = memref.alloc() : memref<64xf32>
  kernel.launch @k grid [1, 1, 1] block [64, 1, 1] smem 0 (%1, %0) : memref<64xf32>, memref<64xf32>
  %2 = memref.alloc() : memref<64xf32>
  kernel.launch @k grid [1, 1, 1] block [64, 1, 1] smem 0 (%2, %1) : memref<64xf32>, memref<64xf32>
  %3 = memref.alloc() : memref<64xf32>
  kernel.launch @k grid [1, 1, 1] block [64, 1, 1] smem 0 (%3, %2) : memref<64xf32>, memref<64xf32>
  func.return %3 : memref<64xf32>
}

// CHECK-LABEL: func.func @chain
// CHECK-NEXT:  %[[A:.*]] = memref.alloc() : memref<64xf32>
// CHECK-NEXT:  kernel.launch @k {{.*}} (%[[A]], %x)
// CHECK-NEXT:  %[[B:.*]] = memref.alloc() : memref<64xf32>
// CHECK-NEXT:  kernel.launch @k {{.*}} (%[[B]], %[[A]])
// CHECK-NEXT:  kernel.launch @k {{.*}} (%[[A]], %[[B]])
// CHECK-NEXT:  %[[R:.*]] = memref.alloc() : memref<64xf32>
// CHECK-NEXT:  kernel.launch @k {{.*}} (%[[R]], %[[A]])
// CHECK-NEXT:  func.return %[[R]]

// -----

// The same element type and count in another shape: reused through a view, inserted before
// the first use. A buffer of another size is not reused.
func.func @views(%x: memref<64xf32>) -> memref<64xf32> {
  %0 = memref.alloc() : memref<64xf32>
  kernel.launch @k grid [1, 1, 1] block [64, 1, 1] smem 0 (%0, %x) : memref<64xf32>, memref<64xf32>
  %1 = memref.alloc() : memref<64xf32>
  kernel.launch @k grid [1, 1, 1] block [64, 1, 1] smem 0 (%1, %0) : memref<64xf32>, memref<64xf32>
  %2 = memref.alloc() : memref<8x8xf32>
  %3 = memref.alloc() : memref<32xf32>
  kernel.launch @m grid [1, 1, 1] block [64, 1, 1] smem 0 (%2, %1) : memref<8x8xf32>, memref<64xf32>
  kernel.launch @n grid [1, 1, 1] block [64, 1, 1] smem 0 (%3, %2) : memref<32xf32>, memref<8x8xf32>
  %4 = memref.alloc() : memref<64xf32>
  kernel.launch @p grid [1, 1, 1] block [64, 1, 1] smem 0 (%4, %3) : memref<64xf32>, memref<32xf32>
  func.return %4 : memref<64xf32>
}

// CHECK-LABEL: func.func @views
// CHECK:       %[[A:.*]] = memref.alloc() : memref<64xf32>
// CHECK:       %[[B:.*]] = memref.alloc() : memref<64xf32>
// CHECK-NEXT:  kernel.launch @k {{.*}} (%[[B]], %[[A]])
// CHECK-NEXT:  %[[S:.*]] = memref.alloc() : memref<32xf32>
// CHECK-NEXT:  %[[V:.*]] = memref.expand_shape %[[A]] {{.*}} output_shape [8, 8] : memref<64xf32> into memref<8x8xf32>
// CHECK-NEXT:  kernel.launch @m {{.*}} (%[[V]], %[[B]])
// CHECK-NEXT:  kernel.launch @n {{.*}} (%[[S]], %[[V]])
// CHECK-NEXT:  %[[R:.*]] = memref.alloc() : memref<64xf32>
// CHECK-NEXT:  kernel.launch @p {{.*}} (%[[R]], %[[S]])

// -----

// Lifetimes that touch at one launch overlap: the launch that reads %0 for the last time
// writes %1 into its own buffer (no in-place aliasing).
func.func @touching(%x: memref<64xf32>) -> memref<64xf32> {
  %0 = memref.alloc() : memref<64xf32>
  kernel.launch @k grid [1, 1, 1] block [64, 1, 1] smem 0 (%0, %x) : memref<64xf32>, memref<64xf32>
  %1 = memref.alloc() : memref<64xf32>
  kernel.launch @k grid [1, 1, 1] block [64, 1, 1] smem 0 (%1, %0) : memref<64xf32>, memref<64xf32>
  %2 = memref.alloc() : memref<64xf32>
  kernel.launch @k grid [1, 1, 1] block [64, 1, 1] smem 0 (%2, %1) : memref<64xf32>, memref<64xf32>
  func.return %2 : memref<64xf32>
}

// CHECK-LABEL: func.func @touching
// CHECK-COUNT-3: memref.alloc()

// -----

// A returned buffer (here through a view) is never handed to a later temporary, even once
// the function no longer touches it; arguments are never planned.
func.func @results(%x: memref<64xf32>) -> (memref<8x8xf32>, memref<64xf32>) {
  %0 = memref.alloc() : memref<64xf32>
  kernel.launch @k grid [1, 1, 1] block [64, 1, 1] smem 0 (%0, %x) : memref<64xf32>, memref<64xf32>
  %v = memref.expand_shape %0 [[0, 1]] output_shape [8, 8] : memref<64xf32> into memref<8x8xf32>
  %1 = memref.alloc() : memref<64xf32>
  kernel.launch @k grid [1, 1, 1] block [64, 1, 1] smem 0 (%1, %x) : memref<64xf32>, memref<64xf32>
  %2 = memref.alloc() : memref<64xf32>
  kernel.launch @k grid [1, 1, 1] block [64, 1, 1] smem 0 (%2, %1) : memref<64xf32>, memref<64xf32>
  func.return %v, %2 : memref<8x8xf32>, memref<64xf32>
}

// CHECK-LABEL: func.func @results
// CHECK-COUNT-3: memref.alloc()

// -----

// Deallocs of merged buffers become one dealloc after the merged lifetime.
func.func @deallocs(%x: memref<64xf32>) -> memref<64xf32> {
  %0 = memref.alloc() : memref<64xf32>
  kernel.launch @k grid [1, 1, 1] block [64, 1, 1] smem 0 (%0, %x) : memref<64xf32>, memref<64xf32>
  %1 = memref.alloc() : memref<64xf32>
  kernel.launch @k grid [1, 1, 1] block [64, 1, 1] smem 0 (%1, %0) : memref<64xf32>, memref<64xf32>
  memref.dealloc %0 : memref<64xf32>
  %2 = memref.alloc() : memref<64xf32>
  kernel.launch @k grid [1, 1, 1] block [64, 1, 1] smem 0 (%2, %1) : memref<64xf32>, memref<64xf32>
  %3 = memref.alloc() : memref<64xf32>
  kernel.launch @k grid [1, 1, 1] block [64, 1, 1] smem 0 (%3, %2) : memref<64xf32>, memref<64xf32>
  memref.dealloc %2 : memref<64xf32>
  memref.dealloc %1 : memref<64xf32>
  func.return %3 : memref<64xf32>
}

// CHECK-LABEL: func.func @deallocs
// CHECK:       %[[A:.*]] = memref.alloc() : memref<64xf32>
// CHECK:       %[[B:.*]] = memref.alloc() : memref<64xf32>
// CHECK-NEXT:  kernel.launch @k {{.*}} (%[[B]], %[[A]])
// CHECK-NEXT:  kernel.launch @k {{.*}} (%[[A]], %[[B]])
// CHECK:       kernel.launch @k {{.*}} (%{{.*}}, %[[A]])
// CHECK-NEXT:  memref.dealloc %[[A]]
// CHECK-NEXT:  memref.dealloc %[[B]]
// CHECK-NOT:   memref.dealloc

// -----

// A zeroed allocation (`llmopt.zeroed`: its kernels need it at zero) never takes over a dead
// buffer: %z keeps its own allocation although %0 is free by then.
func.func @zeroed_takes_nothing(%x: memref<64xf32>) -> memref<64xf32> {
  %0 = memref.alloc() : memref<64xf32>
  kernel.launch @k grid [1, 1, 1] block [64, 1, 1] smem 0 (%0, %x) : memref<64xf32>, memref<64xf32>
  %1 = memref.alloc() : memref<64xf32>
  kernel.launch @k grid [1, 1, 1] block [64, 1, 1] smem 0 (%1, %0) : memref<64xf32>, memref<64xf32>
  %z = memref.alloc() {llmopt.zeroed} : memref<64xf32>
  kernel.launch @k grid [1, 1, 1] block [64, 1, 1] smem 0 (%z, %1) : memref<64xf32>, memref<64xf32>
  %2 = memref.alloc() : memref<64xf32>
  kernel.launch @k grid [1, 1, 1] block [64, 1, 1] smem 0 (%2, %z) : memref<64xf32>, memref<64xf32>
  func.return %2 : memref<64xf32>
}

// CHECK-LABEL: func.func @zeroed_takes_nothing
// CHECK-NEXT:  %[[A:.*]] = memref.alloc() : memref<64xf32>
// CHECK-NEXT:  kernel.launch @k {{.*}} (%[[A]], %x)
// CHECK-NEXT:  %[[B:.*]] = memref.alloc() : memref<64xf32>
// CHECK-NEXT:  kernel.launch @k {{.*}} (%[[B]], %[[A]])
// CHECK-NEXT:  %[[Z:.*]] = memref.alloc() {llmopt.zeroed} : memref<64xf32>
// CHECK-NEXT:  kernel.launch @k {{.*}} (%[[Z]], %[[B]])
// CHECK-NEXT:  %[[R:.*]] = memref.alloc() : memref<64xf32>
// CHECK-NEXT:  kernel.launch @k {{.*}} (%[[R]], %[[Z]])
// CHECK-NEXT:  func.return %[[R]]

// -----

// Nor is a dead zeroed allocation handed on: %2 gets its own allocation although %z, the
// only buffer of its size class free by then, is dead.
func.func @zeroed_is_not_handed_on(%x: memref<64xf32>) -> memref<64xf32> {
  %z = memref.alloc() {llmopt.zeroed} : memref<64xf32>
  kernel.launch @k grid [1, 1, 1] block [64, 1, 1] smem 0 (%z, %x) : memref<64xf32>, memref<64xf32>
  %1 = memref.alloc() : memref<64xf32>
  kernel.launch @k grid [1, 1, 1] block [64, 1, 1] smem 0 (%1, %z) : memref<64xf32>, memref<64xf32>
  %2 = memref.alloc() : memref<64xf32>
  kernel.launch @k grid [1, 1, 1] block [64, 1, 1] smem 0 (%2, %1) : memref<64xf32>, memref<64xf32>
  %3 = memref.alloc() : memref<64xf32>
  kernel.launch @k grid [1, 1, 1] block [64, 1, 1] smem 0 (%3, %2) : memref<64xf32>, memref<64xf32>
  func.return %3 : memref<64xf32>
}

// CHECK-LABEL: func.func @zeroed_is_not_handed_on
// CHECK-NEXT:  %[[Z:.*]] = memref.alloc() {llmopt.zeroed} : memref<64xf32>
// CHECK-NEXT:  kernel.launch @k {{.*}} (%[[Z]], %x)
// CHECK-NEXT:  %[[A:.*]] = memref.alloc() : memref<64xf32>
// CHECK-NEXT:  kernel.launch @k {{.*}} (%[[A]], %[[Z]])
// CHECK-NEXT:  %[[B:.*]] = memref.alloc() : memref<64xf32>
// CHECK-NEXT:  kernel.launch @k {{.*}} (%[[B]], %[[A]])
// CHECK-NEXT:  %[[R:.*]] = memref.alloc() : memref<64xf32>
// CHECK-NEXT:  kernel.launch @k {{.*}} (%[[R]], %[[B]])
// CHECK-NEXT:  func.return %[[R]]
