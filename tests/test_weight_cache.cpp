// ccht::weight_cache and ccht::model_loader on the CPU backend (memfd pages mapped into one range
// per object). Every object holds a pattern derived from its key and version, so a page mapped at
// the wrong place, a kept page that lost its bytes, or a stale mapping shows up as a wrong byte.
#include <ccht/cache/model_loader.hpp>
#include <ccht/cache/weight_cache.hpp>

#include "test_support.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <sys/stat.h>

namespace {

using ccht::key_type;
using ccht::object_lease;
using ccht::object_request;
using ccht::object_status;
using cache_t = ccht::weight_cache<ccht::cpu_backend>;

constexpr std::size_t page = 4096;

std::byte pattern(key_type k, std::size_t j) {
  std::uint64_t const h = (k + 1) * 0xD1B54A32D192ED03ull + (j / 8) * 0x9E3779B97F4A7C15ull;
  return static_cast<std::byte>(h >> (8 * (j % 8)));
}

void write_pages(object_lease const& l, key_type k, std::size_t page_bytes) {
  for (std::uint32_t i : l.fill_pages) {
    std::size_t const end = std::min((std::size_t{i} + 1) * page_bytes, l.bytes);
    for (std::size_t j = std::size_t{i} * page_bytes; j < end; ++j) { l.data[j] = pattern(k, j); }
  }
}

/// Bytes of the object that differ from its pattern (@p p is the object's byte @p from).
std::size_t wrong_bytes(std::byte const* p, key_type k, std::size_t bytes, std::size_t from = 0) {
  std::size_t bad = 0;
  for (std::size_t j = 0; j < bytes; ++j) { bad += p[j] != pattern(k, from + j); }
  return bad;
}

object_lease acquire_one(cache_t& c, key_type k, std::size_t bytes) {
  object_request const r{k, bytes};
  object_lease l;
  c.acquire({&r, 1}, {&l, 1});
  return l;
}

/// Acquires, fills what is missing, publishes; returns the lease.
object_lease load_one(cache_t& c, key_type k, std::size_t bytes) {
  object_lease l = acquire_one(c, k, bytes);
  if (l.status == object_status::fill) {
    write_pages(l, k, c.page_bytes());
    c.publish({&k, 1});
  }
  return l;
}

TEST(WeightCache, RejectsBadInputBeforeChangingAnything) {
  EXPECT_THROW(cache_t(16 * page, 1000), ccht::error);        // not a multiple of the OS page
  EXPECT_THROW(cache_t(16 * page + 1, page), ccht::error);    // budget not whole pages
  cache_t c(16 * page, page);
  object_request const zero{1, 0}, huge{2, 17 * page};
  object_lease l;
  EXPECT_THROW(c.acquire({&zero, 1}, {&l, 1}), ccht::error);
  try {
    c.acquire({&huge, 1}, {&l, 1});
    ADD_FAILURE() << "an object larger than the budget was accepted";
  } catch (ccht::error const& e) {
    EXPECT_EQ(e.code(), ccht::error_code::invalid_size);
    EXPECT_NE(std::string(e.what()).find("needs 17 pages"), std::string::npos) << e.what();
  }
  object_request const twice[2] = {{3, 100}, {3, 100}};
  object_lease ls[2];
  EXPECT_THROW(c.acquire(twice, ls), ccht::error);
  EXPECT_EQ(c.stats().objects, 0u);

  key_type const k = 7;
  object_lease f = acquire_one(c, k, 3 * page);
  ASSERT_EQ(f.status, object_status::fill);
  object_request const other_size{k, 2 * page};
  EXPECT_THROW(c.acquire({&other_size, 1}, {&l, 1}), ccht::error);
  EXPECT_THROW(c.release({&k, 1}), ccht::error);  // still being filled
  key_type const unknown = 99;
  EXPECT_THROW(c.publish({&unknown, 1}), ccht::error);
  EXPECT_THROW(c.release({&unknown, 1}), ccht::error);
  write_pages(f, k, page);
  c.publish({&k, 1});
  EXPECT_THROW(c.publish({&k, 1}), ccht::error);  // no longer filling
  c.release({&k, 1});
  EXPECT_THROW(c.release({&k, 1}), ccht::error);  // no pin left
  EXPECT_EQ(c.stats().pages_pinned, 0u);
}

TEST(WeightCache, ObjectIsContiguousAndHitsAfterPublish) {
  cache_t c(16 * page, page);
  key_type const k = 42;
  std::size_t const bytes = 3 * page + 1234;
  object_lease f = acquire_one(c, k, bytes);
  ASSERT_EQ(f.status, object_status::fill);
  EXPECT_EQ(f.fill_pages, (std::vector<std::uint32_t>{0, 1, 2, 3}));
  write_pages(f, k, page);
  c.publish({&k, 1});
  c.release({&k, 1});
  object_lease h = acquire_one(c, k, bytes);
  ASSERT_EQ(h.status, object_status::hit);
  EXPECT_EQ(h.data, f.data);
  EXPECT_EQ(wrong_bytes(h.data, k, bytes), 0u);
  // The same bytes through the pool's own view of each page: the mapping is the pool's memory.
  for (std::uint32_t i = 0; i < 4; ++i) {
    ccht::page_status st;
    ccht::page_id pid;
    key_type const pk = ccht::object_page_key(k, i);
    c.pages().ref();  // (the page cache is the source of truth for page ids)
    auto& pc = const_cast<ccht::page_cache<ccht::cpu_backend>&>(c.pages());
    pc.lookup({&pk, 1}, {&pid, 1}, {&st, 1});
    ASSERT_EQ(st, ccht::page_status::hit);
    EXPECT_EQ(std::memcmp(pc.page_data(pid), h.data + i * page, std::min(page, bytes - i * page)), 0);
    pc.release({&pk, 1});
  }
  auto const s = c.stats();
  EXPECT_EQ(s.hits, 1u);
  EXPECT_EQ(s.fills, 1u);
  EXPECT_EQ(s.bytes_resident, 4 * page);
  c.release({&k, 1});
}

TEST(WeightCache, PartlyEvictedObjectRefillsOnlyMissingPages) {
  cache_t c(8 * page, page);
  key_type const a = 1, b = 2;
  ASSERT_EQ(load_one(c, a, 6 * page).status, object_status::fill);
  c.release({&a, 1});
  ASSERT_EQ(load_one(c, b, 5 * page).status, object_status::fill);  // evicts 3 of a's pages
  EXPECT_EQ(c.stats().pages_evicted, 3u);
  c.release({&b, 1});
  object_lease l = acquire_one(c, a, 6 * page);
  ASSERT_EQ(l.status, object_status::fill);
  EXPECT_EQ(l.fill_pages.size(), 3u);
  // The pages kept hold a's bytes already, through the new mapping.
  std::vector<bool> missing(6, false);
  for (auto i : l.fill_pages) { missing[i] = true; }
  for (std::uint32_t i = 0; i < 6; ++i) {
    if (!missing[i]) { EXPECT_EQ(wrong_bytes(l.data + i * page, a, page, i * page), 0u) << "page " << i; }
  }
  write_pages(l, a, page);
  c.publish({&a, 1});
  EXPECT_EQ(wrong_bytes(l.data, a, 6 * page), 0u);
  c.release({&a, 1});
  auto const s = c.stats();
  EXPECT_EQ(s.pages_kept, 3u);
  EXPECT_EQ(s.pages_filled, 6u + 5u + 3u);
  EXPECT_LE(s.bytes_resident, c.budget_bytes());
}

TEST(WeightCache, PinnedObjectsAreNeverEvictedAndNoSpaceHoldsNothing) {
  cache_t c(8 * page, page);
  key_type const a = 1, b = 2;
  ASSERT_EQ(load_one(c, a, 6 * page).status, object_status::fill);  // stays pinned
  object_lease l = acquire_one(c, b, 3 * page);
  EXPECT_EQ(l.status, object_status::no_space);
  auto s = c.stats();
  EXPECT_EQ(s.pages_pinned, 6u);
  EXPECT_EQ(s.no_space, 1u);
  EXPECT_EQ(s.bytes_resident, 6 * page);  // the refused fill gave its pages back
  object_lease h = acquire_one(c, a, 6 * page);
  ASSERT_EQ(h.status, object_status::hit);
  EXPECT_EQ(wrong_bytes(h.data, a, 6 * page), 0u);
  c.release({&a, 1});
  c.release({&a, 1});
  ASSERT_EQ(load_one(c, b, 3 * page).status, object_status::fill);
  c.release({&b, 1});
}

TEST(WeightCache, AbandonFreesFilledPagesAndKeepsTheRest) {
  cache_t c(8 * page, page);
  key_type const a = 1;
  ASSERT_EQ(load_one(c, a, 2 * page).status, object_status::fill);
  c.release({&a, 1});
  key_type const b = 2;
  object_lease l = acquire_one(c, b, 4 * page);
  ASSERT_EQ(l.status, object_status::fill);
  c.abandon({&b, 1});
  auto s = c.stats();
  EXPECT_EQ(s.abandons, 1u);
  EXPECT_EQ(s.pages_pinned, 0u);
  EXPECT_EQ(s.bytes_resident, 2 * page);
  EXPECT_THROW(c.abandon({&b, 1}), ccht::error);
  object_lease again = acquire_one(c, b, 4 * page);
  EXPECT_EQ(again.fill_pages.size(), 4u);
  c.abandon({&b, 1});
}

TEST(WeightCache, EraseRefusesPinnedAndFreesTheRest) {
  cache_t c(8 * page, page);
  key_type const keys[3] = {1, 2, 3};
  load_one(c, 1, 2 * page);
  load_one(c, 2, 2 * page);
  c.release({&keys[1], 1});
  ccht::page_result res[3];
  EXPECT_EQ(c.erase(keys, res), 1u);
  EXPECT_EQ(res[0], ccht::page_result::pinned);
  EXPECT_EQ(res[1], ccht::page_result::ok);
  EXPECT_EQ(res[2], ccht::page_result::unknown_key);
  auto s = c.stats();
  EXPECT_EQ(s.objects, 1u);
  EXPECT_EQ(s.bytes_resident, 2 * page);
  c.release({&keys[0], 1});
  EXPECT_EQ(acquire_one(c, 2, 2 * page).fill_pages.size(), 2u);  // erased: filled anew
  c.abandon({&keys[1], 1});
}

// Random objects over a small pool: every hit holds its pattern, every fill's kept pages too, and
// the resident bytes never exceed the budget (pages reused by other objects many times).
TEST(WeightCache, RandomOpsAgainstPatterns) {
  constexpr std::size_t pages = 24;
  cache_t c(pages * page, page);
  std::mt19937_64 rng(5);
  std::map<key_type, std::size_t> sizes;
  for (key_type k = 1; k <= 40; ++k) { sizes[k] = 1 + rng() % (6 * page); }
  std::vector<key_type> held;
  std::size_t hits = 0, fills = 0, kept_pages_checked = 0;
  for (int op = 0; op < 3000; ++op) {
    if (!held.empty() && (rng() % 3 == 0 || held.size() > 3)) {
      std::size_t const i = rng() % held.size();
      c.release({&held[i], 1});
      held.erase(held.begin() + static_cast<std::ptrdiff_t>(i));
      continue;
    }
    if (rng() % 50 == 0) {
      key_type const k = 1 + rng() % 40;
      c.erase({&k, 1});
      continue;
    }
    key_type const k = 1 + rng() % 40;
    if (std::find(held.begin(), held.end(), k) != held.end()) { continue; }
    object_lease l = acquire_one(c, k, sizes[k]);
    if (l.status == object_status::hit) {
      ++hits;
      ASSERT_EQ(wrong_bytes(l.data, k, sizes[k]), 0u) << "op " << op;
    } else if (l.status == object_status::fill) {
      ++fills;
      std::vector<bool> missing(c.pages_for(sizes[k]), false);
      for (auto i : l.fill_pages) { missing[i] = true; }
      for (std::size_t i = 0; i < missing.size(); ++i) {
        if (missing[i]) { continue; }
        std::size_t const len = std::min(page, sizes[k] - i * page);
        for (std::size_t j = 0; j < len; ++j) {
          ASSERT_EQ(l.data[i * page + j], pattern(k, i * page + j)) << "kept page " << i;
        }
        ++kept_pages_checked;
      }
      write_pages(l, k, page);
      c.publish({&k, 1});
    } else {
      continue;
    }
    held.push_back(k);
    ASSERT_LE(c.stats().bytes_resident, c.budget_bytes());
  }
  for (key_type k : held) { c.release({&k, 1}); }
  auto const s = c.stats();
  EXPECT_EQ(s.pages_pinned, 0u);
  EXPECT_GT(hits, 100u);
  EXPECT_GT(fills, 100u);
  EXPECT_GT(kept_pages_checked, 10u);
}

// A pointer kept past release() faults once the page went to another object, instead of reading
// that object's bytes.
TEST(WeightCacheDeathTest, StaleViewOfAnEvictedPageFaults) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  auto run = [] {
    cache_t c(4 * page, page, {.cpu_threads = 1});
    key_type const a = 1, b = 2;
    std::byte* stale = load_one(c, a, 4 * page).data;
    c.release({&a, 1});
    load_one(c, b, 4 * page);  // takes every page of a
    volatile std::byte x = stale[0];
    (void)x;
  };
  EXPECT_DEATH(run(), "");
}

