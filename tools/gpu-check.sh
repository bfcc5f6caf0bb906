#!/usr/bin/env bash
# One prepared check of the CUDA backend on a lent GPU machine (H200): build, GPU tests, benchmark.
#
# 1. Here, once (no GPU needed):   tools/gpu-check.sh --prepare
#    The device machine reaches no package registry, so this copies what the build needs and it
#    lacks into build-gpu-deps/ (ignored by .gitignore's /build-*/): GoogleTest's sources (built
#    there), and the header-only CLI11, nlohmann_json and libcuckoo with their CMake configs.
# 2. On the device machine, through the device tool, from the repository root:
#      command: tools/gpu-check.sh        carry: ["build-gpu-deps"]       timeout_s: 540
#    It prints the GPU and date, configures with -DCCHT_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90,
#    builds, runs the GPU tests (ctest -L cuda), runs ccht_bench_gpu and `ccht paper --backend
#    cuda` (GPU_CHECK_PAPER_ARGS overrides its arguments), then the remaining tests,
#    and writes everything under $OUT (if set; else build-gpu-check/): gpu-check.log (all output),
#    ctest-cuda.log (every GPU test's output), bench.md (the benchmark's Markdown tables) and
#    summary.txt. The summary prints last.
# Environment: GPU_CHECK_SANITIZER=1 also runs the device-ref tests under compute-sanitizer
# (memcheck, then racecheck); GPU_CHECK_BENCH_ARGS overrides the benchmark's arguments
# (default: --log2-slots 26 --reps 10 --policy all); GPU_CHECK_CPU_TESTS=0 skips the CPU tests.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
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
  # Header-only packages: Debian's generated CMake configs locate the prefix relative to
  # themselves, so prefix/share/cmake/<pkg> + prefix/include works anywhere.
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

if [ "${1:-}" = "--prepare" ]; then
  prepare
  exit
fi

out="${OUT:-$root/build-gpu-check}"
mkdir -p "$out"
log="$out/gpu-check.log"
summary="$out/summary.txt"
: >"$summary"
exec > >(tee -a "$log") 2>&1
tee_pid=$!
jobs=$(nproc 2>/dev/null || echo 4)
export PATH=/usr/local/cuda/bin:$PATH
status=0
note() { printf '%s\n' "$*" | tee -a "$summary"; }
step() { printf '\n== %s (%s)\n' "$*" "$(date -u +%H:%M:%S)"; }

step "machine"
date -u
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv ||
  note "nvidia-smi failed"
nvcc --version | tail -2
cmake --version | head -1
git -C "$root" log -1 --oneline 2>/dev/null || true

# ---- dependencies carried from the development machine ------------------------------------------
prefix_path=""
if [ -d "$deps/prefix" ]; then prefix_path="$deps/prefix"; fi
# Always the carried GoogleTest when there is one (about 20 s): the image may have none, or an
# older one that lacks GTest::gtest_main.
if [ -d "$deps/googletest-src" ]; then
  step "building GoogleTest from the carried sources"
  if cmake -S "$deps/googletest-src" -B /tmp/gtest-build -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_INSTALL_PREFIX=/tmp/gtest-prefix >/dev/null &&
      cmake --build /tmp/gtest-build -j "$jobs" >/dev/null &&
      cmake --install /tmp/gtest-build >/dev/null; then
    prefix_path="/tmp/gtest-prefix${prefix_path:+;$prefix_path}"
  else
    note "GoogleTest build failed"
  fi
fi
bench_cpu=OFF
if [ -f /usr/lib/x86_64-linux-gnu/cmake/benchmark/benchmarkConfig.cmake ]; then bench_cpu=ON; fi
tools=OFF
if [ -d "$deps/prefix/include/CLI" ] || [ -d /usr/include/CLI ]; then tools=ON; fi

# ---- configure and build ------------------------------------------------------------------------
build="$root/build-gpu"
step "configure (CUDA on, sm_90; CPU benchmarks $bench_cpu, tools $tools)"
# CMake < 3.26 knows no C++20 flag for nvcc; the two -D below are harmless on newer CMake.
if ! cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCCHT_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DCCHT_BUILD_TESTS=ON -DCCHT_BUILD_BENCH="$bench_cpu" -DCCHT_BUILD_GPU_BENCH=ON \
    -DCCHT_BUILD_TOOLS="$tools" -DCMAKE_PREFIX_PATH="$prefix_path" \
    -DCMAKE_CUDA20_STANDARD_COMPILE_OPTION=-std=c++20 \
    -DCMAKE_CUDA20_EXTENSION_COMPILE_OPTION=-std=c++20; then
  note "FAIL: configure"
  exit 1
