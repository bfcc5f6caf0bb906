#!/usr/bin/env bash
# The one prepared check of the CUDA backend on a lent GPU machine: an H100 by default (the device
# tool's nvidia-h100-x1), an H200 when that is what the lease gives. It passes only when a GPU was
# really used: a kernel ran in the probe, every GPU test ran and passed (none skipped), the
# benchmark printed its tables, the paper run finished and the four sanitizers found nothing.
#
# 1. Here, once (no GPU needed):   tools/gpu-check.sh --prepare
#    The device machine reaches no package registry: this copies what the build needs and it lacks
#    into build-gpu-deps/ (ignored by .gitignore's /build-*/, about 6 MB): GoogleTest's sources
#    (built there) and the header-only CLI11, nlohmann_json and libcuckoo with their CMake configs.
# 2. Through the device tool, from the repository root:
#      command: tools/gpu-check.sh     carry: ["build-gpu-deps"]     timeout_s: 420
#    Cost: the machine's start (1 to 2 min) plus at most GPU_CHECK_BUDGET_S (330 s) for the script,
#    about 7 of the 15 device minutes. To rerun after a fix, call again at once: the machine stays
#    warm only 30 s after a call, and a warm rerun keeps build-gpu/ (incremental build, ~3 min).
#    Otherwise call give_back.
#
# Steps and their expected times on the device machine (16 cores). Estimates, none measured on a
# GPU yet; [the step's own cap], every step also bounded by what is left of the budget:
#   machine, toolkit, CUDA probe   ~10 s [none]  nvidia-smi, nvcc >= 12.5 (else stop at once),
#                                               one kernel built for sm_$GPU_CHECK_ARCH that must
#                                               run; any failure stops here, before the build
#   GoogleTest (carried sources)   ~15 s [90+90 s]
#   configure                      ~10 s [120 s]  Release, sm_$GPU_CHECK_ARCH, -lineinfo
#   build                          ~35 s [300 s]  ccht_tests_cuda, ccht_bench_gpu, the ccht CLI
#                                               (ccache if present; cold on a fresh machine)
#   GPU tests                   30-60 s [200 s]  ctest -L '^cuda$', 60 s per test, cuda.PageCache.*
#                                               among them
#   ccht_bench_gpu              20-40 s [120 s]  --policy all: the table's policies and the page
#                                               cache, against the GPU's own peak bandwidth
#   paper run, in front            ~40 s [120 s]  `ccht paper --backend cuda` at a small size
#   sanitizers, in the background 30-150 s [150 s each, beside the paper run] memcheck,
#                                               synccheck, racecheck and initcheck, each over a
#                                               few small tests (see step 5); the paper's Mreq/s
#                                               are therefore not timings to quote;
#                                               GPU_CHECK_SANITIZER=0 turns them off
#   about 4 to 5 minutes in all, under the 330 s budget.
# compute-sanitizer refused the device on the gVisor H200 machines seen on 2026-11-04
# (/work/.library/device/KINDS.md); there the sanitizer steps fail and say so.
#
# Cold build of what step "build" builds (ccache off; the configure step's flags), on the 2-core
# development VM, 2026-12-07, while other builds shared the machine (wall times were not
# comparable, so CPU seconds; per translation unit from /usr/bin/time):
#   before: one translation unit with every policy's table kernels, no -lineinfo:
#           340 CPU s in all; longest translation unit kernels/launcher_cuda.cu, 36 s
#           (on a quiet machine: 155 s wall at -j2, launcher_cuda.cu 30 s)
#   after:  one translation unit per policy (CMakeLists.txt, kernels/launcher_cuda.cuh), -lineinfo:
#           365 CPU s in all; longest launcher_cuda_double_lru.cu, 25 s, then tests/test_table.cpp
#           (20 to 26 s over runs: about 15% is noise here). kernels/ went from 49 to 106 CPU s,
#           since each unit parses the same headers; -lineinfo is 3% of that (103 CPU s without).
# On 16 cores the compiles are bound by the longest one, so the estimate (the per-unit CPU times
# scheduled longest first on 16 workers) drops from 36 s to about 25 s, plus a few seconds of
# linking; on 2 cores the split costs time instead.
#
# Output under $OUT (else build-gpu-check/), 7 files, since the device tool returns at most 8:
# gpu-check.log (everything), summary.txt (printed last), probe.txt, steps.txt, junit-cuda.xml,
# bench.md, paper.md.
#
#   tools/gpu-check.sh --verdict DIR   prints the summary of DIR's files above and exits 0 only if
#                                      they show a passing check (what the real run ends with;
#                                      tests/gpu_check/ tests it on fixtures).
# Environment: GPU_CHECK_BUDGET_S (330), GPU_CHECK_ARCH (90), GPU_CHECK_SANITIZER (1),
# GPU_CHECK_SANITIZER_FILTER (one gtest filter, used as given, for all four tools instead of
# theirs), GPU_CHECK_BENCH_ARGS (--log2-slots 26 --reps 10 --policy all), GPU_CHECK_PAPER_ARGS
# (see paper_args below).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
deps="$root/build-gpu-deps"

