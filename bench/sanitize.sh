#!/usr/bin/env bash
# compute-sanitizer memcheck and racecheck over the kernels llmopt generates for TinyLlama-1.1B
# and Qwen2.5-7B (one decoder layer and the lm_head at real dimensions, and the decode step),
# on a GPU host, in steps of explicit time limits, the most important first. The kernels are
# run by bench/sanitize_models.py (see its docstring).
#
# Usage (from the repository root): bash bench/sanitize.sh [LOG_DIR]
#   LOG_DIR (default: $OUT if set, else build/sanitize) gets one log per step and summary.txt;
#   the summary table is printed at the end.
#
# 1. Prebuild, without the sanitizer: every program the selected steps run is lowered and
#    compiled into the compile cache ($LLMOPT_CACHE_DIR, default build/sanitize-cache), by
#    processes side by side: Qwen2.5-7B's whole-model programs (the first step waits for
#    these only), the Generators and TinyLlama's program meanwhile. A warm cache makes this a
#    matter of seconds.
# 2. The sanitized steps, in this order; each finds its programs in the cache
#    (--require-cached) and makes its weights on the CPU, so that the sanitized process spends
#    its time in llmopt's kernels:
#      racecheck-qwen       Qwen2.5-7B whole model, FP32, at 128, 200 (ragged) and 512 tokens
#      memcheck-decode      the Generators of both models, FP32 and BF16: the prefill of a
#                           300-token prompt, then three decode steps (warp-per-output
#                           products, flash-decoding with split keys and its merge), the
#                           later ones replayed from the step's CUDA graph
#      racecheck-decode     the same under racecheck
#      memcheck-qwen        as racecheck-qwen, with torch's caching allocator off (every
#                           buffer its own allocation, so that memcheck knows its bounds)
#      racecheck-tinyllama  TinyLlama whole model, FP32, at 512 tokens
#    and, not in the default STEPS:
#      memcheck-bf16        both models' whole-model programs in BF16 (tensor-core products
#                           and attention) at 128, 200 and 512 tokens, caching allocator off
#      memcheck-ragged      TinyLlama, FP32, at 17 and 200 tokens (no tile divides them)
#      memcheck-dynamic     one symbolic program (seq <= 2048) per model and dtype, FP32
#                           and BF16, run at 1, 17, 100, 200, 500 and 1000 tokens, so that
#                           every length bucket's kernel variant runs
#      racecheck-kernels    racecheck kernel by kernel: every kernel that uses shared memory
#                           in the programs of the groups KERNEL_GROUPS names (default "qwen
#                           decode tinyllama"; the others are bf16, ragged and dynamic, the
#                           programs of the memcheck steps of those names)
#                           (bench/sanitize_models.py --list-kernels; the decode steps run
#                           without the prefill), each checked at its first launch only
#                           (--kernel-name kne=NAME --launch-count 1) in a process of its own,
#                           KERNEL_JOBS at a time (default 6), each under KERNEL_LIMIT_S
#                           seconds (default 150), from the KERNEL_FROM-th of the list
#                           (default 1: a run the budget cut short goes on from there); the
#                           other kernels run unchecked at full speed
#
# Time: the script stops within BUDGET_S seconds (default 480). Every step runs under
# `timeout` with the limit given below, cut to what is left of the budget, and is skipped when
# less than MIN_STEP_S seconds (default 20) are left; a step stopped by its limit keeps the
# lines its run printed (each says what finished, and when). Environment:
#   STEPS           the sanitized steps to run (default: the first five, in the order above)
#   SANITIZER       the compute-sanitizer command (default: compute-sanitizer on the PATH,
#                   else /usr/local/cuda/bin/compute-sanitizer)
#   SANITIZER_ARGS  more compute-sanitizer options for every step. A run too long for one
#                   step splits into pieces by launches: "--launch-skip 40 --launch-count 40"
#                   checks launches 41 to 80 only (the others run unchecked); or by kernel name:
#                   "--kernel-name kns=merge" checks only kernels whose name contains "merge"
#   EXCLUDE_TORCH   1 (default): torch's own kernels (at::native, whose mangled names contain
#                   "at6native") are not checked, by --kernel-name-exclude kns=at6native, if
#                   this compute-sanitizer accepts that option; 0: every kernel is checked
#   PRINT_LIMIT     how many errors each step prints in full (default 100)
#   API_ERRORS      compute-sanitizer's --report-api-errors: no (default: CUDA API calls that
#                   return an error are not counted, such as the driver-API probes of
#                   cuGetProcAddress at start-up; errors in kernels are), explicit or all
#   NO_GRAPH        1: the decode steps launch every kernel from the host (a decode program
#                   that takes its length as an argument) instead of replaying a CUDA graph
#   INIT_DEVICE     where the sanitized runs make their seeded random weights: cpu (default)
#                   or cuda (faster, but torch's initialisation kernels then run under the
#                   sanitizer, unchecked only where EXCLUDE_TORCH takes effect)
# Exit status: 0 when every step ran and passed, 1 otherwise.
set -uo pipefail

