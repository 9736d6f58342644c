// RUN: llm-opt %s --split-input-file -p fuse-norm-prologue | filecheck %s
// RUN: llm-opt %s --split-input-file -p fuse-norm-prologue,canonicalize,cse --check-numerics 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// An RMSNorm's row scale rsqrt(mean(x²) + eps) leaves the matrix products that read the
// normalised rows: the norm kernel stores one scale per row, each product recomputes x·g in
// its K loop and multiplies its sum by the scale. Any reader that does not fit (a load
// outside a reduction, a max reduction, an addition before the product) keeps everything.

// RMSNorm + linear, as fuse-kernels leaves it (x 1x8x64, weight 32x64).
func.func @forward(%g: memref<64xf32>, %w: memref<32x64xf32>, %x: memref<1x8x64xf32>) -> memref<1x8x32xf32> {
  %y = memref.alloc() : memref<1x8x64xf32>
  loop.kernel @norm (%out = %y : memref<1x8x64xf32>, %gv = %g : memref<64xf32>, %xv = %x : memref<1x8x64xf32>) {
    %eps = arith.constant 1.000000e-06 : f32
    %inv = arith.constant 1.562500e-02 : f32
    loop.for %i0 = 0 to 1 {
      loop.for %i1 = 0 to 8 {
        %ss = loop.reduce add %r = 0 to 64 : f32 {
          %a = loop.load %xv[%i0, %i1, %r] : memref<1x8x64xf32>
          %sq = arith.mulf %a, %a : f32
          loop.yield %sq : f32
        }
        %m = arith.mulf %ss, %inv : f32
        %e = arith.addf %m, %eps : f32
        %s = math.rsqrt %e : f32
        loop.for %i2 = 0 to 64 {
          %a = loop.load %xv[%i0, %i1, %i2] : memref<1x8x64xf32>
          %n = arith.mulf %a, %s : f32
          %b = loop.load %gv[%i2] : memref<64xf32>
          %v = arith.mulf %n, %b : f32
          loop.store %v, %out[%i0, %i1, %i2] : memref<1x8x64xf32>
        }
      }
    }
  }
  %o = memref.alloc() : memref<1x8x32xf32>
  loop.kernel @linear (%ov = %o : memref<1x8x32xf32>, %wv = %w : memref<32x64xf32>, %yv = %y : memref<1x8x64xf32>) {
    loop.for %i0 = 0 to 1 {
      loop.for %i1 = 0 to 8 {
        loop.for %i2 = 0 to 32 {
          %d = loop.reduce add %r = 0 to 64 : f32 {
            %a = loop.load %yv[0, %i1, %r] : memref<1x8x64xf32>
            %b = loop.load %wv[%i2, %r] : memref<32x64xf32>
            %p = arith.mulf %a, %b : f32
            loop.yield %p : f32
          }
          loop.store %d, %ov[%i0, %i1, %i2] : memref<1x8x32xf32>
        }
      }
    }
  }
  func.return %o : memref<1x8x32xf32>
}