TEST(WeightCache, HugePagesWhenTheSystemHasThem) {
  std::size_t const huge = std::size_t{2} << 20;
  std::unique_ptr<cache_t> c;
  try {
    c = std::make_unique<cache_t>(4 * huge, huge, ccht::weight_cache_options{.huge = ccht::huge_pages::on});
  } catch (ccht::error const& e) {
    GTEST_SKIP() << "no free 2 MiB huge pages (echo 64 > /proc/sys/vm/nr_hugepages): " << e.what();
  }
  EXPECT_TRUE(c->stats().huge_pages);
  key_type const a = 1, b = 2;
  ASSERT_EQ(load_one(*c, a, 3 * huge + 5).status, object_status::fill);
  c->release({&a, 1});
  ASSERT_EQ(load_one(*c, b, 2 * huge).status, object_status::fill);
  c->release({&b, 1});
  object_lease l = acquire_one(*c, a, 3 * huge + 5);
  ASSERT_EQ(l.status, object_status::fill);
  EXPECT_EQ(l.fill_pages.size(), 2u);
  write_pages(l, a, huge);
  c->publish({&a, 1});
  EXPECT_EQ(wrong_bytes(l.data, a, 3 * huge + 5), 0u);
  c->release({&a, 1});
}

TEST(WeightCache, AutomaticHugePagesFallBack) {
  // Without free huge pages the automatic mode uses the system page; either way the cache works.
  cache_t c(4 * (std::size_t{2} << 20), std::size_t{2} << 20);
  key_type const a = 1;
  object_lease l = load_one(c, a, 5 << 20);
  EXPECT_EQ(wrong_bytes(l.data, a, 5 << 20), 0u);
  c.release({&a, 1});
}