began=$SECONDS
budget=${BUDGET_S:-480}
min_step=${MIN_STEP_S:-20}
logs=${1:-${OUT:-build/sanitize}}
steps=${STEPS:-racecheck-qwen memcheck-decode racecheck-decode memcheck-qwen racecheck-tinyllama}
mkdir -p "$logs" || exit 1
export LLMOPT_CACHE_DIR=${LLMOPT_CACHE_DIR:-$PWD/build/sanitize-cache}
export PYTHONUNBUFFERED=1

if [ -d .whl ] && ! python3 -c 'import xdsl' 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH
fi
python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . >/dev/null || exit 1

if [ -n "${SANITIZER:-}" ]; then
  sanitizer=$SANITIZER
elif command -v compute-sanitizer >/dev/null 2>&1; then
  sanitizer=compute-sanitizer
else
  sanitizer=/usr/local/cuda/bin/compute-sanitizer
fi
read -r -a extra <<< "${SANITIZER_ARGS:-}"

summary=$logs/summary.txt
{
  echo "# compute-sanitizer over llmopt's kernels"
  echo "GPU: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)"
  echo "sanitizer: $("$sanitizer" --version 2>/dev/null | grep -i version | head -1)"
  if git rev-parse --verify -q HEAD > /dev/null 2>&1; then
    echo "commit: $(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo ' (with local changes)')"
  fi
  echo "compile cache: $LLMOPT_CACHE_DIR; budget ${budget} s"
} > "$summary"

exclude=()
if [ "${EXCLUDE_TORCH:-1}" = 1 ]; then
  if timeout 30 "$sanitizer" --kernel-name-exclude kns=at6native --require-cuda-init no \
      /bin/true > "$logs/probe.log" 2>&1; then
    exclude=(--kernel-name-exclude kns=at6native)
    echo "torch's at::native kernels excluded (--kernel-name-exclude kns=at6native)" >> "$summary"
  else
    echo "every kernel checked (this sanitizer refused --kernel-name-exclude, see probe.log)" >> "$summary"
  fi
else
  echo "every kernel checked" >> "$summary"
fi

py=(python3 bench/sanitize_models.py)
graph=()
[ "${NO_GRAPH:-0}" = 1 ] && graph=(--no-graph)
qwen=(--models qwen2.5-7b --layers 1 --seqs 128 200 512)
decode=(--decode --models qwen2.5-7b tinyllama --layers 1 --dtypes float32 bfloat16
        --contexts 300 --new 4 ${graph[@]+"${graph[@]}"})
tinyllama=(--models tinyllama --layers 1 --seqs 512)
bf16=(--models qwen2.5-7b tinyllama --layers 1 --dtypes bfloat16 --seqs 128 200 512)
ragged=(--models tinyllama --layers 1 --seqs 17 200)
dynamic=(--models qwen2.5-7b tinyllama --layers 1 --dtypes float32 bfloat16 --dynamic
         --max-seq 2048 --seqs 1 17 100 200 500 1000)
group_args() {  # group: the arguments of its runs, one a line
  case $1 in
    qwen) printf '%s\n' "${qwen[@]}" ;;
    decode) printf '%s\n' "${decode[@]}" ;;
    tinyllama) printf '%s\n' "${tinyllama[@]}" ;;
    bf16) printf '%s\n' "${bf16[@]}" ;;
    ragged) printf '%s\n' "${ragged[@]}" ;;
    dynamic) printf '%s\n' "${dynamic[@]}" ;;
  esac
}
kernel_groups=${KERNEL_GROUPS:-qwen decode tinyllama}

rows=()
failed=0
left() { echo $(( budget - (SECONDS - began) )); }
row() {  # step, limit, seconds taken, exit status, result
  rows+=("$(printf '%-20s %6s %6s %5s  %s' "$1" "$2" "$3" "$4" "$5")")
  echo "== $1: $5 (limit $2 s, took $3 s, exit $4)"
}