// CHECK-LABEL: func.func @forward
// CHECK-NEXT:  %[[S:.*]] = memref.alloc() : memref<1x8x1xf32>
// CHECK-NEXT:  loop.kernel @norm (%[[XN:.*]] = %x : memref<1x8x64xf32>, %[[SN:.*]] = %[[S]] : memref<1x8x1xf32>) {
// CHECK:         loop.for %[[I0:.*]] = 0 to 1 {
// CHECK-NEXT:      loop.for %[[I1:.*]] = 0 to 8 {
// CHECK-NEXT:        loop.reduce add
// CHECK:             %[[RS:.*]] = math.rsqrt
// CHECK-NEXT:        loop.store %[[RS]], %[[SN]][%[[I0]], %[[I1]], 0] : memref<1x8x1xf32>
// CHECK-NEXT:      }
// CHECK-NEXT:    }
// CHECK-NEXT:  }
// CHECK-NEXT:  %[[O:.*]] = memref.alloc() : memref<1x8x32xf32>
// CHECK-NEXT:  loop.kernel @linear (%[[OV:.*]] = %[[O]] : memref<1x8x32xf32>, %[[WV:.*]] = %w : memref<32x64xf32>, %[[SV:.*]] = %[[S]] : memref<1x8x1xf32>, %[[GV:.*]] = %g : memref<64xf32>, %[[XV:.*]] = %x : memref<1x8x64xf32>) {
// CHECK:             loop.for %[[J2:.*]] = 0 to 32 {
// CHECK-NEXT:          %[[D:.*]] = loop.reduce add %[[R:.*]] = 0 to 64 : f32 {
// CHECK-NEXT:            %[[A:.*]] = loop.load %[[XV]][0, %[[J1:.*]], %[[R]]] : memref<1x8x64xf32>
// CHECK-NEXT:            %[[B:.*]] = loop.load %[[GV]][%[[R]]] : memref<64xf32>
// CHECK-NEXT:            %[[AB:.*]] = arith.mulf %[[A]], %[[B]] : f32
// CHECK-NEXT:            %[[W:.*]] = loop.load %[[WV]][%[[J2]], %[[R]]] : memref<32x64xf32>
// CHECK-NEXT:            %[[P:.*]] = arith.mulf %[[AB]], %[[W]] : f32
// CHECK-NEXT:            loop.yield %[[P]] : f32
// CHECK-NEXT:          }
// CHECK-NEXT:          %[[SC:.*]] = loop.load %[[SV]][0, %[[J1]], 0] : memref<1x8x1xf32>
// CHECK-NEXT:          %[[DS:.*]] = arith.mulf %[[D]], %[[SC]] : f32
// CHECK-NEXT:          loop.store %[[DS]], %[[OV]][%{{.*}}, %[[J1]], %[[J2]]] : memref<1x8x32xf32>
// CHECK:       func.return %[[O]] : memref<1x8x32xf32>

// NUM:      // numerics: tolerance
// NUM-NEXT: fuse-norm-prologue {{.*}} ok
// NUM-NEXT: canonicalize {{.*}} ok
// NUM-NEXT: cse {{.*}} ok

// -----

