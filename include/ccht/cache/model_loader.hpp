/**
 * @file model_loader.hpp
 * @brief ccht::model_loader: safetensors models through a ccht::weight_cache. load(path) gives
 *        every tensor's name, dtype, shape and contiguous pointer (backend memory), all pinned,
 *        and one release for the model (loaded_model::release or its destructor).
 *
 * **Keys.** A file's identity is (device, inode, size, modification time, change time) from
 * stat(2), in nanoseconds. A tensor's object key is a 64-bit hash of that identity and the
 * tensor's name (tensor_key); with model_layout::packed the whole data section is one object
 * keyed by the identity alone (file_key), and tensors point into it.
 *
 * **When a file changes** (rewritten, replaced, touched), its identity changes, so its tensors
 * get new keys: the next load reads the new bytes, and never returns the old ones. The loader
 * erases the old version's unpinned objects when it sees the path's identity change; pinned ones
 * stay valid for their holders and age out after release. A file modified *while* it is loaded
 * is detected by a second stat after the reads: the fill is abandoned and load() throws.
 *
 * **Fill path.** Only the pages the cache lacks are read, with large pread(2)s: on the CPU
 * straight into the object's mapped range, split over io_threads; on CUDA into two pinned host
 * staging buffers in turn, each copied with cudaMemcpyAsync while the next is read.
 *
 * **Concurrency.** load() is thread-safe. Threads loading the same model at once read it once:
 * the cache hands each object to one filler, the others get `pending`, wait for its publish
 * (weight_cache::wait_ready), and then hit.
 *
 * **Errors** (ccht::error, nothing held afterwards): the file's own (safetensors.hpp, naming the
 * file and the tensor; nothing is cached), a read failure or a file shorter than its header says
 * (invalid_argument), no space because the budget is pinned by others (out_of_memory), and a
 * filler that did not publish within the wait timeout (invalid_argument).
 */
#pragma once

#include <ccht/cache/remote_store.hpp>
#include <ccht/cache/safetensors.hpp>
#include <ccht/cache/weight_cache.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace ccht {

/// How a model's tensors map to cache objects.
enum class model_layout : std::uint8_t {
  per_tensor = 0,  ///< one object per tensor (evicted and refilled per page of each tensor)
  packed = 1,      ///< one object for the file's whole data section: no per-tensor page waste
};

/// Options of a ccht::model_loader.
struct model_loader_options {
  model_layout layout = model_layout::per_tensor;   ///< objects per model
  int io_threads = 2;                                ///< CPU: threads reading a fill
  std::size_t io_chunk_bytes = std::size_t{8} << 20; ///< bytes per pread (and staging buffer)
  std::chrono::milliseconds wait = std::chrono::seconds(60);  ///< longest wait for another filler
  /// A shared remote tier (not owned): fills look there first, page by page (the cache's page
  /// size is the chunk), and write the pages they read from the file to it. Keys come from the
  /// file's header, size and sampled bytes (content_key), not its inode, so every node finds the
  /// same chunks.
  remote_store* remote = nullptr;
};

/// Identity of a file's contents as stat(2) sees them.
struct file_identity {
  std::uint64_t device = 0, inode = 0, size = 0;
  std::int64_t mtime_ns = 0, ctime_ns = 0;
  /// Equal identities: the same version of the same file.
  bool operator==(file_identity const&) const = default;
};

/// stat(2) of @p path. @throws ccht::error invalid_argument naming the path and the reason, also
/// when it is not a regular file (a FIFO, directory or device)
file_identity identify_file(std::string const& path);
/// Object key of the whole data section of a file version (model_layout::packed).
key_type file_key(file_identity const& id) noexcept;
/// Object key of tensor @p name of a file version (model_layout::per_tensor).
key_type tensor_key(file_identity const& id, std::string_view name) noexcept;

/**
 * @brief A key for a file's header that other machines compute alike: a hash of the file size
 *        and its header (every tensor's name, dtype, shape and offsets, and the metadata). Equal
 *        for fine-tunes of one base model: the remote tier keys by the overload below.
 */
key_type content_key(st_header const& header, std::uint64_t file_size) noexcept;
/**
 * @brief The remote tier's key for a file's contents: content_key(header, file_size) mixed with
 *        four 64-byte samples of every tensor, read from @p path (a few small reads), so that
 *        files with equal headers and other weights get other keys. Files that differ only
 *        between the samples still share it: give each such model store its own remote prefix.
 * @throws ccht::error invalid_argument when @p path cannot be read
 */
key_type content_key(st_header const& header, std::uint64_t file_size, std::string const& path);
/// Remote key of chunk @p index of an object whose contents key is @p content (segment keys:
/// content_key for model_layout::packed, mixed with the tensor name per tensor).
key_type remote_chunk_key(key_type content, std::uint32_t index) noexcept;

/// One tensor of a loaded model.
struct model_tensor {
  std::string name;                  ///< as in the file
  st_dtype dtype = st_dtype::U8;     ///< element type
  std::vector<std::uint64_t> shape;  ///< dimensions
  std::byte* data = nullptr;         ///< contiguous bytes in backend memory (null when 0 bytes)
  std::size_t bytes = 0;             ///< size
};