fi
step "build"
t0=$(date +%s)
if ! cmake --build "$build" -j "$jobs"; then
  note "FAIL: build"
  exit 1
fi
note "build: ok in $(($(date +%s) - t0)) s"

# ---- GPU tests first (they are what this machine is for) ----------------------------------------
step "GPU tests: ctest -L cuda"
if ctest --test-dir "$build" -L cuda --output-on-failure --timeout 300 -j 4; then
  note "GPU tests (ctest -L cuda): pass"
else
  note "FAIL: GPU tests (ctest -L cuda)"
  status=1
fi
# ctest counts a GTEST_SKIP as a pass; count them from the full test log. On a GPU machine
# nothing should skip.
cp "$build/Testing/Temporary/LastTest.log" "$out/ctest-cuda.log" 2>/dev/null || true
skipped=$(grep -c '^\[  SKIPPED \] [A-Za-z_]' "$out/ctest-cuda.log" 2>/dev/null || true)
note "GPU tests skipped by GTEST_SKIP: ${skipped:-?}"

if [ "${GPU_CHECK_SANITIZER:-0}" = 1 ] && command -v compute-sanitizer >/dev/null; then
  bin=$(find "$build" -name ccht_tests_cuda -type f -perm -u+x | head -1)
  [ -z "$bin" ] && bin=$(find "$build" -name ccht_test_device_ref -type f -perm -u+x | head -1)
  for tool in memcheck racecheck; do
    step "compute-sanitizer --tool $tool (DeviceRef.*)"
    if timeout 240 compute-sanitizer --tool "$tool" --error-exitcode 9 "$bin" --gtest_filter='DeviceRef.*'; then
      note "compute-sanitizer $tool: clean"
    else
      note "FAIL: compute-sanitizer $tool"
      status=1
    fi
  done
fi

# ---- benchmark ----------------------------------------------------------------------------------
step "ccht_bench_gpu ${GPU_CHECK_BENCH_ARGS:---log2-slots 26 --reps 10 --policy all}"
# shellcheck disable=SC2086
if timeout 300 "$build/ccht_bench_gpu" ${GPU_CHECK_BENCH_ARGS:---log2-slots 26 --reps 10 --policy all} \
    | tee "$out/bench.md"; then
  note "ccht_bench_gpu: checks pass"
else
  note "FAIL: ccht_bench_gpu (see bench.md)"
  status=1
fi

# ---- the paper's evaluation on the CUDA backend -------------------------------------------------
# Large batches and a 16M-entry cache (a ~0.7 GB table at ratio 0.9): big enough that the table
# is far out of the GPU's L2, small enough that the host-side YCSB generation and the exact-LRU
# reference finish in minutes. GPU_CHECK_PAPER_ARGS overrides the arguments.
paper_args=${GPU_CHECK_PAPER_ARGS:---backend cuda --batch 1048576 --capacity 16777216 --keys 67108864 --requests 33554432 --no-sweep --no-plot}
if [ "$tools" = ON ] && [ -x "$build/tools/ccht" ]; then
  step "ccht paper $paper_args"
  # shellcheck disable=SC2086
  if timeout 420 "$build/tools/ccht" paper $paper_args --out "$out/paper" | tee "$out/paper.md"; then
    note "ccht paper --backend cuda: done (paper.md, paper/)"
  else
    note "FAIL: ccht paper --backend cuda"
    status=1
  fi
fi

# ---- the rest of the suite ----------------------------------------------------------------------
if [ "${GPU_CHECK_CPU_TESTS:-1}" = 1 ]; then
  step "remaining tests: ctest -LE cuda"
  if ctest --test-dir "$build" -LE cuda --output-on-failure --timeout 300 -j "$jobs"; then
    note "other tests (ctest -LE cuda): pass"
  else
    note "FAIL: other tests (ctest -LE cuda)"
    status=1
  fi
fi

step "summary"
grep -h '^|' "$out/bench.md" 2>/dev/null || true
cat "$summary"
exec >&- 2>&-
wait "$tee_pid" 2>/dev/null
exit $status