// One norm read by three kernels (q, k and gate/up-like: two reductions in one kernel, the
// scale applied to each result before silu and the product). Written as x / sqrt(...): the
// divisor is the row factor, and the stored scale is its reciprocal.
func.func @forward(%g: memref<16xf32>, %wq: memref<8x16xf32>, %wk: memref<4x16xf32>, %wu: memref<12x16xf32>, %x: memref<5x16xf32>) -> (memref<5x8xf32>, memref<5x4xf32>, memref<5x12xf32>) {
  %y = memref.alloc() : memref<5x16xf32>
  loop.kernel @norm (%out = %y : memref<5x16xf32>, %gv = %g : memref<16xf32>, %xv = %x : memref<5x16xf32>) {
    %eps = arith.constant 1.000000e-05 : f32
    %inv = arith.constant 6.250000e-02 : f32
    loop.for %i = 0 to 5 {
      %ss = loop.reduce add %r = 0 to 16 : f32 {
        %a = loop.load %xv[%i, %r] : memref<5x16xf32>
        %sq = arith.mulf %a, %a : f32
        loop.yield %sq : f32
      }
      %m = arith.mulf %ss, %inv : f32
      %e = arith.addf %m, %eps : f32
      %d = math.sqrt %e : f32
      loop.for %j = 0 to 16 {
        %a = loop.load %xv[%i, %j] : memref<5x16xf32>
        %b = loop.load %gv[%j] : memref<16xf32>
        %ab = arith.mulf %b, %a : f32
        %v = arith.divf %ab, %d : f32
        loop.store %v, %out[%i, %j] : memref<5x16xf32>
      }
    }
  }
  %q = memref.alloc() : memref<5x8xf32>
  loop.kernel @q (%qv = %q : memref<5x8xf32>, %wv = %wq : memref<8x16xf32>, %yv = %y : memref<5x16xf32>) {
    loop.for %i = 0 to 5 {
      loop.for %j = 0 to 8 {
        %d = loop.reduce add %r = 0 to 16 : f32 {
          %a = loop.load %yv[%i, %r] : memref<5x16xf32>
          %b = loop.load %wv[%j, %r] : memref<8x16xf32>
          %p = arith.mulf %a, %b : f32
          loop.yield %p : f32
        }
        loop.store %d, %qv[%i, %j] : memref<5x8xf32>
      }
    }
  }
  %k = memref.alloc() : memref<5x4xf32>
  loop.kernel @k (%kv = %k : memref<5x4xf32>, %wv = %wk : memref<4x16xf32>, %yv = %y : memref<5x16xf32>) {
    loop.for %i = 0 to 5 {
      loop.for %j = 0 to 4 {
        %d = loop.reduce add %r = 0 to 16 : f32 {
          %a = loop.load %yv[%i, %r] : memref<5x16xf32>
          %n = arith.negf %a : f32
          %b = loop.load %wv[%j, %r] : memref<4x16xf32>
          %p = arith.divf %n, %b : f32
          loop.yield %p : f32
        }
        loop.store %d, %kv[%i, %j] : memref<5x4xf32>
      }
    }
  }
  %u = memref.alloc() : memref<5x12xf32>
  loop.kernel @gate_up (%uv = %u : memref<5x12xf32>, %wv = %wu : memref<12x16xf32>, %yv = %y : memref<5x16xf32>, %wq2 = %wq : memref<8x16xf32>) {
    loop.for %i = 0 to 5 {
      loop.for %j = 0 to 12 {
        %d0 = loop.reduce add %r = 0 to 16 : f32 {
          %a = loop.load %yv[%i, %r] : memref<5x16xf32>
          %b = loop.load %wv[%j, %r] : memref<12x16xf32>
          %p = arith.mulf %a, %b : f32
          loop.yield %p : f32
        }
        %t = math.tanh %d0 : f32
        %d1 = loop.reduce add %r = 0 to 16 : f32 {
          %a = loop.load %yv[%i, %r] : memref<5x16xf32>
          %b = loop.load %wq2[%j mod 8, %r] : memref<8x16xf32>
          %p = arith.mulf %b, %a : f32
          loop.yield %p : f32
        }
        %v = arith.mulf %t, %d1 : f32
        loop.store %v, %uv[%i, %j] : memref<5x12xf32>
      }
    }
  }
  func.return %q, %k, %u : memref<5x8xf32>, memref<5x4xf32>, memref<5x12xf32>
}

// CHECK-LABEL: func.func @forward
// CHECK-NOT:   memref.alloc() : memref<5x16xf32>
// CHECK:       %[[S:.*]] = memref.alloc() : memref<5x1xf32>
// CHECK-NEXT:  loop.kernel @norm
// CHECK:         %[[D:.*]] = math.sqrt
// CHECK-NEXT:    %[[ONE:.*]] = arith.constant 1.000000e+00 : f32
// CHECK-NEXT:    %[[RS:.*]] = arith.divf %[[ONE]], %[[D]] : f32
// CHECK-NEXT:    loop.store %[[RS]], %{{.*}}[%{{.*}}, 0] : memref<5x1xf32>
// CHECK:       loop.kernel @q
// CHECK:         %[[DQ:.*]] = loop.reduce add
// CHECK:         %[[SQ:.*]] = loop.load %{{.*}}[%{{.*}}, 0] : memref<5x1xf32>
// CHECK-NEXT:    arith.mulf %[[DQ]], %[[SQ]] : f32
// CHECK:       loop.kernel @k
// CHECK:         %[[DK:.*]] = loop.reduce add
// CHECK:           arith.negf
// CHECK:           arith.divf
// CHECK:         %[[SK:.*]] = loop.load %{{.*}}[%{{.*}}, 0] : memref<5x1xf32>
// CHECK-NEXT:    arith.mulf %[[DK]], %[[SK]] : f32
// CHECK:       loop.kernel @gate_up
// CHECK:         %[[D0:.*]] = loop.reduce add
// CHECK:         %[[S0:.*]] = loop.load %{{.*}}[%{{.*}}, 0] : memref<5x1xf32>
// CHECK-NEXT:    %[[G0:.*]] = arith.mulf %[[D0]], %[[S0]] : f32
// CHECK-NEXT:    math.tanh %[[G0]] : f32
// CHECK:         %[[D1:.*]] = loop.reduce add
// CHECK:         arith.mulf %[[D1]], %[[S0]] : f32
// CHECK:       func.return