# --- prebuild: one background process per group, each under its own limit -----------------
declare -A pid
start_prebuild() {  # group, limit, arguments of sanitize_models.py
  local group=$1 limit=$2
  shift 2
  (( limit > $(left) )) && limit=$(left)
  (
    start=$SECONDS
    timeout -k 10 "$limit" "${py[@]}" --prebuild "$@" < /dev/null > "$logs/prebuild-$group.log" 2>&1
    echo "$? $(( SECONDS - start )) $limit" > "$logs/prebuild-$group.status"
  ) &
  pid[$group]=$!
}
declare -A prebuilt
wait_prebuild() {  # group; its exit status, its row added once
  local group=$1 code=1 took=- limit=-
  if [ -z "${prebuilt[$group]+x}" ]; then
    wait "${pid[$group]}"
    [ -f "$logs/prebuild-$group.status" ] && read -r code took limit < "$logs/prebuild-$group.status"
    prebuilt[$group]=$code
    local result="every program in the compile cache"
    case $code in
      0) ;;
      124|137) result="TIMED OUT"; failed=1 ;;
      *) result="FAILED (see prebuild-$group.log)"; failed=1 ;;
    esac
    row "prebuild-$group" "$limit" "$took" "$code" "$result"
  fi
  return "${prebuilt[$group]}"
}

group_of() {
  case $1 in
    *-qwen) echo qwen ;;
    *-decode) echo decode ;;
    *-tinyllama) echo tinyllama ;;
    *-bf16) echo bf16 ;;
    *-ragged) echo ragged ;;
    *-dynamic) echo dynamic ;;
    racecheck-kernels) echo "$kernel_groups" ;;
  esac
}
needed=" "
for step in $steps; do needed+="$(group_of "$step") "; done
for group in qwen decode tinyllama bf16 ragged dynamic; do
  if [[ $needed == *" $group "* ]]; then
    mapfile -t argv < <(group_args "$group")
    case $group in decode|dynamic) limit=300 ;; *) limit=240 ;; esac
    start_prebuild "$group" "$limit" "${argv[@]}"
  fi
done

# --- the sanitized steps ----------------------------------------------------------------------
run_step() {  # step, tool, limit, runs expected, environment assignment or -, arguments
  local step=$1 tool=$2 limit=$3 expected=$4 assign=$5
  shift 5
  local group
  group=$(group_of "$step")
  if (( $(left) < min_step )); then
    row "$step" "$limit" - - "skipped: the budget is spent"; failed=1; return
  fi
  if ! wait_prebuild "$group"; then
    row "$step" "$limit" - - "skipped: prebuild-$group failed"; failed=1; return
  fi
  if (( $(left) < min_step )); then
    row "$step" "$limit" - - "skipped: the budget is spent"; failed=1; return
  fi
  (( limit > $(left) )) && limit=$(left)
  local env_args=()
  [ "$assign" != - ] && env_args=("$assign")
  local log=$logs/$step.log start=$SECONDS code
  echo "== $step: $tool, limit $limit s, log $log"
  timeout -k 10 "$limit" env ${env_args[@]+"${env_args[@]}"} "$sanitizer" --tool "$tool" \
    --print-limit "${PRINT_LIMIT:-100}" --report-api-errors "${API_ERRORS:-no}" \
    --error-exitcode 3 ${exclude[@]+"${exclude[@]}"} \
    ${extra[@]+"${extra[@]}"} "${py[@]}" --require-cached --init-device "${INIT_DEVICE:-cpu}" \
    "$@" < /dev/null > "$log" 2>&1
  code=$?
  local took=$(( SECONDS - start ))
  local verdict ok bad miss
  verdict=$(grep -a -E '(ERROR|RACECHECK) SUMMARY' "$log" | tail -1 | sed -E 's/^=+ *//')
  ok=$(grep -a -c -E 'finite logits: True|in the vocabulary: True' "$log")
  bad=$(grep -a -c -E 'finite logits: False|in the vocabulary: False' "$log")
  miss=$(grep -a -c 'NOT in the compile cache' "$log")
  local result="${verdict:-no sanitizer summary}; $ok/$expected runs done"
  (( bad > 0 )) && result+=", $bad with bad outputs"
  (( miss > 0 )) && result+=", $miss lowered in the run (not prebuilt)"
  case $code in
    0) ;;
    124|137) result="TIMED OUT: $result" ;;
    3) result="ERRORS FOUND: $result" ;;
    *) result="FAILED: $result" ;;
  esac
  (( code != 0 || bad > 0 || ok < expected )) && failed=1
  row "$step" "$limit" "$took" "$code" "$result"
}

