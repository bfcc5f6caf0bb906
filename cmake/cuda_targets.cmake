# CUDA-only executables: the device-ref GoogleTest binary and the GPU benchmark.
#
# Included from the top-level CMakeLists.txt when CCHT_WITH_CUDA is ON, after the subprojects:
#   if(CCHT_WITH_CUDA)
#     include(cmake/cuda_targets.cmake)
#   endif()
# Nothing here needs a GPU to build; the test skips and the benchmark exits 0 without one.

option(CCHT_BUILD_GPU_BENCH "Build ccht_bench_gpu (CUDA backend throughput vs memory bandwidth)"
       ${CCHT_BUILD_BENCH})

# Flags every CUDA target of ours needs: the core calls constexpr host functions from device code.
set(CCHT_CUDA_TARGET_OPTIONS $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr -Xcompiler=-Wall>)
# ccht links the shared CUDA runtime (CUDA::cudart); an executable with .cu sources would add the
# static one by default (CMAKE_CUDA_RUNTIME_LIBRARY), putting two runtimes on one link line.
set(CCHT_CUDA_RUNTIME Shared)

# ---- ccht_test_device_ref ------------------------------------------------------------------------
# tests/CMakeLists.txt may already compile tests/test_device_ref*.cu into ccht_tests_cuda; then a
# second binary would only double the nvcc time and register the same tests twice.
if(CCHT_BUILD_TESTS AND NOT TARGET ccht_tests_cuda)
  find_package(GTest REQUIRED)
  include(GoogleTest)
  add_executable(ccht_test_device_ref ${PROJECT_SOURCE_DIR}/tests/test_device_ref.cu)
  target_link_libraries(ccht_test_device_ref PRIVATE ccht::ccht GTest::gtest_main)
  target_compile_options(ccht_test_device_ref PRIVATE ${CCHT_CUDA_TARGET_OPTIONS})
  set_target_properties(ccht_test_device_ref PROPERTIES CUDA_RUNTIME_LIBRARY ${CCHT_CUDA_RUNTIME})
  gtest_discover_tests(ccht_test_device_ref
    TEST_PREFIX "cuda."
    DISCOVERY_MODE PRE_TEST
    PROPERTIES LABELS "cuda")
endif()

# ---- ccht_bench_gpu ------------------------------------------------------------------------------
if(CCHT_BUILD_GPU_BENCH)
  add_executable(ccht_bench_gpu ${PROJECT_SOURCE_DIR}/bench/bench_gpu.cu)
  target_link_libraries(ccht_bench_gpu PRIVATE ccht::ccht)
  target_compile_options(ccht_bench_gpu PRIVATE ${CCHT_CUDA_TARGET_OPTIONS} $<$<COMPILE_LANGUAGE:CUDA>:-lineinfo>)
  set_target_properties(ccht_bench_gpu PROPERTIES CUDA_RUNTIME_LIBRARY ${CCHT_CUDA_RUNTIME})
  if(CCHT_BUILD_TESTS)
    # A small run as a smoke test: it checks hit and eviction counts, and exits 0 without a GPU.
    add_test(NAME cuda.bench_gpu_smoke COMMAND ccht_bench_gpu --log2-slots 16 --reps 2 --policy all)
    # Without a GPU the benchmark prints "nothing measured" and exits 0: count that as a skip.
    set_tests_properties(cuda.bench_gpu_smoke PROPERTIES LABELS "cuda" TIMEOUT 120
                         SKIP_REGULAR_EXPRESSION "nothing measured")
    # A mistyped --policy is an error on any machine (exit 2, naming the valid runs).
    add_test(NAME cuda.bench_gpu_unknown_policy COMMAND ccht_bench_gpu --policy lfuu)
    set_tests_properties(cuda.bench_gpu_unknown_policy PROPERTIES LABELS "cuda" TIMEOUT 30
                         PASS_REGULAR_EXPRESSION "--policy must be one of lru, fifo, lfu, page-cache, all; got 'lfuu'")
  endif()
endif()
