// The all-or-nothing page-run mapping of the CUDA page pool (cache/detail/map_rollback.hpp),
// driven by a fake mapper that fails where told: whatever fails, nothing the call mapped may stay
// mapped unless its unmap failed too, and the message says which. The CUDA pool
// (host/cuda/vm_cuda.cpp) runs the same template over cuMemMap, cuMemSetAccess and cuMemUnmap.
#include <ccht/cache/detail/map_rollback.hpp>

#include <gtest/gtest.h>

#include <cstddef>
#include <set>
#include <string>
#include <vector>

namespace {

using ccht::detail::map_or_roll_back;
using ccht::detail::map_run_result;

constexpr std::size_t none = ~std::size_t{0};

/// Pages of one run; map fails at page fail_map, set_access when fail_access, unmap at fail_unmap.
struct fake_mapper {
  std::size_t fail_map = none;
  bool fail_access = false;
  std::set<std::size_t> fail_unmap;
  std::vector<bool> mapped;
  std::vector<std::size_t> unmapped_order;
  int access_calls = 0;

  explicit fake_mapper(std::size_t count) : mapped(count, false) {}
  bool map(std::size_t i) {
    if (i == fail_map) { return false; }
    EXPECT_FALSE(mapped.at(i)) << "page " << i << " mapped twice";
    mapped.at(i) = true;
    return true;
  }
  bool set_access(std::size_t n) {
    ++access_calls;
    for (std::size_t i = 0; i < n; ++i) { EXPECT_TRUE(mapped.at(i)) << "access before map"; }
    return !fail_access;
  }
  bool unmap(std::size_t i) {
    EXPECT_TRUE(mapped.at(i)) << "unmapped page " << i << ", which this call never mapped";
    unmapped_order.push_back(i);
    if (fail_unmap.count(i) != 0) { return false; }
    mapped.at(i) = false;
    return true;
  }
  std::size_t still_mapped() const {
    std::size_t n = 0;
    for (bool m : mapped) { n += m ? 1 : 0; }
    return n;
  }
};

TEST(MapRollback, EveryPageMappedThenAccessOnce) {
  fake_mapper m(8);
  map_run_result const r = map_or_roll_back(m, 8);
  EXPECT_FALSE(r.failed);
  EXPECT_EQ(m.still_mapped(), 8u);
  EXPECT_EQ(m.access_calls, 1);
  EXPECT_TRUE(m.unmapped_order.empty());
}

TEST(MapRollback, MapFailingAtPageKUnmapsTheKBeforeItLastFirst) {
  constexpr std::size_t count = 6;
  for (std::size_t k = 0; k < count; ++k) {
    fake_mapper m(count);
    m.fail_map = k;
    map_run_result const r = map_or_roll_back(m, count);
    EXPECT_TRUE(r.failed) << "k " << k;
    EXPECT_FALSE(r.access_failed) << "k " << k;
    EXPECT_EQ(r.failed_page, k);
    EXPECT_EQ(r.unmapped, k);
    EXPECT_EQ(r.left_mapped, 0u);
    EXPECT_EQ(m.still_mapped(), 0u) << "pages left mapped after a failure at page " << k;
    EXPECT_EQ(m.access_calls, 0) << "access set on a partly mapped run";
    ASSERT_EQ(m.unmapped_order.size(), k);
    for (std::size_t j = 0; j < k; ++j) { EXPECT_EQ(m.unmapped_order[j], k - 1 - j); }
  }
}

TEST(MapRollback, AccessFailureUnmapsEveryPage) {
  fake_mapper m(5);
  m.fail_access = true;
  map_run_result const r = map_or_roll_back(m, 5);
  EXPECT_TRUE(r.failed);
  EXPECT_TRUE(r.access_failed);
  EXPECT_EQ(r.unmapped, 5u);
  EXPECT_EQ(m.still_mapped(), 0u);
}

TEST(MapRollback, AFailedUnmapIsCountedAndTheRestStillUnmapped) {
  fake_mapper m(6);
  m.fail_map = 4;
  m.fail_unmap = {2};
  map_run_result const r = map_or_roll_back(m, 6);
  EXPECT_TRUE(r.failed);
  EXPECT_EQ(r.unmapped, 3u);
  EXPECT_EQ(r.left_mapped, 1u);
  EXPECT_EQ(m.still_mapped(), 1u);
  EXPECT_TRUE(m.mapped[2]);
  EXPECT_EQ(m.unmapped_order, (std::vector<std::size_t>{3, 2, 1, 0}));
}

TEST(MapRollback, EmptyRunOnlySetsAccess) {
  fake_mapper m(0);
  EXPECT_FALSE(map_or_roll_back(m, 0).failed);
  EXPECT_EQ(m.access_calls, 1);  // as the CPU pool's one mmap: the backend decides about 0 pages
}

TEST(MapRollback, MessagesSayWhatWasUndone) {
  using ccht::detail::describe_rollback;
  {
    fake_mapper m(8);
    m.fail_map = 3;
    std::string const s = describe_rollback(map_or_roll_back(m, 8), 8);
    EXPECT_EQ(s, "mapping page 3 of 8 pages failed; the 3 pages this call had mapped were "
                 "unmapped again");
  }
  {
    fake_mapper m(8);
    m.fail_map = 0;
    EXPECT_EQ(describe_rollback(map_or_roll_back(m, 8), 8),
              "mapping page 0 of 8 pages failed; nothing had been mapped");
  }
  {
    fake_mapper m(4);
    m.fail_access = true;
    m.fail_unmap = {1, 3};
    std::string const s = describe_rollback(map_or_roll_back(m, 4), 4);
    EXPECT_NE(s.find("setting the access of all 4 pages failed"), std::string::npos) << s;
    EXPECT_NE(s.find("except 2 whose unmap failed too: they stay mapped"), std::string::npos) << s;
  }
}

}  // namespace
