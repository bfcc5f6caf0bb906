/**
 * @file page_pool.hpp
 * @brief ccht::page_pool: one allocation of fixed-size pages in backend memory (device memory on
 *        CUDA, host memory on the CPU), addressed by a 32-bit page id. The storage under the
 *        page cache (issue 9); it owns bytes and geometry only, not which pages are in use.
 *
 * A **mappable** pool (pool_options::memory) can also map any of its pages into other address
 * ranges, so that pages scattered over the pool appear as one contiguous object (the weight
 * cache). Its memory is a memfd on the CPU and one driver allocation per page on CUDA
 * (cache/detail/vm.hpp); page(id) addresses the same bytes as every mapping of that page.
 */
#pragma once

#include <ccht/backend.hpp>
#include <ccht/cache/detail/vm.hpp>
#include <ccht/error.hpp>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>

namespace ccht {

/// Page index within a ccht::page_pool.
using page_id = std::uint32_t;

/// How a page pool's memory is allocated.
enum class pool_memory : std::uint8_t {
  plain = 0,     ///< one Backend::allocate
  mappable = 1,  ///< pages that can also be mapped elsewhere (see page_pool::map_pages)
};

/// How a mapping made by page_pool::map_pages may be accessed.
enum class page_access : std::uint8_t {
  read_write = 0,  ///< being filled
  read_only = 1,   ///< published: shared by every holder, so nobody may write it
};

/// Allocation options of a ccht::page_pool.
struct pool_options {
  pool_memory memory = pool_memory::plain;  ///< plain or mappable
  huge_pages huge = huge_pages::automatic;  ///< mappable pools on the CPU: hugetlb pages
};

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
  page_pool(std::size_t pool_bytes, std::size_t page_bytes, pool_options options = {})
      : page_bytes_(page_bytes), mappable_(options.memory == pool_memory::mappable) {
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
    data_ = mappable_ ? vm_type::create(vm_, pool_bytes, page_bytes, options.huge)
                      : static_cast<std::byte*>(Backend::allocate(pool_bytes));
  }
  ~page_pool() { free_all(); }
  page_pool(page_pool const&) = delete;
  page_pool& operator=(page_pool const&) = delete;
  /// Moves the allocation; the source is left empty (no pages).
  page_pool(page_pool&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)),
        page_bytes_(std::exchange(o.page_bytes_, 0)),
        num_pages_(std::exchange(o.num_pages_, 0)),
        mappable_(std::exchange(o.mappable_, false)),
        vm_(std::exchange(o.vm_, {})) {}
  /// Moves the allocation; the source is left empty (no pages).
  page_pool& operator=(page_pool&& o) noexcept {
    if (this != &o) {
      free_all();
      data_ = std::exchange(o.data_, nullptr);
      page_bytes_ = std::exchange(o.page_bytes_, 0);
      num_pages_ = std::exchange(o.num_pages_, 0);
      mappable_ = std::exchange(o.mappable_, false);
      vm_ = std::exchange(o.vm_, {});
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

  /// @name Mapping (mappable pools only; each throws ccht::error invalid_argument otherwise)
  /// A range from reserve_range() is inaccessible until pages are mapped into it; unmapped parts
  /// fault on access. Map and unmap at multiples of page_bytes() from the range's start.
  /// @{
  /// Whether the pool was built with pool_memory::mappable.
  bool mappable() const noexcept { return mappable_; }
  /// Whether hugetlb pages back the pool (CPU), or the GPU's large pages (CUDA, always).
  bool huge_pages_used() const noexcept { return mappable_ && vm_.huge; }
  /// Reserves address space for @p pages pages. @throws ccht::error out_of_memory when it fails
  std::byte* reserve_range(std::size_t pages) const {
    require_mappable("reserve_range");
    return vm_type::reserve(vm_, pages * page_bytes_);
  }
  /// Maps pages first .. first + count - 1 (consecutive ids) at @p at, in order.
  void map_pages(std::byte* at, page_id first, std::size_t count,
                 page_access access = page_access::read_write) const {
    require_mappable("map_pages");
    if (std::size_t{first} + count > num_pages_) { (void)page(static_cast<page_id>(num_pages_)); }
    vm_type::map(vm_, at, page_bytes_, first, count, access == page_access::read_write);
  }
  /// Makes @p count mapped pages at @p at read-only (writes through this range then fault).
  void protect_read_only(std::byte* at, std::size_t count) const {
    require_mappable("protect_read_only");
    vm_type::protect_read_only(vm_, at, page_bytes_, count);
  }
  /// Unmaps @p count mapped pages at @p at (the range stays reserved).
  void unmap_pages(std::byte* at, std::size_t count) const {
    require_mappable("unmap_pages");
    vm_type::unmap(vm_, at, page_bytes_, count);
  }
  /// Returns a range of @p pages pages from reserve_range(); unmap its pages first.
  void free_range(std::byte* at, std::size_t pages) const noexcept {
    if (mappable_) { vm_type::free(vm_, at, pages * page_bytes_); }
  }
  /// @}

 private:
  using vm_type = detail::vm<Backend>;
  void require_mappable(char const* what) const {
    if (!mappable_) {
      throw error(error_code::invalid_argument,
                  std::string("page_pool::") + what + ": the pool is not mappable");
    }
  }
  void free_all() noexcept {
    if (mappable_) {
      vm_type::destroy(vm_, data_, num_pages_ * page_bytes_);
    } else {
      Backend::deallocate(data_);
    }
    data_ = nullptr;
  }

  std::byte* data_ = nullptr;
  std::size_t page_bytes_ = 0;
  std::size_t num_pages_ = 0;
  bool mappable_ = false;
  typename vm_type::state vm_{};
};

}  // namespace ccht
