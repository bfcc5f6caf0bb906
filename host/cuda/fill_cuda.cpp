// The CUDA backend's fill for the model loader (include/ccht/cache/model_loader.hpp): pread(2)
// into two pinned host staging buffers in turn; each is copied to the object's device range with
// cudaMemcpyAsync while the other is read. Compiled with the CUDA backend; not run on a GPU yet.
#include <ccht/cache/model_loader.hpp>
#include <ccht/error.hpp>

#include <cuda_runtime_api.h>

#include <cerrno>
#include <cstring>
#include <string>

#include <unistd.h>

namespace ccht::detail {

void file_filler<cuda_backend>::fill(int fd, std::string const& path,
                                     std::span<fill_piece const> pieces,
                                     model_loader_options const& options) {
  std::size_t const chunk = options.io_chunk_bytes == 0 ? std::size_t{8} << 20 : options.io_chunk_bytes;
  void* staging[2] = {nullptr, nullptr};
  cudaEvent_t done[2] = {nullptr, nullptr};
  cudaStream_t stream = nullptr;
  auto cleanup = [&] {
    if (stream != nullptr) { cudaStreamSynchronize(stream); }
    for (int b = 0; b < 2; ++b) {
      if (done[b] != nullptr) { cudaEventDestroy(done[b]); }
      if (staging[b] != nullptr) { cudaFreeHost(staging[b]); }
    }
    if (stream != nullptr) { cudaStreamDestroy(stream); }
  };
  try {
    check_cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    for (int b = 0; b < 2; ++b) {
      check_cuda(cudaHostAlloc(&staging[b], chunk, cudaHostAllocDefault), "cudaHostAlloc (staging)");
      check_cuda(cudaEventCreateWithFlags(&done[b], cudaEventDisableTiming), "cudaEventCreate");
    }
    int buf = 0;
    bool used[2] = {false, false};
    for (auto const& p : pieces) {
      for (std::size_t at = 0; at < p.bytes; at += chunk) {
        std::size_t const len = std::min(chunk, p.bytes - at);
        if (used[buf]) { check_cuda(cudaEventSynchronize(done[buf]), "cudaEventSynchronize"); }
        auto* dst = static_cast<std::byte*>(staging[buf]);
        std::size_t got = 0;
        while (got < len) {
          ssize_t const r = ::pread(fd, dst + got, len - got, static_cast<off_t>(p.offset + at + got));
          if (r < 0 && errno == EINTR) { continue; }
          if (r <= 0) {
            throw error(error_code::invalid_argument,
                        path + (r == 0 ? std::string(": the file is shorter than its header says")
                                       : ": read failed (" + std::string(std::strerror(errno)) + ")"));
          }
          got += static_cast<std::size_t>(r);
        }
        check_cuda(cudaMemcpyAsync(p.dst + at, dst, len, cudaMemcpyHostToDevice, stream),
                   "cudaMemcpyAsync (fill)");
        check_cuda(cudaEventRecord(done[buf], stream), "cudaEventRecord");
        used[buf] = true;
        buf ^= 1;
      }
    }
    check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize (fill)");
  } catch (...) {
    cleanup();
    throw;
  }
  cleanup();
}

}  // namespace ccht::detail
