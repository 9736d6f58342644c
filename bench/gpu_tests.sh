#!/usr/bin/env bash
# Run llmopt's GPU tests on a GPU host without a package index.
# Usage (from the repository root): bash bench/gpu_tests.sh [pytest args...]
# Expects pure-Python wheels in .whl/ (xdsl, filecheck, lit, ...) if they are not installed.
set -uo pipefail
if [ -d .whl ] && ! python3 -c 'import xdsl' 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH
fi
python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . >/dev/null || exit 1
out=${OUT:-.}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/gpu.txt"
LLMOPT_REPORT="$out/ops-parity.json" python3 -m pytest -m gpu -q -s -p no:cacheprovider \
  -W ignore::DeprecationWarning test "$@" 2>&1 | tee "$out/gpu-tests.log"
python3 -m llmopt.tools.llmopt_cli demo rmsnorm --shape 1 128 2048 2>&1 | tail -3