// ---- the model loader -------------------------------------------------------------------------

struct temp_dir {
  std::filesystem::path path;
  temp_dir() {
    char tmpl[] = "/tmp/ccht-weights-XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~temp_dir() { std::filesystem::remove_all(path); }
};

std::vector<std::byte> file_bytes(std::string const& p) {
  std::ifstream in(p, std::ios::binary);
  std::vector<char> v((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> out(v.size());
  std::memcpy(out.data(), v.data(), v.size());
  return out;
}

/// A model of @p tensors tensors of assorted dtypes and sizes, bytes from @p seed.
void write_model(std::string const& path, int tensors, std::size_t max_elems, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  ccht::st_dtype const types[] = {ccht::st_dtype::F32, ccht::st_dtype::I64, ccht::st_dtype::F16,
                                  ccht::st_dtype::U8, ccht::st_dtype::BOOL, ccht::st_dtype::F64};
  std::vector<std::vector<std::byte>> data;
  std::vector<ccht::st_tensor_data> ts;
  for (int t = 0; t < tensors; ++t) {
    auto const dt = types[rng() % 6];
    std::uint64_t const rows = 1 + rng() % 8, cols = t == 3 ? 0 : 1 + rng() % (max_elems / 8 + 1);
    data.emplace_back(rows * cols * ccht::dtype_bytes(dt));
    for (auto& b : data.back()) { b = static_cast<std::byte>(rng()); }
    ts.push_back({"layer" + std::to_string(t) + ".weight", dt, {rows, cols}, data.back()});
  }
  ccht::write_safetensors(path, ts, {{"format", "test"}});
}

/// Checks every tensor of @p m byte for byte against the file.
void expect_matches_file(ccht::loaded_model<ccht::cpu_backend> const& m, std::string const& path) {
  auto const bytes = file_bytes(path);
  auto const h = ccht::read_safetensors(path);
  ASSERT_EQ(m.tensors().size(), h.tensors.size());
  for (auto const& t : h.tensors) {
    auto const* mt = m.find(t.name);
    ASSERT_NE(mt, nullptr) << t.name;
    ASSERT_EQ(mt->bytes, t.bytes());
    EXPECT_EQ(mt->dtype, t.dtype);
    EXPECT_EQ(mt->shape, t.shape);
    if (t.bytes() == 0) { continue; }
    EXPECT_EQ(std::memcmp(mt->data, bytes.data() + h.data_offset + t.begin, t.bytes()), 0) << t.name;
  }
}

class ModelLoader : public ::testing::TestWithParam<ccht::model_layout> {};

TEST_P(ModelLoader, ColdThenWarmThenPartlyEvicted) {
  temp_dir d;
  std::string const a = (d.path / "a.safetensors").string(), b = (d.path / "b.safetensors").string();
  write_model(a, 12, 3000, 1);
  write_model(b, 12, 3000, 2);
  // A budget that holds either model but not both, so b evicts part of a.
  auto pages_of = [&](std::string const& f) {
    auto const h = ccht::read_safetensors(f);
    std::size_t n = 0;
    if (GetParam() == ccht::model_layout::packed) { return (h.data_bytes + page - 1) / page; }
    for (auto const& t : h.tensors) { n += (t.bytes() + page - 1) / page; }
    return n;
  };
  std::size_t const pa = pages_of(a), pb = pages_of(b);
  std::size_t const budget = std::max({pa, pb, (pa + pb) * 3 / 4});
  ASSERT_LT(budget, pa + pb);
  cache_t c(budget * page, page);
  ccht::model_loader<ccht::cpu_backend> loader(c, {.layout = GetParam()});
  {
    auto m = loader.load(a);
    EXPECT_FALSE(m.report().warm());
    EXPECT_EQ(m.report().hits, 0u);
    expect_matches_file(m, a);
  }
  EXPECT_EQ(c.stats().pages_pinned, 0u);  // the destructor released the model
  std::byte const* first = nullptr;
  {
    auto m = loader.load(a);
    EXPECT_TRUE(m.report().warm());
    EXPECT_EQ(m.report().hits, m.report().objects);
    expect_matches_file(m, a);
    first = m.tensors()[0].data;
    m.release();
    EXPECT_FALSE(m.held());
  }
  {
    auto mb = loader.load(b);  // evicts part of a
    expect_matches_file(mb, b);
  }
  auto m = loader.load(a);
  expect_matches_file(m, a);
  auto const file = std::filesystem::file_size(a);
  EXPECT_GT(m.report().bytes_read, 0u);
  EXPECT_LT(m.report().bytes_read, file);  // only what was evicted was read again
  EXPECT_EQ(m.tensors()[0].data, first);   // the same range, remapped where needed
}

INSTANTIATE_TEST_SUITE_P(Layouts, ModelLoader,
                         ::testing::Values(ccht::model_layout::per_tensor, ccht::model_layout::packed),
                         [](auto const& i) {
                           return i.param == ccht::model_layout::packed ? "packed" : "per_tensor";
                         });

TEST(ModelLoaderFile, ChangedFileGetsNewKeysAndNeverOldBytes) {
  temp_dir d;
  std::string const p = (d.path / "m.safetensors").string();
  write_model(p, 6, 2000, 1);
  cache_t c(64 * page, page);
  ccht::model_loader<ccht::cpu_backend> loader(c);
  loader.load(p);
  std::size_t const objects = c.stats().objects;
  write_model(p, 6, 2000, 9);  // same names, new bytes
  // Make sure the new version's time differs even on a coarse clock.
  struct timespec const times[2] = {{0, UTIME_NOW}, {12345, 678}};
  ASSERT_EQ(::utimensat(AT_FDCWD, p.c_str(), times, 0), 0);
  auto m = loader.load(p);
  EXPECT_FALSE(m.report().warm());
  expect_matches_file(m, p);
  EXPECT_EQ(c.stats().objects, objects);  // the old version's objects were erased
}

TEST(ModelLoaderFile, RemoteContentKeyTellsFineTunesWithEqualHeadersApart) {
  temp_dir d;
  std::string const a = (d.path / "a.safetensors").string(), b = (d.path / "b.safetensors").string(),
                    a2 = (d.path / "a2.safetensors").string();
  auto write = [](std::string const& path, std::uint64_t seed) {  // fixed shapes, seeded bytes
    std::mt19937_64 rng(seed);
    std::vector<std::byte> w(4000 * 4), bias(64);
    for (auto& x : w) { x = static_cast<std::byte>(rng()); }
    for (auto& x : bias) { x = static_cast<std::byte>(rng()); }
    std::vector<ccht::st_tensor_data> ts = {{"w", ccht::st_dtype::F32, {40, 100}, w},
                                            {"b", ccht::st_dtype::U8, {64}, bias}};
    ccht::write_safetensors(path, ts);
  };
  write(a, 1);
  write(b, 9);   // same names, shapes and offsets, other weights
  write(a2, 1);  // a's bytes again, another file
  auto const ha = ccht::read_safetensors(a), hb = ccht::read_safetensors(b);
  auto const size = std::filesystem::file_size(a);
  ASSERT_EQ(size, std::filesystem::file_size(b));
  EXPECT_EQ(ccht::content_key(ha, size), ccht::content_key(hb, size));  // headers alike
  EXPECT_NE(ccht::content_key(ha, size, a), ccht::content_key(hb, size, b));
  EXPECT_EQ(ccht::content_key(ha, size, a), ccht::content_key(ha, size, a2));  // same contents
  EXPECT_THROW(ccht::content_key(ha, size, (d.path / "missing").string()), ccht::error);
}

TEST(ModelLoaderFile, MalformedFileCachesNothing) {
  temp_dir d;
  std::string const p = (d.path / "bad.safetensors").string();
  {
    std::ofstream out(p, std::ios::binary);
    std::string const header = R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,12]}})";
    std::uint64_t n = header.size();
    out.write(reinterpret_cast<char const*>(&n), 8);
    out << header << std::string(12, 'x');
  }
  cache_t c(16 * page, page);
  ccht::model_loader<ccht::cpu_backend> loader(c);
  try {
    loader.load(p);
    ADD_FAILURE() << "a malformed file loaded";
  } catch (ccht::error const& e) {
    std::string const msg = e.what();
    EXPECT_NE(msg.find(p), std::string::npos) << msg;
    EXPECT_NE(msg.find("'w'"), std::string::npos) << msg;
  }
  EXPECT_EQ(c.stats().objects, 0u);
  EXPECT_EQ(c.stats().bytes_resident, 0u);
  EXPECT_THROW(loader.load((d.path / "absent").string()), ccht::error);
}