// NUM:      // numerics: tolerance
// NUM-NEXT: fuse-norm-prologue {{.*}} ok
// NUM-NEXT: canonicalize {{.*}} ok
// NUM-NEXT: cse {{.*}} ok

// -----

// Negative: the second reader also adds the normalised value outside its reduction (a
// residual), so nothing changes: the norm keeps storing every column.
func.func @forward(%g: memref<16xf32>, %w: memref<8x16xf32>, %x: memref<5x16xf32>) -> (memref<5x8xf32>, memref<5x16xf32>) {
  %y = memref.alloc() : memref<5x16xf32>
  loop.kernel @norm (%out = %y : memref<5x16xf32>, %gv = %g : memref<16xf32>, %xv = %x : memref<5x16xf32>) {
    loop.for %i = 0 to 5 {
      %ss = loop.reduce add %r = 0 to 16 : f32 {
        %a = loop.load %xv[%i, %r] : memref<5x16xf32>
        %sq = arith.mulf %a, %a : f32
        loop.yield %sq : f32
      }
      %s = math.rsqrt %ss : f32
      loop.for %j = 0 to 16 {
        %a = loop.load %xv[%i, %j] : memref<5x16xf32>
        %b = loop.load %gv[%j] : memref<16xf32>
        %n = arith.mulf %a, %s : f32
        %v = arith.mulf %n, %b : f32
        loop.store %v, %out[%i, %j] : memref<5x16xf32>
      }
    }
  }
  %q = memref.alloc() : memref<5x8xf32>
  loop.kernel @linear (%qv = %q : memref<5x8xf32>, %wv = %w : memref<8x16xf32>, %yv = %y : memref<5x16xf32>) {
    loop.for %i = 0 to 5 {
      loop.for %j = 0 to 8 {
        %d = loop.reduce add %r = 0 to 16 : f32 {
          %a = loop.load %yv[%i, %r] : memref<5x16xf32>
          %b = loop.load %wv[%j, %r] : memref<8x16xf32>
          %p = arith.mulf %a, %b : f32
          loop.yield %p : f32
        }
        loop.store %d, %qv[%i, %j] : memref<5x8xf32>
      }
    }
  }
  %h = memref.alloc() : memref<5x16xf32>
  loop.kernel @residual (%hv = %h : memref<5x16xf32>, %yv = %y : memref<5x16xf32>, %xv = %x : memref<5x16xf32>) {
    loop.for %i = 0 to 5 {
      loop.for %j = 0 to 16 {
        %a = loop.load %yv[%i, %j] : memref<5x16xf32>
        %b = loop.load %xv[%i, %j] : memref<5x16xf32>
        %v = arith.addf %a, %b : f32
        loop.store %v, %hv[%i, %j] : memref<5x16xf32>
      }
    }
  }
  func.return %q, %h : memref<5x8xf32>, memref<5x16xf32>
}

// CHECK-LABEL: func.func @forward
// CHECK-NOT:   memref<5x1xf32>
// CHECK:       loop.kernel @norm
// CHECK:         loop.store %{{.*}}, %{{.*}}[%{{.*}}, %{{.*}}] : memref<5x16xf32>
// CHECK:       loop.kernel @linear
// CHECK:         loop.load %{{.*}}[%{{.*}}, %{{.*}}] : memref<5x16xf32>
// CHECK:       loop.kernel @residual
// CHECK-NOT:   memref<5x1xf32>
// CHECK:       func.return

