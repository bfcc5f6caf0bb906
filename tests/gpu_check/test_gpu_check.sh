#!/usr/bin/env bash
# CI test of tools/gpu-check.sh on a machine without a usable GPU (ctest: cpu.gpu_check).
#   tests/gpu_check/test_gpu_check.sh [path/to/gpu-check.sh]
# (a) --verdict on the fixtures: only fixtures/pass passes, and the skip count is exact.
# (b) the real script, with no usable GPU, must stop before the build, quickly, naming the cause,
#     and leave nothing in the repository: with CUDA_VISIBLE_DEVICES= as found, with a failing
#     nvidia-smi stub, with a succeeding stub (so the nvcc probe itself must fail), and with an
#     nvcc stub of a toolkit older than 12.5 (refused before anything is built).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
script=${1:-$here/../../tools/gpu-check.sh}
root=$(cd "$(dirname "$script")/.." && pwd)
fixtures=$here/fixtures
work=$(mktemp -d /tmp/gpu-check-test.XXXXXX)
trap 'rm -rf "$work"' EXIT
failures=0
ok() { echo "ok:   $*"; }
bad() { echo "FAIL: $*"; failures=$((failures + 1)); }
indent() { sed 's/^/    /'; }

# ---- (a) the verdict on fixtures ---------------------------------------------------------------
verdict() {  # verdict CASE EXPECTED_RC PATTERN...: the summary must match every pattern
  local name=$1 want=$2 out rc p
  shift 2
  out=$("$script" --verdict "$fixtures/$name" 2>&1)
  rc=$?
  if { [ "$want" = 0 ] && [ "$rc" -ne 0 ]; } || { [ "$want" != 0 ] && [ "$rc" -eq 0 ]; }; then
    bad "verdict $name: exit $rc, expected $([ "$want" = 0 ] && echo 0 || echo non-zero)"
    indent <<<"$out"
    return
  fi
  for p in "$@"; do
    if ! grep -qE -- "$p" <<<"$out"; then
      bad "verdict $name: summary lacks /$p/"
      indent <<<"$out"
      return
    fi
  done
  ok "verdict $name: exit $rc"
}
verdict pass 0 'GPU tests: 6 registered, 6 ran, 6 passed, 0 failed, 0 skipped' \
  'GPU: NVIDIA H200' '4917 GB/s peak' 'driver: 580\.159\.04' 'toolkit: nvcc release 13\.0' \
  'gpu-check: PASS$'
# Its log holds each skip twice ("[  SKIPPED ]" per test and in the list): counted once.
verdict one-skipped 1 ', 5 passed, 0 failed, 1 skipped$' 'skipped: cuda\.BadInput\.EmptyBatchesAreNoOps' \
  'FAIL: 1 GPU test\(s\) skipped' 'gpu-check: FAIL'
verdict one-failed 1 ', 5 passed, 1 failed, 0 skipped$' 'failed: cuda\.DeviceRef\.HotKeyLfu' 'gpu-check: FAIL'
verdict bench-no-table 1 'FAIL: benchmark: .*nothing measured' 'gpu-check: FAIL'
verdict zero-tests 1 'FAIL: zero GPU tests ran' 'gpu-check: FAIL'
# Everything passed, but one of the four sanitizers never reported: not a pass.
verdict no-initcheck 1 "FAIL: step 'initcheck' did not run" 'gpu-check: FAIL'
# A real `ctest -L '^cuda$' --output-junit` of this suite on a machine without a GPU: everything
# skips, and the benchmark's smoke test (exit 0, "nothing measured") counts as skipped too.
verdict no-gpu-ctest 1 'GPU tests: 49 registered, 0 ran, 0 passed, 0 failed, 49 skipped$' \
  'skipped: cuda\.bench_gpu_smoke' 'FAIL: 49 GPU test\(s\) skipped' 'gpu-check: FAIL'

