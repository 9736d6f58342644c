// Every pass option is range-checked when the pipeline is built: a value a pass cannot use is
// one error line naming the pass and the option (exit 1), before any pass runs; never an
// internal error, never accepted silently. 0 means "not set" where a knob has a default.
// RUN: not llm-opt %s -p 'kernel-to-cuda{min_blocks=-1}' 2>&1 | filecheck %s --check-prefix=MINNEG
// RUN: not llm-opt %s -p 'kernel-to-cuda{min_blocks=100000}' 2>&1 | filecheck %s --check-prefix=MINBIG
// RUN: not llm-opt %s -p 'kernel-to-cuda{min_blocks=2147483648}' 2>&1 | filecheck %s --check-prefix=MIN31
// RUN: llm-opt %s -p 'kernel-to-cuda{min_blocks=0},kernel-to-cuda{min_blocks=32}' | filecheck %s --check-prefix=OK
// RUN: not llm-opt %s -p 'register-tile{bm=-8}' 2>&1 | filecheck %s --check-prefix=BMNEG
// RUN: not llm-opt %s -p 'register-tile{bm=-1}' 2>&1 | filecheck %s --check-prefix=BMNEG1
// RUN: not llm-opt %s -p 'register-tile{bm=-32 tm=-4}' 2>&1 | filecheck %s --check-prefix=BMNEG32
// RUN: not llm-opt %s -p 'register-tile{bm=32 tm=5}' 2>&1 | filecheck %s --check-prefix=DIVIDE
// RUN: not llm-opt %s -p 'register-tile{bm=1024 bn=1024 tm=32 tn=32}' 2>&1 | filecheck %s --check-prefix=HUGE
// RUN: not llm-opt %s -p 'register-tile{bm=16 bn=16 tm=4 tn=4}' 2>&1 | filecheck %s --check-prefix=THREADS
// RUN: not llm-opt %s -p 'register-tile{blocked=true}' 2>&1 | filecheck %s --check-prefix=BOOL
// RUN: not llm-opt %s -p 'split-k{split_k=-2}' 2>&1 | filecheck %s --check-prefix=SPLIT
// RUN: not llm-opt %s -p 'async-copy{stages=-1}' 2>&1 | filecheck %s --check-prefix=STAGES
// RUN: not llm-opt %s -p 'stage-inputs{kmajor=3}' 2>&1 | filecheck %s --check-prefix=KMAJOR
// RUN: not llm-opt %s -p 'flash-attention{bm=24}' 2>&1 | filecheck %s --check-prefix=FLASH
// RUN: not llm-opt %s -p 'flash-attention{warps=9223372036854775807}' 2>&1 | filecheck %s --check-prefix=WARPS
// RUN: not llm-opt %s -p 'warp-gemv{rows=-3}' 2>&1 | filecheck %s --check-prefix=ROWS
// RUN: not llm-opt %s -p 'loop-to-tile{max_grid=0}' 2>&1 | filecheck %s --check-prefix=GRID
// RUN: not llm-opt %s -p 'kernel-to-cuda{arch=sm_1}' 2>&1 | filecheck %s --check-prefix=ARCH1
// RUN: not llm-opt %s -p 'loop-to-tile{arch=foo}' 2>&1 | filecheck %s --check-prefix=ARCHFOO
// RUN: not llm-opt %s -p 'lower-to-cuda{arch=foo}' 2>&1 | filecheck %s --check-prefix=PIPEARCH

func.func @f() {
  func.return
}

// OK: func.func @f

// MINNEG:      llm-opt: error: invalid options for pass 'kernel-to-cuda': min_blocks must be an integer from 0 to 32, got -1
// MINNEG-NOT:  internal error
// MINBIG:      llm-opt: error: invalid options for pass 'kernel-to-cuda': min_blocks must be an integer from 0 to 32, got 100000
// MIN31:       llm-opt: error: invalid options for pass 'kernel-to-cuda': min_blocks must be an integer from 0 to 32, got 2147483648

// BMNEG:       llm-opt: error: invalid options for pass 'register-tile': bm must be an integer from 1 to 4096 or 0 (not set), got -8
// BMNEG-NOT:   internal error
// BMNEG1:      llm-opt: error: invalid options for pass 'register-tile': bm must be an integer from 1 to 4096 or 0 (not set), got -1
// BMNEG32:     llm-opt: error: invalid options for pass 'register-tile': bm must be {{.*}}, got -32
// DIVIDE:      llm-opt: error: invalid options for pass 'register-tile': tm=5 does not divide bm=32
// HUGE:        llm-opt: error: invalid options for pass 'register-tile': a register tile of tm x tn = 32 x 32 = 1024 outputs per thread is more than 256
// THREADS:     llm-opt: error: invalid options for pass 'register-tile': bm=16 bn=16 tm=4 tn=4 make 16 threads per block; a block has 32 to 1024 threads, a multiple of 32
// BOOL:        llm-opt: error: invalid options for pass 'register-tile': blocked must be an integer, got true

// SPLIT:       llm-opt: error: invalid options for pass 'split-k': split_k must be an integer from 1 to 65535 or 0 (not set), got -2
// STAGES:      llm-opt: error: invalid options for pass 'async-copy': stages must be an integer from 1 to 16 or 0 (not set), got -1
// KMAJOR:      llm-opt: error: invalid options for pass 'stage-inputs': kmajor must be one of 1, 2 or 0 (not set), got 3
// FLASH:       llm-opt: error: invalid options for pass 'flash-attention': bm must be an integer from 16 to 1024, a multiple of 16 or 0 (not set), got 24
// WARPS:       llm-opt: error: invalid options for pass 'flash-attention': warps must be an integer from 1 to 32 or 0 (not set), got 9223372036854775807
// ROWS:        llm-opt: error: invalid options for pass 'warp-gemv': rows must be an integer from 1 to 8 or 0 (not set), got -3
// GRID:        llm-opt: error: invalid options for pass 'loop-to-tile': max_grid must be an integer from 1 to 2147483647, got 0

// ARCH1:       llm-opt: error: invalid options for pass 'kernel-to-cuda': arch: GPU architecture 'sm_1' is older than sm_70, the oldest llmopt compiles for
// ARCHFOO:     llm-opt: error: invalid options for pass 'loop-to-tile': arch: GPU architecture 'foo' is not of the form sm_XY (e.g. sm_90)
// PIPEARCH:    llm-opt: error: invalid options for pipeline 'lower-to-cuda': arch: GPU architecture 'foo' is not of the form sm_XY (e.g. sm_90)