// -----

// Negative: a max reduction reads the normalised rows; nothing changes.
func.func @forward(%g: memref<16xf32>, %w: memref<8x16xf32>, %x: memref<5x16xf32>) -> memref<5x8xf32> {
  %y = memref.alloc() : memref<5x16xf32>
  loop.kernel @norm (%out = %y : memref<5x16xf32>, %gv = %g : memref<16xf32>, %xv = %x : memref<5x16xf32>) {
    loop.for %i = 0 to 5 {
      %ss = loop.reduce add %r = 0 to 16 : f32 {
        %a = loop.load %xv[%i, %r] : memref<5x16xf32>
        %sq = arith.mulf %a, %a : f32
        loop.yield %sq : f32
      }
      %s = math.rsqrt %ss : f32
      loop.for %j = 0 to 16 {
        %a = loop.load %xv[%i, %j] : memref<5x16xf32>
        %b = loop.load %gv[%j] : memref<16xf32>
        %n = arith.mulf %a, %s : f32
        %v = arith.mulf %n, %b : f32
        loop.store %v, %out[%i, %j] : memref<5x16xf32>
      }
    }
  }
  %m = memref.alloc() : memref<5x8xf32>
  loop.kernel @max (%mv = %m : memref<5x8xf32>, %wv = %w : memref<8x16xf32>, %yv = %y : memref<5x16xf32>) {
    loop.for %i = 0 to 5 {
      loop.for %j = 0 to 8 {
        %d = loop.reduce max %r = 0 to 16 : f32 {
          %a = loop.load %yv[%i, %r] : memref<5x16xf32>
          %b = loop.load %wv[%j, %r] : memref<8x16xf32>
          %p = arith.mulf %a, %b : f32
          loop.yield %p : f32
        }
        loop.store %d, %mv[%i, %j] : memref<5x8xf32>
      }
    }
  }
  func.return %m : memref<5x8xf32>
}

// CHECK-LABEL: func.func @forward
// CHECK-NOT:   memref<5x1xf32>
// CHECK:       loop.kernel @norm
// CHECK:         loop.store %{{.*}}, %{{.*}}[%{{.*}}, %{{.*}}] : memref<5x16xf32>
// CHECK:       loop.kernel @max
// CHECK:         loop.reduce max
// CHECK-NEXT:      loop.load %{{.*}}[%{{.*}}, %{{.*}}] : memref<5x16xf32>
// CHECK-NOT:   memref<5x1xf32>
// CHECK:       func.return

// -----

// Negative: an addition between the load and the product (Σ (y + 1)·w is not linear in y's
// scale); nothing changes.
func.func @forward(%g: memref<16xf32>, %w: memref<8x16xf32>, %x: memref<5x16xf32>) -> memref<5x8xf32> {
  %y = memref.alloc() : memref<5x16xf32>
  loop.kernel @norm (%out = %y : memref<5x16xf32>, %gv = %g : memref<16xf32>, %xv = %x : memref<5x16xf32>) {
    loop.for %i = 0 to 5 {
      %ss = loop.reduce add %r = 0 to 16 : f32 {
        %a = loop.load %xv[%i, %r] : memref<5x16xf32>
        %sq = arith.mulf %a, %a : f32
        loop.yield %sq : f32
      }
      %s = math.rsqrt %ss : f32
      loop.for %j = 0 to 16 {
        %a = loop.load %xv[%i, %j] : memref<5x16xf32>
        %b = loop.load %gv[%j] : memref<16xf32>
        %n = arith.mulf %a, %s : f32
        %v = arith.mulf %n, %b : f32
        loop.store %v, %out[%i, %j] : memref<5x16xf32>
      }
    }
  }
  %q = memref.alloc() : memref<5x8xf32>
  loop.kernel @shifted (%qv = %q : memref<5x8xf32>, %wv = %w : memref<8x16xf32>, %yv = %y : memref<5x16xf32>) {
    %one = arith.constant 1.000000e+00 : f32
    loop.for %i = 0 to 5 {
      loop.for %j = 0 to 8 {
        %d = loop.reduce add %r = 0 to 16 : f32 {
          %a = loop.load %yv[%i, %r] : memref<5x16xf32>
          %a1 = arith.addf %a, %one : f32
          %b = loop.load %wv[%j, %r] : memref<8x16xf32>
          %p = arith.mulf %a1, %b : f32
          loop.yield %p : f32
        }
        loop.store %d, %qv[%i, %j] : memref<5x8xf32>
      }
    }
  }
  func.return %q : memref<5x8xf32>
}