/// What one load() did.
struct load_report {
  std::size_t objects = 0;        ///< cache objects of the model
  std::size_t hits = 0;           ///< objects found whole
  std::size_t fills = 0;          ///< objects this call filled (in whole or in part)
  std::size_t waits = 0;          ///< times it waited for another caller's fill
  std::uint64_t pages_filled = 0; ///< pages read
  std::uint64_t bytes_read = 0;   ///< bytes read from the file
  std::uint64_t remote_pages = 0;  ///< pages copied from the remote tier instead of the file
  std::uint64_t remote_bytes = 0;  ///< their bytes
  std::uint64_t remote_writes = 0; ///< pages read from the file and queued for the remote tier
  double seconds = 0;             ///< wall time of load()
  /// A load that read nothing from the file.
  bool warm() const noexcept { return bytes_read == 0 && remote_bytes == 0; }
};

template <class Backend>
class model_loader;

/// A model's pinned tensors; releases them once, on release() or destruction. Move-only.
template <class Backend>
class loaded_model {
 public:
  loaded_model() = default;
  loaded_model(loaded_model&& o) noexcept { *this = std::move(o); }
  loaded_model& operator=(loaded_model&& o) noexcept {
    if (this != &o) {
      release_noexcept();
      cache_ = std::exchange(o.cache_, nullptr);
      keys_ = std::move(o.keys_);
      tensors_ = std::move(o.tensors_);
      path_ = std::move(o.path_);
      report_ = o.report_;
    }
    return *this;
  }
  ~loaded_model() { release_noexcept(); }

  /// Every tensor, in file order (by offset).
  std::vector<model_tensor> const& tensors() const noexcept { return tensors_; }
  /// The tensor named @p name, or null.
  model_tensor const* find(std::string_view name) const noexcept {
    for (auto const& t : tensors_) {
      if (t.name == name) { return &t; }
    }
    return nullptr;
  }
  /// The file loaded.
  std::string const& path() const noexcept { return path_; }
  /// What the load did.
  load_report const& report() const noexcept { return report_; }
  /// Whether the model still holds its pins.
  bool held() const noexcept { return cache_ != nullptr; }
  /// Releases every tensor's pin; the pointers must not be used afterwards, and work that reads
  /// them must be done (else release(stream)). Idempotent. The destructor calls it.
  void release() {
    if (cache_ != nullptr) {
      auto* c = std::exchange(cache_, nullptr);
      c->release(keys_);
    }
  }
  /// Releases every tensor's pin after the work enqueued on @p stream so far (kernels reading
  /// the tensors): their pages are not reused before it is done (weight_cache::release).
  /// Idempotent.
  void release(typename Backend::stream_type stream) {
    if (cache_ != nullptr) {
      auto* c = std::exchange(cache_, nullptr);
      c->release(keys_, stream);
    }
  }

 private:
  friend class model_loader<Backend>;
  void release_noexcept() noexcept {
    try {
      release();
    } catch (...) {  // a destructor never throws; release() reports the same error
    }
  }
  weight_cache<Backend>* cache_ = nullptr;
  std::vector<key_type> keys_;
  std::vector<model_tensor> tensors_;
  std::string path_;
  load_report report_{};
};

/**
 * @brief Loads safetensors files through a weight cache. Thread-safe.
 * @tparam Backend ccht::cpu_backend or ccht::cuda_backend
 */
template <class Backend>
class model_loader {
 public:
  /// A loader over @p cache (which must outlive it and every loaded_model).
  explicit model_loader(weight_cache<Backend>& cache, model_loader_options options = {})
      : cache_(cache), options_(options) {}

  /// Loads @p path: every tensor pinned and contiguous. @throws ccht::error (see the file comment)
  loaded_model<Backend> load(std::string const& path);

  /// The cache under the loader.
  weight_cache<Backend>& cache() noexcept { return cache_; }

 private:
  struct known_file {
    file_identity id;
    std::shared_ptr<st_header const> header;
    std::optional<key_type> content;  // content_key with samples, once a remote tier asked
  };
  std::shared_ptr<st_header const> header_for(std::string const& path, file_identity const& id);
  key_type content_for(std::string const& path, file_identity const& id, st_header const& h);
  template <class Segments>
  void check_fits(std::string const& path, Segments const& segs) const;
  template <class Segments>
  error no_space_error(std::string const& path, Segments const& segs) const;

  weight_cache<Backend>& cache_;
  model_loader_options options_;
  std::mutex mu_;
  std::unordered_map<std::string, known_file> files_;
};

namespace detail {

/// One read of a fill: @p bytes from file offset @p offset to @p dst (backend memory).
struct fill_piece {
  std::byte* dst = nullptr;
  std::uint64_t offset = 0;
  std::size_t bytes = 0;
};

/// Reads every piece from @p fd. @throws ccht::error invalid_argument naming @p path on a read
/// error or a short read
template <class Backend>
struct file_filler {
  static void fill(int fd, std::string const& path, std::span<fill_piece const> pieces,
                   model_loader_options const& options);
};

template <>
struct file_filler<cpu_backend> {
  static void fill(int fd, std::string const& path, std::span<fill_piece const> pieces,
                   model_loader_options const& options);
};

#if CCHT_WITH_CUDA
template <>
struct file_filler<cuda_backend> {
  static void fill(int fd, std::string const& path, std::span<fill_piece const> pieces,
                   model_loader_options const& options);
};
#endif

/// open(2) read-only of a regular file (never blocks on a FIFO), or throws naming @p path.
int open_for_read(std::string const& path);
/// close(2).
void close_file(int fd) noexcept;

}  // namespace detail
}  // namespace ccht

#include <ccht/cache/detail/model_loader_impl.hpp>
