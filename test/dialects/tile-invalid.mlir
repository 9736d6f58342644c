// RUN: llm-opt %s --split-input-file --verify-diagnostics | filecheck %s

func.func @too_many_threads(%x: memref<4xf32>) {
  tile.kernel @k grid [1, 1, 1] block [2048, 1, 1] (%a = %x : memref<4xf32>) {
  }
  func.return
}
// CHECK: 2048 threads per block exceed 1024

// -----

func.func @coop_in_threads(%x: memref<4x8xf32>) {
  tile.kernel @k grid [1, 1, 1] block [32, 1, 1] (%a = %x : memref<4x8xf32>) {
    tile.forall (%i) in [4] over threads {
      %s = tile.coop_reduce add %r = 0 to 8 : f32 {
        %v = loop.load %a[%i, %r] : memref<4x8xf32>
        tile.yield %v : f32
      }
    }
  }
  func.return
}
// CHECK: tile.coop_reduce needs every thread of the block: it cannot sit inside a forall over threads

// -----

func.func @mapping(%x: memref<4xf32>) {
  tile.kernel @k grid [1, 1, 1] block [32, 1, 1] (%a = %x : memref<4xf32>) {
    tile.forall (%i) in [4] over warps {
    }
  }
  func.return
}
// CHECK: unknown mapping 'warps'

// -----

func.func @grid_too_large(%x: memref<4xf32>) {
  tile.kernel @k grid [1, 65536, 1] block [32, 1, 1] (%a = %x : memref<4xf32>) {
  }
  func.return
}
// CHECK: grid [1, 65536, 1] exceeds CUDA's limits [2147483647, 65535, 65535]

// -----

func.func @too_many_points(%x: memref<4xf32>) {
  tile.kernel @k grid [1, 1, 1] block [32, 1, 1] (%a = %x : memref<4xf32>) {
    tile.forall (%i, %j) in [4294967296, 4294967296] over threads {
    }
  }
  func.return
}
// CHECK: extents [4294967296, 4294967296] make 18446744073709551616 points, more than an index counts (9223372036854775807)

// -----

// tile.alloc belongs to one point of a forall over blocks: not directly in the kernel body.
func.func @alloc_in_kernel_body(%x: memref<4xf32>) {
  tile.kernel @k grid [1, 1, 1] block [32, 1, 1] (%a = %x : memref<4xf32>) {
    %s = tile.alloc shared : memref<32xf32>
  }
  func.return
}
// CHECK: tile.alloc must sit directly in a tile.forall over blocks

// -----

// Nor inside a forall over block_threads (or threads).
func.func @alloc_in_block_threads(%x: memref<4xf32>) {
  tile.kernel @k grid [1, 1, 1] block [32, 1, 1] (%a = %x : memref<4xf32>) {
    tile.forall (%b) in [1] over blocks {
      tile.forall (%t) in [32] over block_threads {
        %s = tile.alloc registers : memref<32xf32>
      }
    }
  }
  func.return
}
// CHECK: tile.alloc must sit directly in a tile.forall over blocks

// -----

func.func @alloc_unknown_space(%x: memref<4xf32>) {
  tile.kernel @k grid [1, 1, 1] block [32, 1, 1] (%a = %x : memref<4xf32>) {
    tile.forall (%b) in [1] over blocks {
      %s = tile.alloc global : memref<32xf32>
    }
  }
  func.return
}
// CHECK: unknown space 'global', expected one of

// -----

func.func @alloc_dynamic_shape(%x: memref<4xf32>) {
  tile.kernel @k grid [1, 1, 1] block [32, 1, 1] (%a = %x : memref<4xf32>) {
    tile.forall (%b) in [1] over blocks {
      %s = tile.alloc shared : memref<?x32xf32>
    }
  }
  func.return
}
// CHECK: a tile buffer has a static shape and the default layout, got memref<?x32xf32>

// -----

// An asynchronous copy moves 4, 8 or 16 bytes: three floats are 12.
func.func @async_count(%x: memref<4x64xf32>) {
  tile.kernel @k grid [1, 1, 1] block [16, 1, 1] (%a = %x : memref<4x64xf32>) {
    tile.forall (%b) in [4] over blocks {
      %s = tile.alloc shared : memref<64xf32>
      tile.forall (%t) in [16] over block_threads {
        tile.async_copy %a[%b, %t * 4] to %s[%t * 4] count 3 : memref<4x64xf32> to memref<64xf32>
      }
    }
  }
  func.return
}
// CHECK: tile.async_copy: count 3 of f32 moves 12 bytes; an asynchronous copy moves 4, 8 or 16 bytes