# racecheck-kernels: list the kernels with shared memory, then check each alone.
racecheck_kernels() {
  local step=racecheck-kernels group dir=$logs/racecheck-kernels start=$SECONDS
  local limit=${KERNEL_LIMIT_S:-150} jobs=${KERNEL_JOBS:-6}
  for group in $kernel_groups; do
    if ! wait_prebuild "$group"; then
      row "$step" - - - "skipped: prebuild-$group failed"; failed=1; return
    fi
  done
  mkdir -p "$dir"
  local filter=kne
  if ! timeout 30 "$sanitizer" --kernel-name kne=probe --require-cuda-init no /bin/true \
      > "$dir/probe.log" 2>&1; then
    filter=kns  # by substring: the first launch whose name contains NAME
  fi
  : > "$dir/kernels.txt"
  local args
  for group in $kernel_groups; do
    mapfile -t args < <(group_args "$group")
    timeout -k 10 300 "${py[@]}" --list-kernels "${args[@]}" < /dev/null \
      > "$dir/list-$group.log" 2>&1 || { row "$step" - - - "listing $group FAILED"; failed=1; }
    grep -a $'^KERNEL\t' "$dir/list-$group.log" >> "$dir/kernels.txt"
  done
  local n=0 running=0 name options log first=${KERNEL_FROM:-1}
  while IFS=$'\t' read -r _ name options; do
    n=$(( n + 1 ))
    (( n < first )) && continue
    if (( $(left) < min_step )); then
      echo "$name skipped: the budget is spent" >> "$dir/results.txt"; continue
    fi
    log=$dir/$(printf '%03d' "$n")-$name.log
    read -r -a argv <<< "$options"
    (
      lim=$limit
      (( lim > $(left) )) && lim=$(left)
      timeout -k 10 "$lim" "$sanitizer" --tool racecheck --print-limit "${PRINT_LIMIT:-100}" \
        --report-api-errors "${API_ERRORS:-no}" --error-exitcode 3 \
        --kernel-name "$filter=$name" --launch-count 1 ${extra[@]+"${extra[@]}"} \
        "${py[@]}" --require-cached --init-device "${INIT_DEVICE:-cpu}" "${argv[@]}" \
        < /dev/null > "$log" 2>&1
      code=$?
      verdict=$(grep -a -E 'RACECHECK SUMMARY' "$log" | tail -1 | sed -E 's/^=+ *//')
      sane=$(grep -a -c -E 'finite logits: True|in the vocabulary: True' "$log")
      echo "$(printf '%-28s exit %3s' "$name" "$code")  ${verdict:-no summary}; $sane runs" \
        "done; $options" >> "$dir/results.txt"
    ) &
    running=$(( running + 1 ))
    if (( running >= jobs )); then wait -n; running=$(( running - 1 )); fi
  done < "$dir/kernels.txt"
  wait
  local clean bad timed
  clean=$(grep -c -E 'exit +0 .* 0 hazards' "$dir/results.txt")
  bad=$(grep -c -E 'exit +3 ' "$dir/results.txt")
  timed=$(grep -c -E 'exit +(124|137) |skipped' "$dir/results.txt")
  local checked=$(( n - first + 1 ))
  (( clean < checked )) && failed=1
  row "$step" "$limit" $(( SECONDS - start )) - \
    "$checked kernels (from number $first of $n): $clean clean, $bad with hazards, $timed not finished (results.txt)"
  cat "$dir/results.txt"
}

for step in $steps; do
  case $step in
    racecheck-qwen) run_step "$step" racecheck 210 3 - "${qwen[@]}" ;;
    memcheck-decode) run_step "$step" memcheck 120 4 - "${decode[@]}" ;;
    racecheck-decode) run_step "$step" racecheck 150 4 - "${decode[@]}" ;;
    memcheck-qwen) run_step "$step" memcheck 100 3 PYTORCH_NO_CUDA_MEMORY_CACHING=1 "${qwen[@]}" ;;
    racecheck-tinyllama) run_step "$step" racecheck 90 1 - "${tinyllama[@]}" ;;
    memcheck-bf16) run_step "$step" memcheck 150 6 PYTORCH_NO_CUDA_MEMORY_CACHING=1 "${bf16[@]}" ;;
    memcheck-ragged) run_step "$step" memcheck 60 2 PYTORCH_NO_CUDA_MEMORY_CACHING=1 "${ragged[@]}" ;;
    memcheck-dynamic) run_step "$step" memcheck 240 24 PYTORCH_NO_CUDA_MEMORY_CACHING=1 \
      "${dynamic[@]}" ;;
    racecheck-kernels) racecheck_kernels ;;
    *) row "$step" - - - "unknown step"; failed=1 ;;
  esac
done
for group in "${!pid[@]}"; do wait_prebuild "$group" > /dev/null; done

{
  echo
  printf '%-20s %6s %6s %5s  %s\n' step limit took exit result
  printf '%s\n' "${rows[@]}"
  echo
  echo "total $(( SECONDS - began )) s of a ${budget} s budget"
} >> "$summary"
echo
cat "$summary"
exit "$failed"
