#!/usr/bin/env bash
# One entry point for newcomers and CI.
#   tools/dev.sh run          install what is missing, build (CPU preset), run the quickstart, the
#                             prefix KV cache example (examples/kv_prefix_cache, small size), the
#                             model cache example (examples/model_cache, small size) and
#                             `ccht compare` (miss ratios and throughput of every policy, with plots)
#   tools/dev.sh quickstart   the same build, then only the quickstart
#   tools/dev.sh test         install what is missing, build and run the whole test suite:
#                             CPU tests, the ThreadSanitizer build, the core on 16-lane lockstep
#                             tiles (preset lanes, docs/gpu-lanes.md), the CUDA build (compiled for
#                             sm_90; its GPU tests skip visibly without a GPU), the Python
#                             package (pip install . into .venv, then pytest tests/python), the
#                             libFuzzer targets (tools/fuzz.sh, $CCHT_FUZZ_SECONDS each, default
#                             60), and the installed C++ package's example consumer
#   tools/dev.sh python       only the Python package: pip install . into .venv, then its tests
#   tools/dev.sh setup        only install what is missing (Debian packages, and .venv from PyPI)
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)

say() { printf '\n== %s\n' "$*"; }

setup() {
  local pkgs=(cmake ninja-build g++ ccache libgtest-dev libgmock-dev libbenchmark-dev
              libcli11-dev libcuckoo-dev nlohmann-json3-dev python3-matplotlib
              libhiredis-dev redis-server clang libclang-rt-dev)
  local missing=()
  for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if ((${#missing[@]})); then
    say "installing: ${missing[*]}"
    local sudo=""
    [ "$(id -u)" -ne 0 ] && sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
  # `ccht compare` draws its plots with the python3 on PATH; give that one matplotlib too.
  if ! python3 -c 'import matplotlib' 2>/dev/null; then
    say "installing matplotlib for $(command -v python3)"
    python3 -m pip install -q matplotlib 2>/dev/null ||
      echo "warning: no matplotlib for python3; ccht compare will write data without plots" >&2
  fi
  # The project's own virtual environment (never the system Python): nanobind and
  # scikit-build-core build the Python package, pytest tests it, and the safetensors package
  # writes the weight cache's test files.
  if [ ! -x .venv/bin/python ] ||
     ! .venv/bin/python -c 'import safetensors, numpy, pytest, nanobind, scikit_build_core' 2>/dev/null; then
    say "creating .venv (nanobind, scikit-build-core, numpy, safetensors, pytest from PyPI)"
    [ -x .venv/bin/python ] || python3 -m venv .venv
    .venv/bin/python -m pip install -q --upgrade pip >/dev/null
    .venv/bin/python -m pip install -q nanobind scikit-build-core numpy safetensors pytest
  fi
  # The core needs libcu++ (cuda::atomic_ref) from the CUDA toolkit's CCCL, even on the CPU.
  if [ -z "${CUDAToolkit_ROOT:-}" ] && ! command -v nvcc >/dev/null && [ ! -x /usr/local/cuda/bin/nvcc ]; then
    echo "error: the CUDA toolkit (for its CCCL headers) is required; install it or set CUDAToolkit_ROOT" >&2
    exit 1
  fi
  if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
    export PATH=/usr/local/cuda/bin:$PATH
  fi
}

passed=0 failed=0 skipped=0
# Runs ctest with the given arguments and adds its counts to the totals printed at the end.
run_ctest() {
  local log
  log=$(mktemp)
  set +e
  ctest "$@" 2>&1 | tee "$log"
  local rc=${PIPESTATUS[0]}
  set -e
  local total fails skips
  total=$(sed -nE 's/.*tests failed out of ([0-9]+).*/\1/p' "$log" | tail -1)
  fails=$(sed -nE 's/.* ([0-9]+) tests failed out of.*/\1/p' "$log" | tail -1)
  skips=$(grep -cE '\*\*\*(Skipped|Not Run)' "$log" || true)
  rm -f "$log"
  total=${total:-0} fails=${fails:-0}
  passed=$((passed + total - fails - skips))
  failed=$((failed + fails))
  skipped=$((skipped + skips))
  return "$rc"
}

build() {  # build PRESET
  cmake --preset "$1" >/dev/null
  cmake --build --preset "$1" -j "$jobs"
}

quickstart() {
  setup
  say "building (preset cpu)"
  build cpu
  say "running the quickstart"
  ./build/cpu/tools/ccht_quickstart
}

kv_example() {
  say "prefix KV cache example: the Mooncake trace (or a synthetic one) through ccht::page_cache"
  ./build/cpu/tools/ccht_kv_prefix_cache --pages 1000 --requests 500
}

model_example() {
  say "model cache example: safetensors models through ccht::weight_cache (examples/model_cache)"
  ./build/cpu/tools/ccht_model_cache --models 4 --model-mib 4 --budget-mib 10 --invocations 60
}

main_job() {
  quickstart
  kv_example
  model_example
  say "ccht compare: every policy on the default synthetic workloads"
  ./build/cpu/tools/ccht compare
}

# Builds and installs the Python package into .venv the way a user does (pip install .), then
# runs its tests against the installed copy, beside the C++ CLI they compare with.
python_tests() {
  .venv/bin/python -m pip install -q --no-build-isolation .
  .venv/bin/python -c 'import ccht' || { echo "error: the installed ccht package does not import" >&2; return 1; }
  local log rc
  log=$(mktemp)
  set +e
  (cd tests/python && CCHT_CLI="$PWD/../../build/cpu/tools/ccht" ../../.venv/bin/python -m pytest -rs -q \
     -p no:cacheprovider .) 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  set -e
  local p f s
  local summary
  summary=$(grep -E '^=*ERROR|[0-9]+ (passed|failed|skipped)' "$log" | tail -1)
  p=$(grep -oE '[0-9]+ passed' <<<"$summary" | grep -oE '[0-9]+' || true)
  f=$(grep -oE '[0-9]+ failed' <<<"$summary" | grep -oE '[0-9]+' || true)
  s=$(grep -oE '[0-9]+ skipped' <<<"$summary" | grep -oE '[0-9]+' || true)
  rm -f "$log"
  passed=$((passed + ${p:-0}))
  failed=$((failed + ${f:-0}))
  skipped=$((skipped + ${s:-0}))
  return "$rc"
}

# The libFuzzer targets (tools/fuzz.sh): each one's committed corpus replayed, then fuzzed for
# $CCHT_FUZZ_SECONDS (default 60); one pass or failure per target.
fuzz_tests() {
  local log rc p f
  log=$(mktemp)
  set +e
  tools/fuzz.sh "${CCHT_FUZZ_SECONDS:-60}" 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  set -e
  p=$(sed -nE 's/^fuzz: ([0-9]+) passed, ([0-9]+) failed$/\1/p' "$log" | tail -1)
  f=$(sed -nE 's/^fuzz: ([0-9]+) passed, ([0-9]+) failed$/\2/p' "$log" | tail -1)
  rm -f "$log"
  [ -n "$f" ] || f=$((rc != 0))  # no summary: the build failed
  passed=$((passed + ${p:-0}))
  failed=$((failed + f))
  return "$rc"
}

run_tests() {
  setup
  say "CPU backend: build and test (preset cpu)"
  build cpu
  run_ctest --preset cpu -j "$jobs"

  say "ThreadSanitizer build of the concurrency tests (preset tsan)"
  build tsan
  run_ctest --preset tsan

  say "The GPU's lane logic on the CPU (preset lanes): the core on 16-lane lockstep tiles, the kernels' width (docs/gpu-lanes.md)"
  build lanes
  run_ctest --preset lanes

  if command -v nvcc >/dev/null; then
    say "CUDA backend: compile for sm_90 and run the GPU tests (preset cuda)"
    build cuda
    run_ctest --preset cuda -L cuda
    if [ -d build/cuda/bindings/python/ccht ]; then
      say "Python module of the CUDA build (build tree): import, then its CUDA tests (skip without a GPU)"
      PYTHONPATH="$PWD/build/cuda/bindings/python" .venv/bin/python -c \
        'import ccht; assert ccht.has_cuda, "the cuda preset built a module without CUDA"; print("ccht.has_cuda:", ccht.has_cuda, " cuda_available:", ccht.cuda_available())'
      (cd tests/python && PYTHONPATH="$PWD/../../build/cuda/bindings/python" ../../.venv/bin/python -m pytest \
         -rs -q -p no:cacheprovider test_cuda.py)
    fi
  else
    say "nvcc not found: CUDA backend not compiled"
  fi

  say "Python package: pip install . into .venv (scikit-build-core), then pytest tests/python"
  python_tests

  say "libFuzzer targets of the parsers (preset fuzz): corpora replayed, ${CCHT_FUZZ_SECONDS:-60} s each"
  fuzz_tests

  say "installed package: build and run examples/consumer against it"
  cmake --install build/cpu --prefix build/install-cpu >/dev/null
  cmake -S examples/consumer -B build/consumer -G Ninja -DCMAKE_PREFIX_PATH="$PWD/build/install-cpu" >/dev/null
  cmake --build build/consumer -j "$jobs"
  ./build/consumer/consumer
  say "all test stages passed"
  # One plain closing line over every stage (the CUDA stage alone may be all skips).
  echo "ccht: $passed passed, $failed failed, $skipped skipped"
}

case "${1:-}" in
  setup) setup ;;
  run) main_job ;;
  quickstart) quickstart ;;
  test) run_tests ;;
  python) setup; python_tests; echo "ccht: $passed passed, $failed failed, $skipped skipped" ;;
  *) echo "usage: tools/dev.sh run|quickstart|test|python|setup" >&2; exit 2 ;;
esac