// -----

func.func @async_element_type(%x: memref<4x64xf16>) {
  tile.kernel @k grid [1, 1, 1] block [16, 1, 1] (%a = %x : memref<4x64xf16>) {
    tile.forall (%b) in [4] over blocks {
      %s = tile.alloc shared : memref<64xf32>
      tile.forall (%t) in [16] over block_threads {
        tile.async_copy %a[%b, %t * 4] to %s[%t * 4] count 4 : memref<4x64xf16> to memref<64xf32>
      }
    }
  }
  func.return
}
// CHECK: tile.async_copy: source and destination element types differ: f16 and f32

// -----

// One index for a rank-2 source.
func.func @async_rank(%x: memref<4x64xf32>) {
  tile.kernel @k grid [1, 1, 1] block [16, 1, 1] (%a = %x : memref<4x64xf32>) {
    tile.forall (%b) in [4] over blocks {
      %s = tile.alloc shared : memref<64xf32>
      tile.forall (%t) in [16] over block_threads {
        tile.async_copy %a[%t * 4] to %s[%t * 4] count 4 : memref<4x64xf32> to memref<64xf32>
      }
    }
  }
  func.return
}
// CHECK: tile.async_copy: 1 indices for a rank-2 buffer

// -----

func.func @async_extent(%x: memref<4x64xf32>) {
  tile.kernel @k grid [1, 1, 1] block [16, 1, 1] (%a = %x : memref<4x64xf32>) {
    tile.forall (%b) in [4] over blocks {
      %s = tile.alloc shared : memref<64x2xf32>
      tile.forall (%t) in [16] over block_threads {
        tile.async_copy %a[%b, %t * 4] to %s[%t * 4, 0] count 4 : memref<4x64xf32> to memref<64x2xf32>
      }
    }
  }
  func.return
}
// CHECK: tile.async_copy: the innermost extent 2 of the destination is smaller than count 4

// -----

// cp.async writes shared memory, not a kernel buffer.
func.func @async_to_global(%x: memref<4x64xf32>, %y: memref<4x64xf32>) {
  tile.kernel @k grid [1, 1, 1] block [16, 1, 1] (%a = %x : memref<4x64xf32>, %o = %y : memref<4x64xf32>) {
    tile.forall (%b) in [4] over blocks {
      tile.forall (%t) in [16] over block_threads {
        tile.async_copy %a[%b, %t * 4] to %o[%b, %t * 4] count 4 : memref<4x64xf32> to memref<4x64xf32>
      }
    }
  }
  func.return
}
// CHECK: tile.async_copy: the destination must be a tile.alloc shared buffer, not a kernel buffer

// -----

func.func @async_to_registers(%x: memref<4x64xf32>) {
  tile.kernel @k grid [1, 1, 1] block [16, 1, 1] (%a = %x : memref<4x64xf32>) {
    tile.forall (%b) in [4] over blocks {
      %r = tile.alloc registers : memref<16x4xf32>
      tile.forall (%t) in [16] over block_threads {
        tile.async_copy %a[%b, %t * 4] to %r[%t, 0] count 4 : memref<4x64xf32> to memref<16x4xf32>
      }
    }
  }
  func.return
}
// CHECK: tile.async_copy: the destination must be a tile.alloc shared buffer, not a tile.alloc registers buffer

// -----

func.func @async_outside_forall(%x: memref<4x64xf32>, %y: memref<4x64xf32>) {
  tile.kernel @k grid [1, 1, 1] block [16, 1, 1] (%a = %x : memref<4x64xf32>, %o = %y : memref<4x64xf32>) {
    %c0 = arith.constant 0 : index
    tile.async_copy %a[%c0, %c0] to %o[%c0, %c0] count 4 : memref<4x64xf32> to memref<4x64xf32>
  }
  func.return
}
// CHECK: tile.async_copy must sit inside a tile.forall

// -----

func.func @async_wait_negative(%x: memref<4xf32>) {
  tile.kernel @k grid [1, 1, 1] block [32, 1, 1] (%a = %x : memref<4xf32>) {
    tile.async_wait -1
  }
  func.return
}
// CHECK: tile.async_wait: the number of pending groups must be >= 0, got -1

// -----

func.func @async_commit_outside_kernel() {
  tile.async_commit
  func.return
}
// CHECK: tile.async_commit must sit inside a tile.kernel

// -----

