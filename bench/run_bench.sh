#!/usr/bin/env bash
# Run llmopt's benchmarks (bench/suite.py, bench/sweep.py, bench/symbolic.py, bench/decode.py,
# bench/attention.py) on a GPU host without a package index.
# Usage (from the repository root):
#   bash bench/run_bench.sh ops [--models ...] [--seqs ...] [--ops ...] [--reps N] [--commit SHA]
#   bash bench/run_bench.sh blocks [--models ...] [--seqs ...] [--whole-model] [--commit SHA]
#   bash bench/run_bench.sh sweep [--models ...] [--what layers|prefill] [--seqs ...] [--jobs N]
#   (ops, blocks and sweep take --dtype bfloat16|float16: every system in that dtype, results
#   in <kind>-<dtype>-h200.*, the ops that are matrix products also timed against cuBLAS; and
#   --dry-run: capture and lower the selected cases on the CPU, nothing timed)
#   bash bench/run_bench.sh symbolic [--models ...] [--seqs ...] [--max-seq N] [--reps N]
#   bash bench/run_bench.sh decode [--models ...] [--contexts ...] [--new N] [--profile]
#   bash bench/run_bench.sh attention [--models ...] [--seqs ...] [--dtype bfloat16]
#     [--pipelines lower-to-cuda "$(python3 -c 'from llmopt import registry as r; \
#      print(r.with_options("lower-to-cuda", "flash-attention{register_stats=false}"))')"]
# Results (JSON, Markdown, PNG, and the log) go to $OUT, default bench/results.
# Expects pure-Python wheels in .whl/ (xdsl, ...) if they are not installed.
set -uo pipefail
if [ -d .whl ] && ! python3 -c 'import xdsl' 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH
fi
python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . >/dev/null || exit 1
out=${OUT:-bench/results}
mkdir -p "$out" || exit 1
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null || true
if [ "${1:-}" = sweep ]; then
  shift
  python3 bench/sweep.py "$@" --out-dir "$out" 2>&1 | tee -a "$out/sweep.log"
elif [ "${1:-}" = decode ]; then
  shift
  python3 bench/decode.py "$@" --out-dir "$out" 2>&1 | tee -a "$out/decode.log"
elif [ "${1:-}" = attention ]; then
  shift
  python3 bench/attention.py "$@" --out-dir "$out" 2>&1 | tee -a "$out/attention.log"
elif [ "${1:-}" = symbolic ]; then
  shift
  python3 bench/symbolic.py "$@" --out-dir "$out" 2>&1 | tee -a "$out/symbolic.log"
else
  python3 bench/suite.py "$@" --out-dir "$out" 2>&1 | tee -a "$out/suite-${1:-run}.log"
fi
exit "${PIPESTATUS[0]}"