# ---- (b) the real script without a usable GPU --------------------------------------------------
# What the script would create in the repository once past the probe (other tests may write
# elsewhere in it meanwhile, so only these are compared).
made=(build-gpu build-gpu-check build-gpu-ccache)
absent=()
for d in "${made[@]}"; do [ -e "$root/$d" ] || absent+=("$d"); done
run_check() {  # run_check NAME PATTERN [ENV...]: must exit non-zero within 60 s, naming PATTERN
  local name=$1 pattern=$2 out="$work/$1" t0 secs rc
  shift 2
  mkdir -p "$out"
  t0=$(date +%s)
  env "$@" OUT="$out" timeout 120 "$script" >"$out/stdout" 2>&1
  rc=$?
  secs=$(($(date +%s) - t0))
  if [ "$rc" -eq 0 ]; then
    bad "$name: gpu-check.sh exited 0 without a usable GPU"
  elif [ "$secs" -gt 60 ]; then
    bad "$name: took $secs s (exit $rc): it must stop before the build"
  elif ! grep -qE -- "$pattern" "$out/summary.txt" 2>/dev/null; then
    bad "$name: exit $rc, but summary.txt does not name the cause (/$pattern/)"
  elif ! grep -q '^gpu-check: FAIL' "$out/stdout"; then
    bad "$name: the summary did not print last"
  else
    ok "$name: exit $rc in $secs s: $(grep -m1 '^GPU:' "$out/summary.txt")"
    return
  fi
  indent <"$out/stdout"
}
have_nvcc=0
if command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ]; then have_nvcc=1; fi
probe_cause='cudaGetDeviceCount returned cudaError[A-Za-z]+'
if [ "$have_nvcc" = 0 ]; then
  echo "note: no nvcc here (PATH, /usr/local/cuda/bin): the probe stops at 'nvcc not found'"
  probe_cause='nvcc not found'
fi

# As found: this machine has no nvidia-smi (or, on a GPU machine, no visible device).
run_check no-visible-device "nvidia-smi not found|nvidia-smi failed|$probe_cause" CUDA_VISIBLE_DEVICES=

mkdir -p "$work/smi-fail" "$work/smi-ok"
printf '#!/bin/sh\necho "NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver." >&2\nexit 9\n' \
  >"$work/smi-fail/nvidia-smi"
printf '#!/bin/sh\necho "NVIDIA Stub, 999.99, 1 MiB, 1 MHz, 1 MHz"\n' >"$work/smi-ok/nvidia-smi"
chmod +x "$work/smi-fail/nvidia-smi" "$work/smi-ok/nvidia-smi"
run_check nvidia-smi-fails 'nvidia-smi failed \(exit 9\): NVIDIA-SMI has failed' \
  PATH="$work/smi-fail:$PATH"
run_check nvidia-smi-stub "$probe_cause" PATH="$work/smi-ok:$PATH" CUDA_VISIBLE_DEVICES=
mkdir -p "$work/nvcc-old"
printf '#!/bin/sh\necho "nvcc: NVIDIA (R) Cuda compiler driver"\necho "Cuda compilation tools, release 12.4, V12.4.131"\n' \
  >"$work/nvcc-old/nvcc"
chmod +x "$work/nvcc-old/nvcc"
run_check old-toolkit 'CUDA toolkit 12\.4 .*is older than 12\.5' PATH="$work/nvcc-old:$work/smi-ok:$PATH"
if [ "$have_nvcc" = 1 ] && ! grep -q '^runtime=' "$work/nvidia-smi-stub/probe.txt"; then
  bad "nvidia-smi-stub: the probe did not run (no runtime= in probe.txt)"
fi

left=()
for d in "${absent[@]}"; do [ ! -e "$root/$d" ] || left+=("$d"); done
if [ ${#left[@]} -gt 0 ]; then
  bad "the runs left ${left[*]} in $root"
else
  ok "no ${absent[*]:-build folders} left in $root"
fi

if [ "$failures" -gt 0 ]; then
  echo "$failures check(s) failed"
  exit 1
fi
echo "all gpu-check checks passed"