prepare() {
  set -e
  rm -rf "$deps"
  mkdir -p "$deps/prefix/include" "$deps/prefix/share/cmake"
  if [ -d /usr/src/googletest ]; then
    cp -r /usr/src/googletest "$deps/googletest-src"
  else
    echo "warning: /usr/src/googletest not found (apt-get install googletest); the device needs it" >&2
  fi
  # Debian's generated CMake configs locate the prefix relative to themselves, so
  # prefix/share/cmake/<pkg> + prefix/include works anywhere.
  for pkg in CLI11:CLI nlohmann_json:nlohmann libcuckoo:libcuckoo; do
    cfg=${pkg%%:*} inc=${pkg##*:}
    if [ -d "/usr/include/$inc" ] && [ -d "/usr/share/cmake/$cfg" ]; then
      cp -r "/usr/include/$inc" "$deps/prefix/include/"
      cp -r "/usr/share/cmake/$cfg" "$deps/prefix/share/cmake/"
    else
      echo "note: $cfg not installed here; not carried" >&2
    fi
  done
  du -sh "$deps"
  echo "prepared $deps: carry it with the device run (carry: [\"build-gpu-deps\"])"
}

# ---- the verdict: the only place that decides pass or fail ------------------------------------
# Reads DIR/probe.txt (key=value), DIR/steps.txt (ok|FAIL <tab> step <tab> detail),
# DIR/junit-cuda.xml (ctest --output-junit) and DIR/bench.md; prints the summary; returns 0 or 1.
verdict() {
  local dir=$1 probe="$1/probe.txt" steps="$1/steps.txt" junit="$1/junit-cuda.xml" bench="$1/bench.md"
  local -a fails=()
  kv() { sed -n "s/^$1=//p" "$probe" 2>/dev/null | head -1; }
  echo "== gpu-check verdict ($dir)"

  # The GPU, the driver and the toolkit, as the probe saw them.
  if [ ! -f "$probe" ]; then
    echo "GPU: unknown (no probe.txt)"
    fails+=("no probe output: the check did not reach its first step")
  else
    if [ "$(kv status)" = ok ]; then
      local bw
      bw=$(kv bandwidth_gbs)
      echo "GPU: $(kv gpu), compute capability $(kv cc), $(kv sms) SMs, $(kv memory_gib) GiB${bw:+, $bw GB/s peak}, $(kv devices) device(s)"
    else
      echo "GPU: none confirmed usable (the check stopped at its first step): $(kv error)"
      fails+=("GPU probe: $(kv error)")
    fi
    local drv dc rt tk
    drv=$(kv driver) dc=$(kv driver_cuda) rt=$(kv runtime) tk=$(kv nvcc)
    echo "driver: ${drv:-unknown}${dc:+ (CUDA $dc)}; runtime: ${rt:+CUDA }${rt:-unknown}; toolkit: ${tk:+nvcc }${tk:-unknown}"
  fi

  # GPU tests, one <testcase> per ctest test. CMake writes status="run" (passed), "fail",
  # "notrun" with <skipped message="SKIP_..."> (skipped) or another message (not run: counted as
  # failed, as ctest does), and "disabled".
  local total=0 ran=0 passed=0 failed=0 skipped=0 st name msg
  local -a bad=() skips=()
  if [ -f "$junit" ]; then
    while IFS=$'\t' read -r st name msg; do
      total=$((total + 1))
      case "$st" in
        run) ran=$((ran + 1)); passed=$((passed + 1)) ;;
        fail) ran=$((ran + 1)); failed=$((failed + 1)); bad+=("$name") ;;
        disabled) skipped=$((skipped + 1)); skips+=("$name (disabled)") ;;
        notrun)
          if [[ $msg == SKIP_* ]]; then
            skipped=$((skipped + 1)); skips+=("$name")
          else
            failed=$((failed + 1)); bad+=("$name (not run: $msg)")
          fi ;;
        *) failed=$((failed + 1)); bad+=("$name (status '$st')") ;;
      esac
    done < <(awk '
      function attr(s, a) {
        if (match(s, a "=\"[^\"]*\"")) { return substr(s, RSTART + length(a) + 2, RLENGTH - length(a) - 3) }
        return ""
      }
      function unxml(s) {
        gsub(/&lt;/, "<", s); gsub(/&gt;/, ">", s); gsub(/&quot;/, "\"", s); gsub(/&apos;/, "\047", s)
        gsub(/&amp;/, "\\&", s); return s
      }
      function flush() { if (open) { print st "\t" unxml(name) "\t" msg } open = 0 }
      /^[ \t]*<testcase / { flush(); name = attr($0, "name"); st = attr($0, "status"); msg = ""; open = 1 }
      /^[ \t]*<(skipped|failure) / { msg = attr($0, "message") }
      # ccht_bench_gpu exits 0 without a GPU: its smoke test then skipped in all but name.
      /nothing measured/ && st == "run" { st = "notrun"; msg = "SKIP_nothing_measured" }
      END { flush() }' "$junit")
    echo "GPU tests: $total registered, $ran ran, $passed passed, $failed failed, $skipped skipped"
    local n
    for n in "${bad[@]:0:10}"; do echo "  failed: $n"; done
    for n in "${skips[@]:0:10}"; do echo "  skipped: $n"; done
    if [ $((${#bad[@]} + ${#skips[@]})) -gt 20 ]; then echo "  (lists cut at 10 each)"; fi
    if [ "$total" -eq 0 ]; then fails+=("zero GPU tests ran (junit-cuda.xml lists none)"); fi
    if [ "$failed" -gt 0 ]; then fails+=("$failed GPU test(s) failed"); fi
    if [ "$skipped" -gt 0 ]; then fails+=("$skipped GPU test(s) skipped: on a GPU machine none may skip"); fi
  else
    echo "GPU tests: none ran (no junit-cuda.xml)"
    fails+=("zero GPU tests ran (no junit-cuda.xml)")
  fi

  # The benchmark: one '### ccht_bench_gpu' heading and one Markdown table per policy.
  if [ ! -s "$bench" ]; then
    echo "benchmark: no bench.md"
    fails+=("benchmark: no bench.md (it did not run)")
  else
    local tables heads checks
    tables=$(grep -cE '^\|( *:?-+:? *\|)+ *$' "$bench")
    heads=$(grep -c '^### ccht_bench_gpu' "$bench")
    checks=$(grep -c 'CHECK FAILED' "$bench")
    echo "benchmark: $tables table(s)$(grep -m1 '^device-to-device copy' "$bench" | sed 's/^/; /')"
    if grep -q 'nothing measured' "$bench"; then
      fails+=("benchmark: $(grep -m1 'nothing measured' "$bench")")
    elif [ "$tables" -eq 0 ]; then
      fails+=("benchmark: bench.md holds no Markdown table")
    elif [ "$tables" -ne "$heads" ]; then
      fails+=("benchmark: $heads run(s) began but $tables table(s) printed")
    fi
    if [ "$checks" -gt 0 ]; then fails+=("benchmark: $checks check(s) failed (CHECK FAILED in bench.md)"); fi
  fi

  # Every other step as the run recorded it; a pass needs each of them to have run.
  local res step detail seen=" "
  if [ -f "$steps" ]; then
    echo "steps:"
    while IFS=$'\t' read -r res step detail; do
      [ -n "$res" ] || continue
      printf '  %-4s %-12s %s\n' "$res" "$step" "$detail"
      seen+="$step "
      if [ "$res" != ok ]; then fails+=("$step: $detail"); fi
    done <"$steps"
  fi
  if [ ${#fails[@]} -eq 0 ]; then
    local need=(configure build ctest bench paper)
    if [[ $seen != *" sanitizer "* ]]; then need+=(memcheck synccheck racecheck initcheck); fi
    for step in "${need[@]}"; do
      if [[ $seen != *" $step "* ]]; then fails+=("step '$step' did not run (not in steps.txt)"); fi
    done
  fi

  if [ ${#fails[@]} -eq 0 ]; then
    echo "gpu-check: PASS"
    return 0
  fi
  local f
  for f in "${fails[@]}"; do echo "FAIL: $f"; done
  echo "gpu-check: FAIL (${#fails[@]} problem(s))"
  return 1
}

case "${1:-}" in
  --prepare) prepare; exit ;;
  --verdict)
    [ -d "${2:-}" ] || { echo "usage: $0 --verdict DIR" >&2; exit 2; }
    verdict "$2"; exit ;;
  "") ;;
  *) echo "usage: $0 [--prepare | --verdict DIR]" >&2; exit 2 ;;
esac

# ---- the run ----------------------------------------------------------------------------------
cd "$root" || exit 2
t_start=$(date +%s)
budget=${GPU_CHECK_BUDGET_S:-330}
arch=${GPU_CHECK_ARCH:-90}
out="${OUT:-$root/build-gpu-check}"
build="$root/build-gpu"
mkdir -p "$out"
rm -f "$out"/{gpu-check.log,summary.txt,probe.txt,steps.txt,junit-cuda.xml,bench.md,paper.md}
log="$out/gpu-check.log" summary="$out/summary.txt" steps="$out/steps.txt" probe="$out/probe.txt"
tmp=$(mktemp -d /tmp/gpu-check.XXXXXX)
exec > >(tee -a "$log") 2>&1
tee_pid=$!
jobs=$(nproc 2>/dev/null || echo 4)
san_pids=()

elapsed() { echo $(($(date +%s) - t_start)); }
step() { printf '\n== %s (t+%s s)\n' "$*" "$(elapsed)"; }
record() { printf '%s\t%s\t%s\n' "$1" "$2" "$3" >>"$steps"; [ "$1" = ok ] || echo "FAIL: $2: $3"; }
# Seconds a step may take: its own limit, cut to what the budget has left (minus the summary's).
left() { echo $((budget - $(elapsed) - 10)); }
limit() {  # never 0: `timeout 0` means no limit
  local l
  l=$(left)
  if [ "$l" -lt 1 ]; then l=1; fi
  if [ "$l" -lt "$1" ]; then echo "$l"; else echo "$1"; fi
}
enough() {  # enough STEP SECONDS: false, recorded as a failure, when less is left
  if [ "$(left)" -lt "$2" ]; then
    record FAIL "$1" "not run: needs $2 s, $(left) s left of the $budget s budget"
    return 1
  fi
}

# The one exit path: every exit, early or not, writes the summary and flushes the log.
# shellcheck disable=SC2317  # reached through the trap
finish() {
  trap - EXIT INT TERM
  local pid
  for pid in "${san_pids[@]}"; do kill "$pid" 2>/dev/null; done
  printf 'ok\telapsed\t%s s of the %s s budget\n' "$(elapsed)" "$budget" >>"$steps"
  step "summary"
  if [ -s "$out/bench.md" ]; then grep -E '^(\||###)' "$out/bench.md"; echo; fi
  verdict "$out" | tee "$summary"
  local status=${PIPESTATUS[0]}
  rm -rf "$tmp"
  exec >&- 2>&-
  wait "$tee_pid" 2>/dev/null
  exit "$status"
}
trap finish EXIT
trap 'record FAIL signal "interrupted at t+$(elapsed) s"; exit 1' INT TERM

# ---- 1. is there a GPU the CUDA runtime can use? (seconds; before anything is built) -----------
step "machine"
date -u
uname -srm
git -C "$root" log -1 --oneline 2>/dev/null || true
probe_fail() { printf 'status=fail\nerror=%s\n' "$1" >>"$probe"; echo "FAIL: $1"; exit 1; }
if ! command -v nvidia-smi >/dev/null; then
  probe_fail "nvidia-smi not found on PATH: no NVIDIA driver on this machine"
fi
smi=$(nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem \
  --format=csv,noheader 2>&1)
smi_rc=$?
echo "nvidia-smi: $smi"
if [ "$smi_rc" -ne 0 ] || [ -z "$smi" ]; then
  probe_fail "nvidia-smi failed (exit $smi_rc): $(echo "$smi" | head -3 | tr '\n' ' ')"
fi
printf 'smi=%s\ndriver=%s\n' "$(echo "$smi" | head -1)" \
  "$(echo "$smi" | head -1 | cut -d, -f2 | tr -d ' ')" >>"$probe"

if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH="$PATH:/usr/local/cuda/bin"
fi
if ! command -v nvcc >/dev/null; then
  probe_fail "nvcc not found (not on PATH, not in /usr/local/cuda/bin): no CUDA toolkit to build with"
fi
printf 'nvcc=%s\n' "$(nvcc --version | grep -m1 release | sed 's/.*release/release/')" >>"$probe"
# 12.5 or newer: host/cuda/vm_cuda.cpp reaches the driver through cudaGetDriverEntryPointByVersion,
# new in 12.5. An older toolkit would fail late in the build; say so before anything runs.
toolkit=$(nvcc --version | sed -n 's/.*release \([0-9][0-9]*\)\.\([0-9][0-9]*\).*/\1.\2/p' | head -1)
if [ -z "$toolkit" ]; then
  probe_fail "could not read the CUDA toolkit's release from '$(command -v nvcc) --version'"
fi
if [ "${toolkit%%.*}" -lt 12 ] || { [ "${toolkit%%.*}" -eq 12 ] && [ "${toolkit#*.}" -lt 5 ]; }; then
  probe_fail "CUDA toolkit $toolkit ($(command -v nvcc)) is older than 12.5, which the build needs"
fi
cmake --version | head -1

# The same code paths the tests take: count, properties, and one kernel built like the project's
# (sm_$arch plus its PTX) that must write its result.
cat >"$tmp/probe.cu" <<'EOF'
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdlib>
__global__ void probe_kernel(int* p) { p[threadIdx.x] = 42 + static_cast<int>(threadIdx.x); }
static void check(cudaError_t e, char const* what) {
  if (e == cudaSuccess) return;
  std::printf("status=fail\nerror=%s returned %s (%d): %s\n", what, cudaGetErrorName(e),
              static_cast<int>(e), cudaGetErrorString(e));
  std::exit(1);
}
int main() {
  int rt = 0, drv = 0, n = 0;
  check(cudaRuntimeGetVersion(&rt), "cudaRuntimeGetVersion");
  std::printf("runtime=%d.%d\n", rt / 1000, rt % 1000 / 10);
  // Not fatal: the verdict should name cudaGetDeviceCount's error, the one the tests meet.
  if (cudaError_t e = cudaDriverGetVersion(&drv); e != cudaSuccess) {
    std::printf("driver_cuda=unknown (%s)\n", cudaGetErrorName(e));
  } else if (drv == 0) {
    std::printf("driver_cuda=none\n");
  } else {
    std::printf("driver_cuda=%d.%d\n", drv / 1000, drv % 1000 / 10);
  }
  std::fflush(stdout);
  check(cudaGetDeviceCount(&n), "cudaGetDeviceCount");
  std::printf("devices=%d\n", n);
  if (n < 1) { std::printf("status=fail\nerror=cudaGetDeviceCount found no device\n"); return 1; }
  cudaDeviceProp p{};
  check(cudaGetDeviceProperties(&p, 0), "cudaGetDeviceProperties");
  std::printf("gpu=%s\ncc=%d.%d\nsms=%d\nmemory_gib=%.1f\nl2_mib=%d\n", p.name, p.major, p.minor,
              p.multiProcessorCount, p.totalGlobalMem / 1073741824.0, p.l2CacheSize >> 20);
  // Peak memory bandwidth, as ccht_bench_gpu computes its bound: 2 x memory clock x bus width.
  int khz = 0, bits = 0;
  check(cudaDeviceGetAttribute(&khz, cudaDevAttrMemoryClockRate, 0), "cudaDeviceGetAttribute");
  check(cudaDeviceGetAttribute(&bits, cudaDevAttrGlobalMemoryBusWidth, 0), "cudaDeviceGetAttribute");
  std::printf("bandwidth_gbs=%.0f\n", 2.0 * khz * 1e3 * (bits / 8.0) / 1e9);
  std::fflush(stdout);
  int* d = nullptr;
  int h[32] = {};
  check(cudaMalloc(&d, sizeof h), "cudaMalloc");
  check(cudaMemset(d, 0, sizeof h), "cudaMemset");
  probe_kernel<<<1, 32>>>(d);
  check(cudaGetLastError(), "probe kernel launch");
  check(cudaDeviceSynchronize(), "probe kernel");
  check(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost), "cudaMemcpy");
  for (int i = 0; i < 32; ++i) {
    if (h[i] != 42 + i) { std::printf("status=fail\nerror=probe kernel wrote wrong values\n"); return 1; }
  }
  std::printf("kernel=ok\nstatus=ok\n");
  return 0;
}
EOF
step "CUDA probe (nvcc sm_$arch; CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES-unset})"
if ! nvcc -O1 -gencode "arch=compute_$arch,code=[sm_$arch,compute_$arch]" -o "$tmp/probe" \
    "$tmp/probe.cu"; then
  probe_fail "nvcc could not build the probe for sm_$arch"
fi
"$tmp/probe" >"$tmp/probe.out" 2>&1
probe_rc=$?
cat "$tmp/probe.out"
grep -v '^status=\|^error=' "$tmp/probe.out" >>"$probe"
if [ "$probe_rc" -ne 0 ] || ! grep -qx 'status=ok' "$tmp/probe.out"; then
  err=$(sed -n 's/^error=//p' "$tmp/probe.out" | head -1)
  case "$err" in
    *cudaErrorInsufficientDriver*)
      dc=$(sed -n 's/^driver_cuda=//p' "$probe")
      if [ "$dc" = none ]; then err="$err (no CUDA driver library could be loaded)"
      else err="$err (the driver's CUDA $dc is older than the runtime's)"; fi ;;
    *cudaErrorNoDevice*) err="$err (CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES-unset})" ;;
  esac
  probe_fail "${err:-the probe exited with $probe_rc}"
fi
echo "status=ok" >>"$probe"

# ---- 2. dependencies carried from the development machine, configure, build -------------------
prefix_path=""
if [ -d "$deps/prefix" ]; then prefix_path="$deps/prefix"; fi
# Always the carried GoogleTest when there is one: the image may have none, or one too old.
if [ -d "$deps/googletest-src" ] && [ ! -f /tmp/gtest-prefix/.done ]; then
  step "GoogleTest from the carried sources"
  if timeout "$(limit 90)" cmake -S "$deps/googletest-src" -B /tmp/gtest-build -G Ninja \
      -DCMAKE_BUILD_TYPE=Release -DBUILD_GMOCK=OFF -DCMAKE_INSTALL_PREFIX=/tmp/gtest-prefix >/dev/null &&
      timeout "$(limit 90)" cmake --build /tmp/gtest-build -j "$jobs" >/dev/null &&
      cmake --install /tmp/gtest-build >/dev/null; then
    touch /tmp/gtest-prefix/.done
  else
    record FAIL googletest "build of the carried sources failed"
    exit 1
  fi
fi
if [ -f /tmp/gtest-prefix/.done ]; then prefix_path="/tmp/gtest-prefix${prefix_path:+;$prefix_path}"; fi
tools=ON  # the CLI needs CLI11 and nlohmann_json
for inc in CLI nlohmann; do
  if [ ! -d "$deps/prefix/include/$inc" ] && [ ! -d "/usr/include/$inc" ]; then tools=OFF; fi
done
if command -v ccache >/dev/null; then
  # Inside the (ignored) tree: a warm machine keeps it for a rerun.
  export CCACHE_DIR="$root/build-gpu-ccache" CCACHE_BASEDIR="$root"
fi

# -lineinfo: the sanitizers' reports name source lines; the code is optimised as in a release.
step "configure (CUDA on, sm_$arch, -lineinfo, tools $tools)"
if ! timeout "$(limit 120)" cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCCHT_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$arch" -DCMAKE_CUDA_FLAGS=-lineinfo \
    -DCCHT_BUILD_TESTS=ON -DCCHT_BUILD_BENCH=OFF -DCCHT_BUILD_GPU_BENCH=ON \
    -DCCHT_BUILD_TOOLS="$tools" -DCMAKE_PREFIX_PATH="$prefix_path"; then
  record FAIL configure "cmake failed or timed out (see gpu-check.log)"
  exit 1
fi
record ok configure "done at t+$(elapsed) s"

targets=(ccht_tests_cuda ccht_bench_gpu)
if [ "$tools" = ON ]; then targets+=(ccht_cli); fi
step "build ${targets[*]}"
t0=$(date +%s)
if ! timeout "$(limit 300)" cmake --build "$build" -j "$jobs" --target "${targets[@]}"; then
  record FAIL build "cmake --build failed or timed out after $(($(date +%s) - t0)) s"
  exit 1
fi
record ok build "${targets[*]} in $(($(date +%s) - t0)) s"

# ---- 3. the GPU tests -------------------------------------------------------------------------
# '^cuda$': -L is a regex, and 'cuda-compile' (compile-fail tests, no GPU) must not match.
# MatchesModelLargeBatchesOneThread skips on the GPU by design (batch order is undefined there);
# every other skip fails the check.
by_design='MatchesModelLargeBatchesOneThread'
if enough ctest 60; then
  step "GPU tests: ctest -L '^cuda$' -E $by_design (60 s per test)"
  t0=$(date +%s)
  timeout "$(limit 200)" ctest --test-dir "$build" -L '^cuda$' -E "$by_design" --timeout 60 \
    -j "$((jobs < 8 ? jobs : 8))" --no-tests=error --output-on-failure \
    --output-junit "$out/junit-cuda.xml"
  rc=$?
  if [ "$rc" -eq 0 ]; then
    record ok ctest "$(($(date +%s) - t0)) s (excluded by design: $by_design)"
  else
    record FAIL ctest "exit $rc after $(($(date +%s) - t0)) s"
  fi
fi

# ---- 4. the benchmark (alone on the GPU: its numbers are the ones to quote) --------------------
bench_args=${GPU_CHECK_BENCH_ARGS:---log2-slots 26 --reps 10 --policy all}
if enough bench 30; then
  step "ccht_bench_gpu $bench_args"
  t0=$(date +%s)
  # shellcheck disable=SC2086
  timeout "$(limit 120)" "$build/ccht_bench_gpu" $bench_args | tee "$out/bench.md"
  rc=$?
  if [ "$rc" -eq 0 ]; then record ok bench "$(($(date +%s) - t0)) s"
  else record FAIL bench "ccht_bench_gpu exit $rc after $(($(date +%s) - t0)) s"; fi
fi

# ---- 5. sanitizers in the background, the paper run in front -----------------------------------
# compute-sanitizer slows kernels 10-100x and adds a cost to every launch, so each tool runs the
# few small tests that exercise what it checks. Never under any tool: the by-design skip, the
# tests that provoke CUDA errors on purpose (huge allocation, bad launch), and the long ones:
# DeviceRef.HotKey* (60 000 and 200 000 ops on one key), the large and long random batches, the
# concurrent kick-out runs, and the access-count comparisons (thousands of one-op batches).
san_never="*.$by_design:*.HugeAllocationIsOutOfMemory:*.PendingErrorFromEarlierWorkIsReportedAsSuch"
san_never+=":DeviceRef.HotKey*:*.InvariantsHoldUnderLargeParallelBatches:DeviceKickout.Concurrent*"
san_never+=":TableApi.AccessCounts*:PageCache.AccountingHoldsAfterLongRandomRuns"
san_never+=":PageCache.SerialRequestsTrackExactLruOverUnpinnedPages"
# memcheck: out-of-bounds and misaligned accesses, the weight cache's VMM mappings included.
san_filter_memcheck="TableApi.*:BadInput.*:TableModel/lru.MatchesModelOddBucketCount:DeviceRef.*"
san_filter_memcheck+=":DeviceKickout.TileMatchesScalarLruChtFull:PagePool.*:PageCache.FillPublishHitRelease"
san_filter_memcheck+=":PageCache.EvictionsHandTheVictimsPageWithItsBytes:WeightCacheCuda.*"
# synccheck: the tiles' collectives (ballot, shfl) and the block barriers.
san_filter_synccheck="TableApi.*:BadInput.*:TableModel/lru.InvariantsHoldUnderSmallBatchesTinyTable"
san_filter_synccheck+=":DeviceRef.InsertThenFindMatchesUnorderedMap:DeviceRef.ConcurrentFindsSeeOnlyTheirKeysValues"
san_filter_synccheck+=":DeviceKickout.TileMatchesScalar*:PageCache.FillPublishHitRelease"
san_filter_synccheck+=":PageCache.EvictionsHandTheVictimsPageWithItsBytes"
# racecheck (the slowest): shared memory only, i.e. the bulk kernels' eviction buffers and counts
# and the page kernels' tallies.
san_filter_racecheck="TableApi.FreshTableIsEmpty:TableApi.ExportTruncatesButCountsEverything:BadInput.*"
san_filter_racecheck+=":TableModel/lru.InvariantsHoldUnderSmallBatchesTinyTable:PageCache.FillPublishHitRelease"
san_filter_racecheck+=":PageCache.EvictionsHandTheVictimsPageWithItsBytes"
# initcheck: device memory read before anything wrote it (batch words, fresh tables and pages).
san_filter_initcheck="TableApi.*:BadInput.*:DeviceRef.InsertThenFindMatchesUnorderedMap"
san_filter_initcheck+=":PageCache.FillPublishHitRelease:PageCache.AsyncVariantsReportThroughBackendWords"
sanitizer=""
for s in compute-sanitizer /usr/local/cuda/bin/compute-sanitizer /usr/local/cuda/compute-sanitizer/compute-sanitizer; do
  if command -v "$s" >/dev/null; then sanitizer=$(command -v "$s"); break; fi
done
san_tools=()
if [ "${GPU_CHECK_SANITIZER:-1}" = 0 ]; then
  record ok sanitizer "off (GPU_CHECK_SANITIZER=0)"
elif [ -z "$sanitizer" ]; then
  record FAIL sanitizer "compute-sanitizer not found (set GPU_CHECK_SANITIZER=0 to run without it)"
elif [ ! -x "$build/tests/ccht_tests_cuda" ]; then
  record FAIL sanitizer "no ccht_tests_cuda binary to run"
elif enough sanitizer 60; then
  san_limit=$(limit 150)
  for tool in memcheck synccheck racecheck initcheck; do
    filter_var=san_filter_$tool
    filter="${!filter_var}:-$san_never"
    if [ -n "${GPU_CHECK_SANITIZER_FILTER:-}" ]; then filter=$GPU_CHECK_SANITIZER_FILTER; fi
    echo "compute-sanitizer --tool $tool (limit $san_limit s): --gtest_filter=$filter"
    # API errors off: tests provoke invalid-argument errors on purpose; kernel faults still count.
    ( s0=$(date +%s)
      timeout -k 10 "$san_limit" "$sanitizer" --tool "$tool" --error-exitcode 9 \
        --report-api-errors no --print-limit 50 "$build/tests/ccht_tests_cuda" \
        --gtest_filter="$filter" >"$tmp/$tool.log" 2>&1
      echo "$? $(($(date +%s) - s0))" >"$tmp/$tool.rc" ) &
    san_pids+=($!)
    san_tools+=("$tool")
  done
fi

paper_args=${GPU_CHECK_PAPER_ARGS:---backend cuda --batch 1048576 --capacity 4194304 --keys 16777216 --requests 8388608 --ratio 0.9 --no-sweep --no-plot}
# 4M entries (a table of ~100 MB: out of the 60 MB L2), 6 workloads x 5 replays of 8M requests;
# the host-side YCSB generation and exact LRU take about 20 s of it.
if [ "$tools" != ON ]; then
  record FAIL paper "no ccht CLI: CLI11 or nlohmann_json missing (--prepare, carry build-gpu-deps)"
elif enough paper 30; then
  step "ccht paper $paper_args"
  t0=$(date +%s)
  # shellcheck disable=SC2086
  timeout "$(limit 120)" "$build/tools/ccht" paper $paper_args --out "$tmp/paper" | tee "$out/paper.md"
  rc=$?
  if [ "$rc" -eq 0 ]; then record ok paper "$(($(date +%s) - t0)) s"
  else record FAIL paper "ccht paper exit $rc after $(($(date +%s) - t0)) s"; fi
fi

for i in "${!san_pids[@]}"; do
  wait "${san_pids[$i]}"
  tool=${san_tools[$i]}
  step "compute-sanitizer --tool $tool"
  cat "$tmp/$tool.log"
  read -r rc secs <"$tmp/$tool.rc" || { rc=none; secs=0; }
  # A pass needs a clean exit, tests that ran (a skip under the sanitizer checks nothing) and
  # none skipped or failed; gtest's own summary lines give the counts.
  ran=$(sed -n 's/^\[==========\] \([0-9]*\) tests\{0,1\} from .* ran\..*/\1/p' "$tmp/$tool.log" | tail -1)
  nskip=$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) tests\{0,1\}, listed below:/\1/p' "$tmp/$tool.log" | tail -1)
  nfail=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) tests\{0,1\}, listed below:/\1/p' "$tmp/$tool.log" | tail -1)
  errs=$(grep -m1 -E '(ERROR|RACECHECK) SUMMARY' "$tmp/$tool.log" | sed 's/^=* *//')
  detail="${ran:-0} tests, ${nskip:-0} skipped, ${nfail:-0} failed; ${errs:-no sanitizer summary}; $secs s"
  if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
    record FAIL "$tool" "timed out after $secs s ($detail); narrow GPU_CHECK_SANITIZER_FILTER"
  elif [ "$rc" != 0 ]; then
    record FAIL "$tool" "exit $rc: $detail"
  elif [ "${ran:-0}" -eq 0 ] || [ "${nskip:-0}" -gt 0 ] || [ "${nfail:-0}" -gt 0 ]; then
    record FAIL "$tool" "skipped or no tests, so nothing was checked: $detail"
  else
    record ok "$tool" "$detail"
  fi
done
san_pids=()
exit 0  # the verdict in finish() decides the exit status
