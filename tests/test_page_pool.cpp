// ccht::page_pool (cache/page_pool.hpp), backend-neutral: compiled into ccht_tests_cpu and
// ccht_tests_cuda (CCHT_TEST_BACKEND); skips where the backend is unavailable.
#include <ccht/cache/page_pool.hpp>

#include "test_support.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#ifndef CCHT_TEST_BACKEND
#error "CCHT_TEST_BACKEND must name the backend under test"
#endif

namespace {

using Backend = CCHT_TEST_BACKEND;
using pool = ccht::page_pool<Backend>;
class PagePool : public ccht_test::backend_test<Backend> {};

TEST_F(PagePool, GeometryAndAddresses) {
  pool p(10 * 4096, 4096);
  EXPECT_EQ(p.num_pages(), 10u);
  EXPECT_EQ(p.page_bytes(), 4096u);
  EXPECT_EQ(p.bytes(), 10u * 4096u);
  for (ccht::page_id i = 0; i < 10; ++i) { EXPECT_EQ(p.page(i), p.data() + std::size_t{i} * 4096); }
  EXPECT_CCHT_ERROR(p.page(10), ccht::error_code::invalid_argument);
}

TEST_F(PagePool, PagesHoldTheirOwnBytes) {
  // Write a different pattern into every page, then read the whole pool back.
  std::size_t const page = 1000, pages = 37;  // an odd page size: no alignment is assumed
  pool p(page * pages, page);
  for (ccht::page_id i = 0; i < pages; ++i) {
    std::vector<unsigned char> bytes(page, static_cast<unsigned char>(i * 7 + 1));
    Backend::copy_from_host(p.page(i), bytes.data(), page);
  }
  std::vector<unsigned char> all(p.bytes());
  Backend::copy_to_host(all.data(), p.data(), all.size());
  for (std::size_t b = 0; b < all.size(); ++b) {
    ASSERT_EQ(all[b], static_cast<unsigned char>((b / page) * 7 + 1)) << "byte " << b;
  }
}

TEST_F(PagePool, BadSizesAreErrors) {
  EXPECT_CCHT_ERROR(pool(0, 4096), ccht::error_code::invalid_size);
  EXPECT_CCHT_ERROR(pool(4096, 0), ccht::error_code::invalid_size);
  EXPECT_CCHT_ERROR(pool(10000, 4096), ccht::error_code::invalid_size);  // does not divide
  // 2^32 one-byte pages: more than a 32-bit page id addresses; refused before allocating.
  EXPECT_CCHT_ERROR(pool(std::size_t{1} << 32, 1), ccht::error_code::invalid_size);
  // 4 EiB: no machine has it.
  EXPECT_CCHT_ERROR(pool(std::size_t{1} << 62, std::size_t{1} << 40), ccht::error_code::out_of_memory);
  pool ok(4096, 4096);  // and the backend still allocates afterwards
  EXPECT_EQ(ok.num_pages(), 1u);
}

TEST_F(PagePool, MoveLeavesTheSourceEmpty) {
  pool a(8 * 512, 512);
  std::byte* const data = a.data();
  pool b(std::move(a));
  EXPECT_EQ(b.data(), data);
  EXPECT_EQ(b.num_pages(), 8u);
  EXPECT_EQ(a.num_pages(), 0u);  // NOLINT(bugprone-use-after-move): documented state
  EXPECT_CCHT_ERROR(a.page(0), ccht::error_code::invalid_argument);
  pool c(512, 512);
  c = std::move(b);
  EXPECT_EQ(c.num_pages(), 8u);
}

}  // namespace