// CHECK-LABEL: func.func @forward
// CHECK-NOT:   memref<5x1xf32>
// CHECK:       loop.kernel @norm
// CHECK:         loop.store %{{.*}}, %{{.*}}[%{{.*}}, %{{.*}}] : memref<5x16xf32>
// CHECK:       loop.kernel @shifted
// CHECK:           loop.load %{{.*}}[%{{.*}}, %{{.*}}] : memref<5x16xf32>
// CHECK-NEXT:      arith.addf
// CHECK-NOT:   memref<5x1xf32>
// CHECK:       func.return

// -----

// Negative: a sum over rows (yᵀ·w): the row scale varies in the reduction; nothing changes.
func.func @forward(%g: memref<16xf32>, %w: memref<5x8xf32>, %x: memref<5x16xf32>) -> memref<16x8xf32> {
  %y = memref.alloc() : memref<5x16xf32>
  loop.kernel @norm (%out = %y : memref<5x16xf32>, %gv = %g : memref<16xf32>, %xv = %x : memref<5x16xf32>) {
    loop.for %i = 0 to 5 {
      %ss = loop.reduce add %r = 0 to 16 : f32 {
        %a = loop.load %xv[%i, %r] : memref<5x16xf32>
        %sq = arith.mulf %a, %a : f32
        loop.yield %sq : f32
      }
      %s = math.rsqrt %ss : f32
      loop.for %j = 0 to 16 {
        %a = loop.load %xv[%i, %j] : memref<5x16xf32>
        %b = loop.load %gv[%j] : memref<16xf32>
        %n = arith.mulf %a, %s : f32
        %v = arith.mulf %n, %b : f32
        loop.store %v, %out[%i, %j] : memref<5x16xf32>
      }
    }
  }
  %t = memref.alloc() : memref<16x8xf32>
  loop.kernel @transposed (%tv = %t : memref<16x8xf32>, %wv = %w : memref<5x8xf32>, %yv = %y : memref<5x16xf32>) {
    loop.for %c = 0 to 16 {
      loop.for %j = 0 to 8 {
        %d = loop.reduce add %r = 0 to 5 : f32 {
          %a = loop.load %yv[%r, %c] : memref<5x16xf32>
          %b = loop.load %wv[%r, %j] : memref<5x8xf32>
          %p = arith.mulf %a, %b : f32
          loop.yield %p : f32
        }
        loop.store %d, %tv[%c, %j] : memref<16x8xf32>
      }
    }
  }
  func.return %t : memref<16x8xf32>
}

// CHECK-LABEL: func.func @forward
// CHECK-NOT:   memref<5x1xf32>
// CHECK:       loop.kernel @norm
// CHECK:         loop.store %{{.*}}, %{{.*}}[%{{.*}}, %{{.*}}] : memref<5x16xf32>
// CHECK:       loop.kernel @transposed
// CHECK:           loop.load %{{.*}}[%{{.*}}, %{{.*}}] : memref<5x16xf32>
// CHECK-NOT:   memref<5x1xf32>
// CHECK:       func.return