func.func @coop_reduce_zero_extent(%x: memref<4xf32>) {
  tile.kernel @k grid [1, 1, 1] block [32, 1, 1] (%a = %x : memref<4xf32>) {
    tile.forall (%b) in [4] over blocks {
      %s = tile.coop_reduce add %r = 0 to 0 : f32 {
        %v = loop.load %a[%r] : memref<4xf32>
        tile.yield %v : f32
      }
      loop.store %s, %a[%b] : memref<4xf32>
    }
  }
  func.return
}
// CHECK: tile.coop_reduce extent must be positive, got 0

// -----

// Constant coordinates of a copy lie within the buffers.
func.func @copy_constant_out_of_bounds(%x: memref<4x64xf32>) {
  tile.kernel @k grid [1, 1, 1] block [16, 1, 1] (%a = %x : memref<4x64xf32>) {
    tile.forall (%b) in [1] over blocks {
      %s = tile.alloc shared : memref<4x64xf32>
      tile.forall (%t) in [16] over block_threads {
        tile.async_copy %a[4, %t * 4] to %s[0, %t * 4] count 4 : memref<4x64xf32> to memref<4x64xf32>
      }
    }
  }
  func.return
}
// CHECK: tile.async_copy: index 4 is outside dimension 0 of memref<4x64xf32> (0 to 3)

// -----

func.func @zero_extent_alloc(%x: memref<4xf32>) {
  tile.kernel @k grid [1, 1, 1] block [32, 1, 1] (%a = %x : memref<4xf32>) {
    tile.forall (%b) in [4] over blocks {
      %s = tile.alloc shared : memref<0x32xf32>
    }
  }
  func.return
}
// CHECK: a tile buffer has positive extents, got memref<0x32xf32>

// -----

// The knobs of a kernel's schedule are checked where they are written.
func.func @schedule_knob(%x: memref<4xf32>) {
  tile.kernel @k grid [1, 1, 1] block [32, 1, 1] (%a = %x : memref<4xf32>) {
  } {llmopt.schedule = {bm = 64 : i64, tm = 0 : i64}}
  func.return
}
// CHECK: 'llmopt.schedule': knob 'tm' must be an integer from 1 to 64, got 0

// -----

func.func @schedule_tile(%x: memref<4xf32>) {
  tile.kernel @k grid [1, 1, 1] block [32, 1, 1] (%a = %x : memref<4xf32>) {
  } {llmopt.schedule = {bm = 64 : i64, tm = 6 : i64}}
  func.return
}
// CHECK: 'llmopt.schedule': tm=6 does not divide bm=64

// -----

func.func @schedule_not_a_dictionary(%x: memref<4xf32>) {
  tile.kernel @k grid [1, 1, 1] block [32, 1, 1] (%a = %x : memref<4xf32>) {
  } {llmopt.schedule = "fast"}
  func.return
}
// CHECK: 'llmopt.schedule' must be a dictionary of knobs, got "fast"

// -----

// A Kernel-IR terminator spliced into Tile IR (found by the fuzzer: vector-fragments then
// appended ops after it).
func.func @kernel_return_in_tile(%x: memref<4xf32>) {
  tile.kernel @k grid [1, 1, 1] block [32, 1, 1] (%a = %x : memref<4xf32>) {
    tile.forall (%b) in [4] over blocks {
      %v = loop.load %a[%b] : memref<4xf32>
      loop.store %v, %a[%b] : memref<4xf32>
      kernel.return
    }
  }
  func.return
}
// CHECK: kernel.return must end a kernel.func

// -----

func.func @tile_yield_outside(%x: memref<4xf32>) {
  tile.kernel @k grid [1, 1, 1] block [32, 1, 1] (%a = %x : memref<4xf32>) {
    tile.forall (%b) in [4] over blocks {
      %v = loop.load %a[%b] : memref<4xf32>
      tile.yield %v : f32
    }
  }
  func.return
}
// CHECK: tile.yield must end a tile.coop_reduce body

// -----

// Indices are bounded over the loops around them: a forall's points, a constant scf.for.
func.func @forall_index_range(%x: memref<4x8xf32>) {
  tile.kernel @k grid [1, 1, 1] block [32, 1, 1] (%a = %x : memref<4x8xf32>) {
    tile.forall (%i, %j) in [4, 8] over threads {
      %v = loop.load %a[%i, %j + 1] : memref<4x8xf32>
      loop.store %v, %a[%i, %j] : memref<4x8xf32>
    }
  }
  func.return
}
// CHECK: loop.load: index (%j + 1) takes values 1 to 8 over its loops, outside dimension 1 of memref<4x8xf32> (0 to 7)

// -----

