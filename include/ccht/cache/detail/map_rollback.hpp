// All-or-nothing mapping of a run of pages that the backend maps one call per page (CUDA: cuMemMap
// maps whole allocations only, and the pool has one allocation per page; see vm.hpp). When a
// page's map or the run's access change fails, the pages this call mapped are unmapped again:
// callers record a mapping only once map_pages returns, so anything left mapped after a failure
// would be mapped but tracked by no one.
// Free of CUDA so that the CPU tests drive it with a fake mapper (tests/test_map_rollback.cpp).
#pragma once

#include <cstddef>
#include <string>

namespace ccht::detail {

/// What map_or_roll_back did.
struct map_run_result {
  bool failed = false;          ///< a map or the access change failed; the run is not mapped
  bool access_failed = false;   ///< every page was mapped, then the access change failed
  std::size_t failed_page = 0;  ///< the page whose map failed (when !access_failed)
  std::size_t unmapped = 0;     ///< pages unmapped again by the rollback
  std::size_t left_mapped = 0;  ///< pages whose unmap failed as well: still mapped, untracked
};

/**
 * @brief Maps pages [0, @p count) of a run through @p m, then sets their access, or, on the first
 *        failure, unmaps what it mapped (last page first) and says so.
 *
 * Mapper: `bool map(std::size_t i)` maps page i; `bool set_access(std::size_t n)` makes pages
 * [0, n) accessible; `bool unmap(std::size_t i)` unmaps page i. Each returns false on failure and
 * keeps its own record of why (the error to report); none throws.
 */
template <class Mapper>
map_run_result map_or_roll_back(Mapper& m, std::size_t count) noexcept {
  map_run_result r;
  std::size_t mapped = 0;
  while (mapped < count && m.map(mapped)) { ++mapped; }
  if (mapped == count && m.set_access(count)) { return r; }
  r.failed = true;
  r.access_failed = mapped == count;
  r.failed_page = mapped;
  // Keep going past a failed unmap: every page that can be returned is.
  for (std::size_t i = mapped; i-- > 0;) {
    if (m.unmap(i)) {
      ++r.unmapped;
    } else {
      ++r.left_mapped;
    }
  }
  return r;
}

/// The rollback's part of an error message for a failed run of @p count pages.
inline std::string describe_rollback(map_run_result const& r, std::size_t count) {
  std::string s = r.access_failed ? std::string("setting the access of all ")
                                  : "mapping page " + std::to_string(r.failed_page) + " of ";
  s += std::to_string(count);
  s += " pages failed; ";
  if (r.unmapped + r.left_mapped == 0) {
    s += "nothing had been mapped";
    return s;
  }
  s += "the ";
  s += std::to_string(r.unmapped + r.left_mapped);
  s += " pages this call had mapped were unmapped again";
  if (r.left_mapped != 0) {
    s += ", except ";
    s += std::to_string(r.left_mapped);
    s += " whose unmap failed too: they stay mapped, so the range must not be reused";
  }
  return s;
}

}  // namespace ccht::detail
