#!/usr/bin/env bash
# Builds the libFuzzer targets (preset fuzz, fuzz/README.md) and, for each one:
#   1. replays its committed corpus fuzz/corpus/<target>/ (valid inputs and past findings);
#   2. fuzzes it for SECONDS (default 60), new inputs going to build/fuzz/corpus/<target>/.
# Any crash, sanitizer report, leak, input slower than 1 s (-timeout=1, inputs up to 1 MiB) or
# RSS above 2 GiB fails the target; its input is saved under build/fuzz/artifacts/<target>/.
#   tools/fuzz.sh [SECONDS] [TARGET...]      targets: safetensors traces redis_reply cli_args
# The last line is "fuzz: P passed, F failed" (tools/dev.sh test adds it to its totals).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
shift || true
all=(safetensors traces redis_reply cli_args)
targets=("$@")
((${#targets[@]})) || targets=("${all[@]}")
jobs=$(nproc 2>/dev/null || echo 2)

if ! command -v clang++ >/dev/null; then
  echo "error: clang++ is needed for libFuzzer (tools/dev.sh setup installs clang and libclang-rt-dev)" >&2
  exit 1
fi
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH=/usr/local/cuda/bin:$PATH  # the CCCL headers, as for every preset
fi
echo "== fuzz: building (preset fuzz)"
cmake --preset fuzz >/dev/null
cmake --build --preset fuzz -j "$jobs"

opts=(-timeout=1 -max_len=1048576 -rss_limit_mb=2048)
passed=0 failed=0
for t in "${targets[@]}"; do
  bin=build/fuzz/fuzz/fuzz_$t
  if [ ! -x "$bin" ]; then  # fuzz_redis_reply needs hiredis
    echo "fuzz_$t: not built (see the cmake output), skipped"
    continue
  fi
  seeds=fuzz/corpus/$t work=build/fuzz/corpus/$t art=build/fuzz/artifacts/$t log=build/fuzz/fuzz_$t.log
  mkdir -p "$work" "$art"
  dict=()
  [ -f "fuzz/$t.dict" ] && dict=(-dict="fuzz/$t.dict")
  ok=1
  # Replay: each committed input once (a finding fixed stays fixed).
  if ! "$bin" "${opts[@]}" -artifact_prefix="$art/" "$seeds"/* >"$log" 2>&1; then
    ok=0
    echo "fuzz_$t: a committed input of $seeds fails:"
  # Fuzz: the first folder takes new inputs, the committed one only seeds.
  elif ! "$bin" "${opts[@]}" "${dict[@]}" -max_total_time="$seconds" -print_final_stats=1 \
         -artifact_prefix="$art/" "$work" "$seeds" >"$log" 2>&1; then
    ok=0
    echo "fuzz_$t: failed after fuzzing:"
  fi
  if ((ok)); then
    runs=$(sed -nE 's/^stat::number_of_executed_units: *([0-9]+).*/\1/p' "$log" | tail -1)
    cov=$(grep -oE 'cov: [0-9]+' "$log" | tail -1 || true)
    echo "fuzz_$t: ok (${seconds} s, ${runs:-?} runs, ${cov:-cov: ?}, corpus $(ls "$work" | wc -l))"
    passed=$((passed + 1))
  else
    grep -E 'ERROR|SUMMARY|Test unit written|Slowest unit|==[0-9]+==' "$log" | head -20 || true
    echo "  (full log: $log; a fixed finding's input goes into $seeds/)"
    failed=$((failed + 1))
  fi
done
echo "fuzz: $passed passed, $failed failed"
((failed == 0))