func.func @scf_for_index_range(%x: memref<4x8xf32>) {
  tile.kernel @k grid [1, 1, 1] block [32, 1, 1] (%a = %x : memref<4x8xf32>) {
    tile.forall (%b) in [1] over blocks {
      %c0 = arith.constant 0 : index
      %c5 = arith.constant 5 : index
      %c1 = arith.constant 1 : index
      scf.for %k = %c0 to %c5 step %c1 {
        tile.forall (%t) in [8] over block_threads {
          %v = loop.load %a[%k, %t] : memref<4x8xf32>
          loop.store %v, %a[0, %t] : memref<4x8xf32>
        }
      }
    }
  }
  func.return
}
// CHECK: loop.load: index %k takes values 0 to 4 over its loops, outside dimension 0 of memref<4x8xf32> (0 to 3)

// -----

// A forall with fewer extents than induction variables, one of them indexing a load inside
// (found by the fuzzer: the load's verifier, which runs first, looked up a missing extent).
func.func @forall_missing_extent(%x: memref<4x8xf32>) {
  tile.kernel @k grid [1, 1, 1] block [32, 1, 1] (%a = %x : memref<4x8xf32>) {
    tile.forall (%i, %j) in [4] over threads {
      %v = loop.load %a[%i, %j] : memref<4x8xf32>
      loop.store %v, %a[%i, %j] : memref<4x8xf32>
    }
  }
  func.return
}
// CHECK: body takes 1 'index' arguments, one per extent

// -----

func.func @pad_attribute(%x: memref<4xf32>) {
  tile.kernel @k grid [1, 1, 1] block [32, 1, 1] (%a = %x : memref<4xf32>) {
    tile.forall (%b) in [4] over blocks {
      %s = tile.alloc shared {llmopt.pad = -1 : i64} : memref<4x32xf32>
    }
  }
  func.return
}
// CHECK: attribute 'llmopt.pad' must be an integer from 0 to 64 (elements added to each row), got -1

// -----

// A constant index operand (an arith.constant, not a constant in the map) outside the buffer
// (found by the fuzzer: after tile-to-kernel the Kernel-IR verifier rejected it).
func.func @constant_operand(%x: memref<4x8xf32>) {
  tile.kernel @k grid [1, 1, 1] block [32, 1, 1] (%a = %x : memref<4x8xf32>) {
    %c64 = arith.constant 64 : index
    tile.forall (%i, %j) in [4, 8] over threads {
      %v = loop.load %a[%i, %j] : memref<4x8xf32>
      loop.store %v, %a[%i, %c64] : memref<4x8xf32>
    }
  }
  func.return
}
// CHECK: loop.store: index %c64 is 64, outside dimension 1 of memref<4x8xf32> (0 to 7)

// -----

// A prefetch moves whole 16-byte units: 7 bf16 are 14 bytes.
func.func @prefetch_granule(%x: memref<4x64xbf16>) {
  tile.kernel @k grid [1, 1, 1] block [32, 1, 1] (%a = %x : memref<4x64xbf16>) {
    tile.forall (%b) in [4] over blocks {
      tile.forall (%r) in [1] over block_threads {
        tile.prefetch %a[%b, 0] count 7 : memref<4x64xbf16>
      }
    }
  }
  func.return
}
// CHECK: tile.prefetch: count 7 of bf16 is 14 bytes; a prefetch moves a positive multiple of 16 bytes

// -----

// ... of a kernel buffer, not a shared tile.
func.func @prefetch_shared(%x: memref<4x64xbf16>) {
  tile.kernel @k grid [1, 1, 1] block [32, 1, 1] (%a = %x : memref<4x64xbf16>) {
    tile.forall (%b) in [4] over blocks {
      %s = tile.alloc shared : memref<64xbf16>
      tile.forall (%r) in [1] over block_threads {
        tile.prefetch %s[0] count 64 : memref<64xbf16>
      }
    }
  }
  func.return
}
// CHECK: tile.prefetch: prefetches from a kernel buffer (global memory), not a tile.alloc shared buffer

// -----

// ... within the innermost dimension.
func.func @prefetch_row(%x: memref<4x64xbf16>) {
  tile.kernel @k grid [1, 1, 1] block [32, 1, 1] (%a = %x : memref<4x64xbf16>) {
    tile.forall (%b) in [4] over blocks {
      tile.forall (%r) in [1] over block_threads {
        tile.prefetch %a[%b, 0] count 128 : memref<4x64xbf16>
      }
    }
  }
  func.return
}
// CHECK: tile.prefetch: the innermost extent must be static and hold count 128 elements, got 64

// -----

