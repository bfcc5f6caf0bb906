/**
 * @file page_pool.hpp
 * @brief ccht::page_pool: one allocation of fixed-size pages in backend memory (device memory on
 *        CUDA, host memory on the CPU), addressed by a 32-bit page id. The storage under the
 *        page cache (issue 9); it owns bytes and geometry only, not which pages are in use.
 */
#pragma once

#include <ccht/backend.hpp>
#include <ccht/error.hpp>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>

namespace ccht {

/// Page index within a ccht::page_pool.
using page_id = std::uint32_t;

/**
 * @brief @p pool_bytes of backend memory cut into pages of @p page_bytes, in one allocation.
 * @tparam Backend ccht::cpu_backend or ccht::cuda_backend
 */
template <class Backend>
class page_pool {
 public:
  /// Most pages a pool holds: page ids are 32-bit, and the largest value is kept as "no page".
  static constexpr std::size_t max_pages = std::numeric_limits<page_id>::max();

  /**
   * @brief Allocates pool_bytes / page_bytes pages.
   * @throws ccht::error invalid_size when a size is 0, when page_bytes does not divide
   *         pool_bytes, or when that makes more than max_pages pages; out_of_memory (or
   *         cuda_failure) when the allocation fails. Nothing stays allocated after a throw.
   */
  page_pool(std::size_t pool_bytes, std::size_t page_bytes) : page_bytes_(page_bytes) {
    if (pool_bytes == 0 || page_bytes == 0) {
      throw error(error_code::invalid_size, "page_pool: pool_bytes (" + std::to_string(pool_bytes) +
                                                ") and page_bytes (" + std::to_string(page_bytes) +
                                                ") must both be non-zero");
    }
    if (pool_bytes % page_bytes != 0) {
      throw error(error_code::invalid_size,
                  "page_pool: page_bytes " + std::to_string(page_bytes) +
                      " does not divide pool_bytes " + std::to_string(pool_bytes));
    }
    num_pages_ = pool_bytes / page_bytes;
    if (num_pages_ > max_pages) {
      throw error(error_code::invalid_size,
                  "page_pool: " + std::to_string(num_pages_) + " pages exceed the most a pool " +
                      "addresses (" + std::to_string(max_pages) + ")");
    }
    data_ = static_cast<std::byte*>(Backend::allocate(pool_bytes));
  }
  ~page_pool() { Backend::deallocate(data_); }
  page_pool(page_pool const&) = delete;
  page_pool& operator=(page_pool const&) = delete;
  /// Moves the allocation; the source is left empty (no pages).
  page_pool(page_pool&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)),
        page_bytes_(std::exchange(o.page_bytes_, 0)),
        num_pages_(std::exchange(o.num_pages_, 0)) {}
  /// Moves the allocation; the source is left empty (no pages).
  page_pool& operator=(page_pool&& o) noexcept {
    if (this != &o) {
      Backend::deallocate(data_);
      data_ = std::exchange(o.data_, nullptr);
      page_bytes_ = std::exchange(o.page_bytes_, 0);
      num_pages_ = std::exchange(o.num_pages_, 0);
    }
    return *this;
  }

  /// Number of pages.
  std::size_t num_pages() const noexcept { return num_pages_; }
  /// Bytes per page.
  std::size_t page_bytes() const noexcept { return page_bytes_; }
  /// Bytes of the whole pool.
  std::size_t bytes() const noexcept { return num_pages_ * page_bytes_; }
  /// First byte of the pool (backend memory).
  std::byte* data() const noexcept { return data_; }
  /// First byte of page @p id (backend memory). @throws ccht::error invalid_argument when out of range
  std::byte* page(page_id id) const {
    if (id >= num_pages_) {
      throw error(error_code::invalid_argument, "page_pool: page id " + std::to_string(id) +
                                                    " is out of range (" +
                                                    std::to_string(num_pages_) + " pages)");
    }
    return data_ + std::size_t{id} * page_bytes_;
  }

 private:
  std::byte* data_ = nullptr;
  std::size_t page_bytes_ = 0;
  std::size_t num_pages_ = 0;
};

}  // namespace ccht