TEST(ModelLoaderFile, NoSpaceReleasesEverythingAndSaysWhy) {
  temp_dir d;
  std::string const p = (d.path / "m.safetensors").string();
  write_model(p, 6, 4000, 1);
  cache_t c(8 * page, page);
  key_type const k = 77;
  load_one(c, k, 6 * page);  // pinned by another holder
  ccht::model_loader<ccht::cpu_backend> loader(c, {.layout = ccht::model_layout::packed});
  try {
    loader.load(p);
    ADD_FAILURE() << "loaded into a pinned budget";
  } catch (ccht::error const& e) {
    EXPECT_EQ(e.code(), ccht::error_code::out_of_memory);
  }
  EXPECT_EQ(c.stats().pages_pinned, 6u);
  c.release({&k, 1});
}

}  // namespace

// ---- many threads --------------------------------------------------------------------------------

namespace {

// Threads acquire, fill, check and release shared objects; fillers write garbage first and the
// pattern after, so a reader that got an object before its publish sees wrong bytes. At the end,
// resident pages equal pages filled minus evicted minus abandoned: exact accounting.
TEST(Concurrency, WeightCachePinSafetyAndAccounting) {
  constexpr std::size_t pages = 32;
  cache_t c(pages * page, page, {.cpu_threads = 1});
  int const threads = 6;
  int const ops = 1500 / ccht_test::work_scale;
  std::atomic<std::size_t> bad{0}, abandoned_pages{0}, hits{0}, fills{0};
  auto work = [&](int t) {
    std::mt19937_64 rng(100 + t);
    for (int op = 0; op < ops; ++op) {
      key_type const k = 1 + rng() % 24;
      std::size_t const bytes = (k % 5 + 1) * page - (k * 97) % page;
      object_lease l = acquire_one(c, k, bytes);
      if (l.status == object_status::pending) {
        c.wait_ready({&k, 1}, std::chrono::seconds(10));
        continue;
      }
      if (l.status == object_status::no_space) { continue; }
      if (l.status == object_status::fill) {
        for (auto i : l.fill_pages) {
          std::memset(l.data + i * page, 0xEE, std::min(page, bytes - i * page));
        }
        if (rng() % 10 == 0) {
          abandoned_pages += l.fill_pages.size();
          c.abandon({&k, 1});
          continue;
        }
        write_pages(l, k, page);
        c.publish({&k, 1});
        ++fills;
      } else {
        ++hits;
      }
      bad += wrong_bytes(l.data, k, bytes);
      std::this_thread::yield();
      bad += wrong_bytes(l.data, k, bytes);
      c.release({&k, 1});
    }
  };
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) { pool.emplace_back(work, t); }
  for (auto& th : pool) { th.join(); }
  auto const s = c.stats();
  EXPECT_EQ(bad.load(), 0u);
  EXPECT_GT(hits.load(), 0u);
  EXPECT_GT(fills.load(), 0u);
  EXPECT_EQ(s.pages_pinned, 0u);
  EXPECT_EQ(s.objects_filling, 0u);
  EXPECT_LE(s.bytes_resident, c.budget_bytes());
  EXPECT_EQ(s.bytes_resident / page, s.pages_filled - s.pages_evicted - abandoned_pages.load());
}