// tile.lane_reduce combines the lanes of a warp: it needs a forall over block_threads whose
// innermost dimension is the 32 lanes ...
func.func @lanes_not_a_warp(%x: memref<4x16xf32>) {
  tile.kernel @k grid [1, 1, 1] block [64, 1, 1] (%a = %x : memref<4x16xf32>) {
    tile.forall (%b) in [1] over blocks {
      tile.forall (%w, %l) in [4, 16] over block_threads {
        %v = loop.load %a[%w, %l] : memref<4x16xf32>
        %t = tile.lane_reduce add %v : f32
      }
    }
  }
  func.return
}
// CHECK: tile.lane_reduce needs a forall whose innermost extent is its 32 lanes and whose extents are static, got [4, 16]

// -----

// ... with a point a thread (here 64 points for 128 threads) ...
func.func @lanes_two_a_thread(%x: memref<2x32xf32>) {
  tile.kernel @k grid [1, 1, 1] block [128, 1, 1] (%a = %x : memref<2x32xf32>) {
    tile.forall (%b) in [1] over blocks {
      tile.forall (%w, %l) in [2, 32] over block_threads {
        %v = loop.load %a[%w, %l] : memref<2x32xf32>
        %t = tile.lane_reduce add %v : f32
      }
    }
  }
  func.return
}
// CHECK: tile.lane_reduce needs a point a thread: the forall has 64 points, the block 128 threads

// -----

// ... and reached by every lane: not under a condition.
func.func @lanes_guarded(%x: memref<2x32xf32>, %c: i1) {
  tile.kernel @k grid [1, 1, 1] block [64, 1, 1] (%a = %x : memref<2x32xf32>) {
    tile.forall (%b) in [1] over blocks {
      tile.forall (%w, %l) in [2, 32] over block_threads {
        %v = loop.load %a[%w, %l] : memref<2x32xf32>
        %one = arith.constant 1 : index
        %first = arith.cmpi ult, %l, %one : index
        scf.if %first {
          %t = tile.lane_reduce add %v : f32
        }
      }
    }
  }
  func.return
}
// CHECK: tile.lane_reduce must sit in a tile.forall over block_threads, through static loop.for ops only (the lanes of a warp all reach it)

// -----

// ... nor in a loop of runtime extent (lanes past it would wait for the others) ...
func.func @lanes_runtime_loop(%x: memref<2x32xf32>, %n: index) {
  tile.kernel @k grid [1, 1, 1] block [64, 1, 1] (%a = %x : memref<2x32xf32>) {
    tile.forall (%b) in [1] over blocks {
      tile.forall (%w, %l) in [2, 32] over block_threads {
        loop.for %i = 0 to %n max 4 {
          %v = loop.load %a[%w, %l] : memref<2x32xf32>
          %t = tile.lane_reduce add %v : f32
        }
      }
    }
  }
  func.return
}
// CHECK: tile.lane_reduce must sit in a tile.forall over block_threads, through static loop.for ops only (the lanes of a warp all reach it)

// -----

// ... and a group of lanes is the forall's innermost extent, a power of two up to 32.
func.func @lanes_group_mismatch(%x: memref<16x4xf32>) {
  tile.kernel @k grid [1, 1, 1] block [64, 1, 1] (%a = %x : memref<16x4xf32>) {
    tile.forall (%b) in [1] over blocks {
      tile.forall (%g, %t) in [16, 4] over block_threads {
        %v = loop.load %a[%g, %t] : memref<16x4xf32>
        %s = tile.lane_reduce add %v lanes 8 : f32
      }
    }
  }
  func.return
}
// CHECK: tile.lane_reduce needs a forall whose innermost extent is its 8 lanes and whose extents are static, got [16, 4]

// -----

func.func @lanes_not_a_power(%x: memref<16x4xf32>) {
  tile.kernel @k grid [1, 1, 1] block [64, 1, 1] (%a = %x : memref<16x4xf32>) {
    tile.forall (%b) in [1] over blocks {
      tile.forall (%g, %t) in [16, 4] over block_threads {
        %v = loop.load %a[%g, %t] : memref<16x4xf32>
        %s = tile.lane_reduce add %v lanes 3 : f32
      }
    }
  }
  func.return
}
// CHECK: lanes must be 2, 4, 8, 16 or 32, got 3

// -----

func.func @lanes_kind(%x: memref<1x32xf32>) {
  tile.kernel @k grid [1, 1, 1] block [32, 1, 1] (%a = %x : memref<1x32xf32>) {
    tile.forall (%b) in [1] over blocks {
      tile.forall (%w, %l) in [1, 32] over block_threads {
        %v = loop.load %a[%w, %l] : memref<1x32xf32>
        %t = tile.lane_reduce sum %v : f32
      }
    }
  }
  func.return
}
// CHECK: unknown reduction kind 'sum'