TEST(Concurrency, ModelLoaderManyThreadsReadTheModelOnce) {
  temp_dir d;
  std::string const p = (d.path / "m.safetensors").string();
  write_model(p, 16, 4000, 3);
  cache_t c(256 * page, page);
  ccht::model_loader<ccht::cpu_backend> loader(c);
  int const threads = 8;
  std::vector<ccht::load_report> reports(threads);
  std::atomic<int> mismatches{0};
  auto const bytes = file_bytes(p);
  auto const h = ccht::read_safetensors(p);
  auto work = [&](int t) {
    auto m = loader.load(p);
    reports[t] = m.report();
    for (auto const& ti : h.tensors) {
      auto const* mt = m.find(ti.name);
      if (mt == nullptr || (ti.bytes() && std::memcmp(mt->data, bytes.data() + h.data_offset + ti.begin, ti.bytes()))) {
        ++mismatches;
      }
    }
  };
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) { pool.emplace_back(work, t); }
  for (auto& th : pool) { th.join(); }
  std::uint64_t read = 0;
  for (auto const& r : reports) { read += r.bytes_read; }
  EXPECT_EQ(mismatches.load(), 0);
  EXPECT_EQ(read, h.data_bytes);  // every byte read once, whoever read it
  EXPECT_EQ(c.stats().pages_pinned, 0u);
}

}  // namespace
