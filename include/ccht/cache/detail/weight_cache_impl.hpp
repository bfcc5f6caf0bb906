// ccht::weight_cache (cache/weight_cache.hpp): the object table, its mapping logic and the page
// batches, on both backends. Metadata (records, page owners, mappings) is guarded by one mutex;
// the page index's batches run outside it where they can (acquire), so concurrent hits of
// resident objects overlap. Mapping calls run under it (the kernel serialises them anyway).
#pragma once

#include <ccht/error.hpp>

#include <algorithm>
#include <string>
#include <thread>
#include <type_traits>
#include <unordered_set>

namespace ccht {

template <class Backend, class Events>
struct weight_cache<Backend, Events>::record {
  key_type key = 0;
  std::size_t bytes = 0;
  std::uint32_t pages = 0;
  std::byte* range = nullptr;
  std::vector<page_id> mapped;       ///< page mapped at each index, or no_page
  std::uint32_t mapped_count = 0;    ///< indices whose page is mapped (not no_page)
  std::uint32_t pins = 0;            ///< holders (each holds one pin on every page)
  std::uint32_t busy = 0;            ///< acquires between their two critical sections
  bool loading = false;              ///< a filler holds it
  std::vector<std::uint32_t> fill;   ///< the filler's page indices
  /// Releases whose stream work may still read the pages: waited for before an unmap.
  std::vector<fence*> fences;
};

/// One release(keys, stream)'s event, shared by the objects of its batch.
template <class Backend, class Events>
struct weight_cache<Backend, Events>::fence {
  event_type event{};
  std::uint32_t users = 0;  ///< records that name it
  bool done = false;        ///< its work is done and its event given back
};

namespace detail {

/// Backend memory for a page batch: host vectors on the CPU, device copies on CUDA.
template <class Backend, class T>
class staged {
 public:
  explicit staged(std::span<T> host) : host_(host) {
    if constexpr (!std::is_same_v<Backend, cpu_backend>) {
      dev_ = static_cast<mutable_t*>(
          Backend::allocate(host.size_bytes() == 0 ? sizeof(T) : host.size_bytes()));
      Backend::copy_from_host(dev_, host.data(), host.size_bytes());
    }
  }
  ~staged() {
    if constexpr (!std::is_same_v<Backend, cpu_backend>) { Backend::deallocate(dev_); }
  }
  staged(staged const&) = delete;
  staged& operator=(staged const&) = delete;
  std::span<T> span() const {
    if constexpr (std::is_same_v<Backend, cpu_backend>) {
      return host_;
    } else {
      return {dev_, host_.size()};
    }
  }
  void to_host() {
    if constexpr (!std::is_same_v<Backend, cpu_backend> && !std::is_const_v<T>) {
      Backend::copy_to_host(host_.data(), dev_, host_.size_bytes());
    }
  }

 private:
  using mutable_t = std::remove_const_t<T>;
  std::span<T> host_;
  mutable_t* dev_ = nullptr;
};

}  // namespace detail

template <class Backend, class Events>
weight_cache<Backend, Events>::weight_cache(std::size_t budget_bytes, std::size_t page_bytes,
                                            weight_cache_options options)
    : pages_(budget_bytes, page_bytes,
             page_cache_options{.table_ratio = options.table_ratio,
                                .seed = options.seed,
                                .cpu_threads = options.cpu_threads,
                                .pool = pool_options{.memory = pool_memory::mappable,
                                                     .huge = options.huge}}),
      owners_(pages_.num_pages()) {
  counts_.budget_bytes = this->budget_bytes();
  counts_.page_bytes = page_bytes;
  counts_.huge_pages = pages_.pool().huge_pages_used();
}

template <class Backend, class Events>
weight_cache<Backend, Events>::~weight_cache() {
  std::lock_guard lock(mu_);
  for (auto& [k, r] : objects_) {
    // Work enqueued before a release may still read the pages: wait for it first. The CPU's
    // munmap of a whole range takes its mappings with it; CUDA must unmap first. A destructor
    // never throws: a failed wait or unmap leaves that range to the process's end.
    try {
      if (!r->fences.empty()) { wait_fences_locked(*r); }
      if constexpr (!std::is_same_v<Backend, cpu_backend>) { unmap_locked(*r, 0, r->pages); }
    } catch (...) {
      drop_fences_locked(*r);
      continue;
    }
    pages_.pool().free_range(r->range, r->pages);
  }
  while (!pending_fences_.empty()) { fence_done_locked(pending_fences_.back()); }
}

template <class Backend, class Events>
void weight_cache<Backend, Events>::forget_if_idle_locked(record* r) {
  if (r == nullptr || r->pins != 0 || r->busy != 0 || r->loading || r->mapped_count != 0) {
    return;
  }
  // No owner entry names r (unmapping cleared them), so nothing refers to it any more.
  drop_fences_locked(*r);  // none left in practice: the unmaps waited for them
  pages_.pool().free_range(r->range, r->pages);
  objects_.erase(r->key);
}

template <class Backend, class Events>
auto weight_cache<Backend, Events>::find_locked(key_type key) const -> record* {
  auto it = objects_.find(key);
  return it == objects_.end() ? nullptr : it->second.get();
}

template <class Backend, class Events>
void weight_cache<Backend, Events>::keys_of(record const& r, std::span<std::uint32_t const> indices,
                                            std::vector<key_type>& out) const {
  for (std::uint32_t i : indices) { out.push_back(object_page_key(r.key, i)); }
}

template <class Backend, class Events>
std::size_t weight_cache<Backend, Events>::page_acquire(std::span<key_type const> keys,
                                                        std::span<page_id> pages,
                                                        std::span<page_status> status,
                                                        std::vector<page_id>& evicted) {
  evicted.clear();
  if (keys.empty()) { return 0; }
  // Pin what is resident first (lookup), then insert the rest: one batch that inserted a partly
  // evicted object's missing pages first would evict its own resident pages (the oldest) and
  // refill them.
  {
    detail::staged<Backend, key_type const> k(keys);
    detail::staged<Backend, page_id> p(pages);
    detail::staged<Backend, page_status> s(status);
    pages_.lookup(k.span(), p.span(), s.span());
    p.to_host();
    s.to_host();
  }
  std::vector<key_type> miss_keys;
  std::vector<std::size_t> miss_at;
  for (std::size_t i = 0; i < keys.size(); ++i) {
    if (status[i] == page_status::miss) {
      miss_keys.push_back(keys[i]);
      miss_at.push_back(i);
    }
  }
  if (miss_keys.empty()) { return 0; }
  std::size_t const m = miss_keys.size();
  std::vector<page_id> mp(m, no_page);
  std::vector<page_status> ms(m, page_status::no_space);
  std::vector<key_type> ev_keys(m);
  evicted.assign(m, no_page);
  detail::staged<Backend, key_type const> k{std::span<key_type const>(miss_keys)};
  detail::staged<Backend, page_id> p{std::span<page_id>(mp)};
  detail::staged<Backend, page_status> s{std::span<page_status>(ms)};
  detail::staged<Backend, key_type> ek{std::span<key_type>(ev_keys)};
  detail::staged<Backend, page_id> ep{std::span<page_id>(evicted)};
  std::size_t const n = pages_.acquire(k.span(), p.span(), s.span(), ek.span(), ep.span());
  p.to_host();
  s.to_host();
  ep.to_host();
  evicted.resize(n);
  for (std::size_t j = 0; j < m; ++j) {
    pages[miss_at[j]] = mp[j];
    status[miss_at[j]] = ms[j];
  }
  return n;
}

template <class Backend, class Events>
void weight_cache<Backend, Events>::page_op(detail::page_op op, std::span<key_type const> keys,
                                            std::span<page_result> results) {
  if (keys.empty()) { return; }
  results = results.first(keys.size());
  detail::staged<Backend, key_type const> k(keys);
  detail::staged<Backend, page_result> r(results);
  switch (op) {
    case detail::page_op::publish: pages_.publish_async(k.span(), r.span()); break;
    case detail::page_op::abandon: pages_.abandon_async(k.span(), r.span()); break;
    case detail::page_op::release_key: pages_.release_async(k.span(), r.span()); break;
    case detail::page_op::erase: pages_.erase_async(k.span(), r.span(), nullptr); break;
    default: throw error(error_code::invalid_argument, "weight_cache: unexpected page op");
  }
  Backend::synchronize();
  r.to_host();
}

template <class Backend, class Events>
void weight_cache<Backend, Events>::unmap_locked(record& r, std::uint32_t first,
                                                 std::uint32_t count) {
  std::uint32_t i = first;
  std::uint32_t const end = first + count;
  while (i < end) {
    if (r.mapped[i] == no_page) {
      ++i;
      continue;
    }
    // A kernel enqueued before one of the object's releases may still read these pages.
    if (!r.fences.empty()) { wait_fences_locked(r); }
    std::uint32_t j = i;
    while (j < end && r.mapped[j] != no_page) {
      owner& o = owners_[r.mapped[j]];
      if (o.rec == &r && o.index == j) { o = owner{}; }
      r.mapped[j] = no_page;
      --r.mapped_count;
      ++j;
    }
    pages_.pool().unmap_pages(r.range + std::size_t{i} * page_bytes(), j - i);
    i = j;
  }
}

template <class Backend, class Events>
void weight_cache<Backend, Events>::evicted_locked(std::span<page_id const> victims) {
  // Each victim page is now held (filling) by this caller's acquire, so it cannot move again
  // before this runs: the owner entry still names the object it was evicted from.
  for (page_id p : victims) {
    if (p == no_page || p >= owners_.size()) { continue; }
    owner const o = owners_[p];
    owners_[p] = owner{};
    ++counts_.pages_evicted;
    if (o.rec != nullptr && o.rec->mapped[o.index] == p) {
      unmap_locked(*o.rec, o.index, 1);
      forget_if_idle_locked(o.rec);
    }
  }
}

template <class Backend, class Events>
void weight_cache<Backend, Events>::map_locked(record& r, std::span<page_id const> pages,
                                               std::span<page_status const> status) {
  // Pages to fill are mapped writable (always anew), published pages read-only.
  auto const fill = [&](std::uint32_t k) { return status[k] == page_status::fill; };
  auto const needs_map = [&](std::uint32_t k) { return fill(k) || r.mapped[k] != pages[k]; };
  std::uint32_t i = 0;
  while (i < r.pages) {
    if (!needs_map(i)) {
      ++i;
      continue;
    }
    // A run of indices that need mapping, hold consecutive page ids and share an access: one call.
    std::uint32_t j = i + 1;
    while (j < r.pages && needs_map(j) && pages[j] == pages[j - 1] + 1 && fill(j) == fill(i)) {
      ++j;
    }
    unmap_locked(r, i, j - i);
    for (std::uint32_t k = i; k < j; ++k) {
      owner const o = owners_[pages[k]];
      if (o.rec != nullptr && o.rec->mapped[o.index] == pages[k]) {  // defensive: never twice
        unmap_locked(*o.rec, o.index, 1);
        if (o.rec != &r) { forget_if_idle_locked(o.rec); }
      }
    }
    pages_.pool().map_pages(r.range + std::size_t{i} * page_bytes(), pages[i], j - i,
                            fill(i) ? page_access::read_write : page_access::read_only);
    for (std::uint32_t k = i; k < j; ++k) {
      r.mapped[k] = pages[k];
      ++r.mapped_count;
      owners_[pages[k]] = owner{&r, k};
    }
    i = j;
  }
}

template <class Backend, class Events>
void weight_cache<Backend, Events>::take_locked(std::span<object_request const> requests,
                                                std::span<object_lease> leases,
                                                std::vector<record*>& recs) {
  for (auto const& q : requests) {
    if (record const* r = find_locked(q.key); r != nullptr && r->bytes != q.bytes) {
      throw error(error_code::invalid_argument,
                  "weight_cache::acquire: object " + std::to_string(q.key) + " is " +
                      std::to_string(r->bytes) + " bytes, not " + std::to_string(q.bytes));
    }
  }
  std::size_t e = 0;
  try {
    for (; e < requests.size(); ++e) {
      auto const& q = requests[e];
      leases[e] = object_lease{.status = object_status::pending, .data = nullptr, .bytes = q.bytes, .fill_pages = {}};
      record* r = find_locked(q.key);
      if (r == nullptr) {
        auto fresh = std::make_unique<record>();
        fresh->key = q.key;
        fresh->bytes = q.bytes;
        fresh->pages = static_cast<std::uint32_t>(pages_for(q.bytes));
        fresh->mapped.assign(fresh->pages, no_page);
        fresh->range = pages_.pool().reserve_range(fresh->pages);
        r = fresh.get();
        objects_.emplace(q.key, std::move(fresh));
      }
      if (r->loading) {
        ++counts_.pending;
        continue;
      }
      ++r->busy;
      recs[e] = r;
    }
  } catch (...) {  // e.g. no address space left: give back what the batch took so far
    for (std::size_t k = 0; k < e; ++k) {
      if (recs[k] != nullptr) {
        --recs[k]->busy;
        forget_if_idle_locked(recs[k]);
        recs[k] = nullptr;
      }
    }
    throw;
  }
}

template <class Backend, class Events>
void weight_cache<Backend, Events>::acquire(std::span<object_request const> requests,
                                            std::span<object_lease> leases) {
  if (leases.size() < requests.size()) {
    throw error(error_code::invalid_size, "weight_cache::acquire: " + std::to_string(leases.size()) +
                                              " leases for " + std::to_string(requests.size()) +
                                              " requests");
  }
  {
    std::unordered_set<key_type> seen;
    for (auto const& q : requests) {
      if (q.bytes == 0) {
        throw error(error_code::invalid_size,
                    "weight_cache::acquire: object " + std::to_string(q.key) + " has 0 bytes");
      }
      if (pages_for(q.bytes) > num_pages()) {
        throw error(error_code::invalid_size,
                    "weight_cache::acquire: object " + std::to_string(q.key) + " of " +
                        std::to_string(q.bytes) + " bytes needs " +
                        std::to_string(pages_for(q.bytes)) + " pages; the budget holds " +
                        std::to_string(num_pages()));
      }
      if (!seen.insert(q.key).second) {
        throw error(error_code::invalid_argument, "weight_cache::acquire: object " +
                                                      std::to_string(q.key) +
                                                      " appears twice in the batch");
      }
    }
  }
  std::vector<record*> recs(requests.size(), nullptr);
  {
    std::lock_guard lock(mu_);
    take_locked(requests, leases, recs);
  }

  // One page batch for every object taken.
  std::vector<std::size_t> first(requests.size() + 1, 0);
  std::vector<key_type> keys;
  for (std::size_t e = 0; e < requests.size(); ++e) {
    first[e] = keys.size();
    if (recs[e] == nullptr) { continue; }
    for (std::uint32_t i = 0; i < recs[e]->pages; ++i) { keys.push_back(object_page_key(requests[e].key, i)); }
  }
  first[requests.size()] = keys.size();
  std::vector<page_id> pages(keys.size(), no_page);
  std::vector<page_status> status(keys.size(), page_status::no_space);
  std::vector<page_id> evicted;
  try {
    page_acquire(keys, pages, status, evicted);
  } catch (...) {
    std::lock_guard lock(mu_);
    for (record* r : recs) {
      if (r != nullptr) {
        --r->busy;
        forget_if_idle_locked(r);
      }
    }
    throw;
  }

  // Decide per object; undo what a refused object took (after the lock, as page batches).
  std::vector<key_type> to_abandon, to_release;
  struct retry_item {
    std::size_t element;
    std::vector<std::uint32_t> indices;
  };
  std::vector<retry_item> retries;
  auto undo = [&](std::size_t e) {
    for (std::size_t k = first[e]; k < first[e + 1]; ++k) {
      if (status[k] == page_status::fill) { to_abandon.push_back(keys[k]); }
      if (status[k] == page_status::hit) { to_release.push_back(keys[k]); }
    }
  };
  auto finish_fill = [&](std::size_t e) {  // under the lock: map, pin, hand out
    record& r = *recs[e];
    map_locked(r, std::span<page_id const>(pages.data() + first[e], r.pages),
               std::span<page_status const>(status.data() + first[e], r.pages));
    r.fill.clear();
    for (std::uint32_t i = 0; i < r.pages; ++i) {
      if (status[first[e] + i] == page_status::fill) { r.fill.push_back(i); }
    }
    ++r.pins;
    --r.busy;
    ++counts_.fills;
    counts_.pages_filled += r.fill.size();
    counts_.pages_kept += r.pages - r.fill.size();
    leases[e].status = object_status::fill;
    leases[e].data = r.range;
    leases[e].fill_pages = r.fill;
  };
  {
    std::lock_guard lock(mu_);
    evicted_locked(evicted);
    for (std::size_t e = 0; e < requests.size(); ++e) {
      record* r = recs[e];
      if (r == nullptr) { continue; }
      std::size_t fills = 0, pend = 0, nospace = 0;
      for (std::size_t k = first[e]; k < first[e + 1]; ++k) {
        fills += status[k] == page_status::fill;
        pend += status[k] == page_status::pending;
        nospace += status[k] == page_status::no_space;
      }
      if (fills == 0 && pend == 0 && nospace == 0) {
        map_locked(*r, std::span<page_id const>(pages.data() + first[e], r->pages),
                   std::span<page_status const>(status.data() + first[e], r->pages));
        ++r->pins;
        --r->busy;
        ++counts_.hits;
        leases[e].status = object_status::hit;
        leases[e].data = r->range;
      } else if (nospace != 0 || r->loading || fills == 0) {
        // fills == 0 with pages pending: their filler has published since (it could not have
        // finished while this caller held any fill of the object), so take nothing and let the
        // caller retry, which hits; becoming the filler here would make a fill of nothing.
        undo(e);
        --r->busy;
        recs[e] = nullptr;
        forget_if_idle_locked(r);
        if (nospace != 0) {
          ++counts_.no_space;
          leases[e].status = object_status::no_space;
        } else {
          ++counts_.pending;
        }
      } else {
        r->loading = true;  // this caller is the object's filler
        if (pend == 0) {
          finish_fill(e);
        } else {
          retry_item it{e, {}};
          for (std::uint32_t i = 0; i < r->pages; ++i) {
            if (status[first[e] + i] == page_status::pending) { it.indices.push_back(i); }
          }
          retries.push_back(std::move(it));
        }
      }
    }
  }
  std::vector<page_result> res(std::max(to_abandon.size(), to_release.size()));
  page_op(detail::page_op::abandon, to_abandon, res);
  page_op(detail::page_op::release_key, to_release, res);

  // Pages another acquire of the same object took before it lost the race to become its filler:
  // that acquire abandons them at once, so a few retries settle them.
  auto const deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!retries.empty()) {
    std::this_thread::yield();
    std::vector<key_type> rk;
    for (auto const& it : retries) { keys_of(*recs[it.element], it.indices, rk); }
    std::vector<page_id> rp(rk.size(), no_page);
    std::vector<page_status> rs(rk.size(), page_status::no_space);
    page_acquire(rk, rp, rs, evicted);
    bool const late = std::chrono::steady_clock::now() > deadline;
    std::vector<retry_item> next;
    to_abandon.clear();
    to_release.clear();
    {
      std::lock_guard lock(mu_);
      evicted_locked(evicted);
      std::size_t at = 0;
      for (auto& it : retries) {
        std::size_t const e = it.element;
        retry_item again{e, {}};
        bool refused = false;
        for (std::uint32_t i : it.indices) {
          std::size_t const k = first[e] + i;
          pages[k] = rp[at];
          status[k] = rs[at];
          ++at;
          if (status[k] == page_status::pending) { again.indices.push_back(i); }
          if (status[k] == page_status::no_space) { refused = true; }
        }
        if (refused || (late && !again.indices.empty())) {
          undo(e);
          record& r = *recs[e];
          r.loading = false;
          --r.busy;
          forget_if_idle_locked(&r);
          ++counts_.no_space;
          leases[e].status = object_status::no_space;
          ready_.notify_all();
        } else if (again.indices.empty()) {
          finish_fill(e);
        } else {
          next.push_back(std::move(again));
        }
      }
    }
    res.resize(std::max(to_abandon.size(), to_release.size()));
    page_op(detail::page_op::abandon, to_abandon, res);
    page_op(detail::page_op::release_key, to_release, res);
    retries = std::move(next);
  }
}

template <class Backend, class Events>
void weight_cache<Backend, Events>::protect_fill_locked(record const& r) {
  std::size_t i = 0;
  while (i < r.fill.size()) {  // r.fill is ascending: runs of consecutive indices, one call each
    std::size_t j = i + 1;
    while (j < r.fill.size() && r.fill[j] == r.fill[j - 1] + 1) { ++j; }
    pages_.pool().protect_read_only(r.range + std::size_t{r.fill[i]} * page_bytes(), j - i);
    i = j;
  }
}

template <class Backend, class Events>
void weight_cache<Backend, Events>::publish(std::span<key_type const> keys) {
  std::lock_guard lock(mu_);
  std::vector<record*> recs;
  std::unordered_set<record const*> seen;
  for (key_type k : keys) {
    record* r = find_locked(k);
    if (r == nullptr || !r->loading) {
      throw error(error_code::invalid_argument, "weight_cache::publish: object " +
                                                    std::to_string(k) + " is not being filled");
    }
    if (!seen.insert(r).second) {
      throw error(error_code::invalid_argument, "weight_cache::publish: object " +
                                                    std::to_string(k) + " appears twice in the batch");
    }
    recs.push_back(r);
  }
  std::vector<key_type> pk;
  for (record* r : recs) { keys_of(*r, r->fill, pk); }
  // Read-only first: if protecting fails, nothing is published yet and the fill can be abandoned.
  for (record* r : recs) { protect_fill_locked(*r); }
  std::vector<page_result> res(pk.size());
  page_op(detail::page_op::publish, pk, res);
  for (record* r : recs) {
    r->loading = false;
    r->fill.clear();
    ++counts_.publishes;
  }
  ready_.notify_all();
}

template <class Backend, class Events>
void weight_cache<Backend, Events>::abandon(std::span<key_type const> keys) {
  std::lock_guard lock(mu_);
  std::vector<record*> recs;
  std::unordered_set<record const*> seen;
  for (key_type k : keys) {
    record* r = find_locked(k);
    if (r == nullptr || !r->loading) {
      throw error(error_code::invalid_argument, "weight_cache::abandon: object " +
                                                    std::to_string(k) + " is not being filled");
    }
    if (!seen.insert(r).second) {
      throw error(error_code::invalid_argument, "weight_cache::abandon: object " +
                                                    std::to_string(k) + " appears twice in the batch");
    }
    recs.push_back(r);
  }
  std::vector<key_type> ab, rel;
  for (record* r : recs) {
    std::vector<bool> filled(r->pages, false);
    for (std::uint32_t i : r->fill) {
      filled[i] = true;
      unmap_locked(*r, i, 1);  // the page goes back to the pool: no stale view of it
    }
    for (std::uint32_t i = 0; i < r->pages; ++i) {
      (filled[i] ? ab : rel).push_back(object_page_key(r->key, i));
    }
  }
  std::vector<page_result> res(std::max(ab.size(), rel.size()));
  page_op(detail::page_op::abandon, ab, res);
  page_op(detail::page_op::release_key, rel, res);
  for (record* r : recs) {
    r->loading = false;
    r->fill.clear();
    --r->pins;
    ++counts_.abandons;
    forget_if_idle_locked(r);
  }
  ready_.notify_all();
}

template <class Backend, class Events>
auto weight_cache<Backend, Events>::record_fence_locked(stream_type stream) -> fence* {
  if (spare_fences_.empty()) {  // made before the event, so a failure here leaks no event
    fences_.push_back(std::make_unique<fence>());
    spare_fences_.reserve(fences_.size());  // so drop_fence_locked never allocates
    spare_fences_.push_back(fences_.back().get());
  }
  pending_fences_.reserve(pending_fences_.size() + 1);
  event_type e = Events::record_event(stream);
  bool done = false;
  try {
    done = Events::event_done(e);
  } catch (...) {
    Events::free_event(e);
    throw;
  }
  if (done) {  // nothing of the caller's is still running: nothing to keep
    Events::free_event(e);
    return nullptr;
  }
  fence* f = spare_fences_.back();
  spare_fences_.pop_back();
  *f = fence{.event = e, .users = 0, .done = false};
  pending_fences_.push_back(f);
  return f;
}

template <class Backend, class Events>
void weight_cache<Backend, Events>::fence_done_locked(fence* f) noexcept {
  f->done = true;
  Events::free_event(f->event);
  auto it = std::find(pending_fences_.begin(), pending_fences_.end(), f);
  if (it != pending_fences_.end()) {
    *it = pending_fences_.back();
    pending_fences_.pop_back();
  }
}

template <class Backend, class Events>
void weight_cache<Backend, Events>::poll_fences_locked() {
  // Give back the events whose work is done, so objects that are never evicted keep none alive.
  for (std::size_t i = 0; i < pending_fences_.size();) {
    fence* f = pending_fences_[i];
    if (Events::event_done(f->event)) {
      fence_done_locked(f);  // swaps the last pending fence into i
    } else {
      ++i;
    }
  }
}

template <class Backend, class Events>
void weight_cache<Backend, Events>::drop_fence_locked(fence* f) noexcept {
  if (--f->users != 0) { return; }
  if (!f->done) { fence_done_locked(f); }  // no object left to protect (the cache goes)
  spare_fences_.push_back(f);  // cannot throw: it has room for every fence made
}

template <class Backend, class Events>
void weight_cache<Backend, Events>::drop_fences_locked(record& r) noexcept {
  for (fence* f : r.fences) { drop_fence_locked(f); }
  r.fences.clear();
}

template <class Backend, class Events>
void weight_cache<Backend, Events>::wait_fences_locked(record& r) {
  bool waited = false;
  for (fence* f : r.fences) {
    if (f->done) { continue; }
    if (!Events::event_done(f->event)) {  // a query first: most work has long finished
      Events::wait_event(f->event);       // throws before anything is unmapped
      waited = true;
    }
    fence_done_locked(f);
  }
  counts_.release_waits += waited;
  drop_fences_locked(r);
}

template <class Backend, class Events>
void weight_cache<Backend, Events>::release(std::span<key_type const> keys) {
  release_impl(keys, nullptr);
}

template <class Backend, class Events>
void weight_cache<Backend, Events>::release(std::span<key_type const> keys, stream_type stream) {
  release_impl(keys, &stream);
}

template <class Backend, class Events>
void weight_cache<Backend, Events>::release_impl(std::span<key_type const> keys,
                                                 stream_type const* stream) {
  std::lock_guard lock(mu_);
  std::vector<record*> recs;
  std::unordered_map<key_type, std::uint32_t> times;
  for (key_type k : keys) {
    record* r = find_locked(k);
    std::string why;
    if (r == nullptr) {
      why = "is not in the cache";
    } else if (r->loading) {
      why = "is still being filled: publish or abandon it first";
    } else if (++times[k] > r->pins) {
      why = "holds no pin to release";
    }
    if (!why.empty()) {
      std::string msg = "weight_cache::release: object ";
      msg += std::to_string(k);
      msg += ' ';
      msg += why;
      throw error(error_code::invalid_argument, msg);
    }
    recs.push_back(r);
  }
  // The event goes on the objects before their pages can be evicted: another acquire evicts in
  // its page batch, outside the lock, but unmaps (and hands the page on) only under it.
  if (stream != nullptr && !recs.empty()) {
    poll_fences_locked();
    if (fence* f = record_fence_locked(*stream)) {
      for (record* r : recs) {
        std::erase_if(r->fences, [&](fence* g) {
          if (!g->done) { return false; }
          drop_fence_locked(g);
          return true;
        });
        if (!r->fences.empty() && r->fences.back() == f) { continue; }  // a key given twice
        r->fences.push_back(f);
        ++f->users;
      }
    }
  }
  std::vector<key_type> pk;
  for (record* r : recs) {
    for (std::uint32_t i = 0; i < r->pages; ++i) { pk.push_back(object_page_key(r->key, i)); }
  }
  std::vector<page_result> res(pk.size());
  page_op(detail::page_op::release_key, pk, res);
  for (record* r : recs) {
    --r->pins;
    ++counts_.releases;
  }
}

template <class Backend, class Events>
std::size_t weight_cache<Backend, Events>::erase(std::span<key_type const> keys,
                                                 std::span<page_result> results) {
  if (!results.empty() && results.size() < keys.size()) {
    throw error(error_code::invalid_size, "weight_cache::erase: " + std::to_string(results.size()) +
                                              " results for " + std::to_string(keys.size()) +
                                              " keys");
  }
  std::lock_guard lock(mu_);
  std::size_t erased = 0;
  for (std::size_t e = 0; e < keys.size(); ++e) {
    record* r = find_locked(keys[e]);
    page_result out = page_result::ok;
    if (r == nullptr) {
      out = page_result::unknown_key;
    } else if (r->loading) {
      out = page_result::filling;
    } else if (r->pins != 0 || r->busy != 0) {
      out = page_result::pinned;
    } else {
      std::vector<key_type> pk;
      for (std::uint32_t i = 0; i < r->pages; ++i) { pk.push_back(object_page_key(r->key, i)); }
      unmap_locked(*r, 0, r->pages);  // before the pages are freed
      std::vector<page_result> res(pk.size());
      page_op(detail::page_op::erase, pk, res);
      pages_.pool().free_range(r->range, r->pages);
      objects_.erase(keys[e]);
      ++erased;
      ++counts_.erases;
    }
    if (!results.empty()) { results[e] = out; }
  }
  return erased;
}

template <class Backend, class Events>
bool weight_cache<Backend, Events>::wait_ready(std::span<key_type const> keys,
                                               std::chrono::milliseconds timeout) {
  auto const ready = [&] {
    for (key_type k : keys) {
      if (record const* r = find_locked(k); r != nullptr && r->loading) { return false; }
    }
    return true;
  };
  std::unique_lock lock(mu_);
  // now() + a timeout near milliseconds::max() overflows into the past: treat it as no limit.
  if (timeout >= std::chrono::hours(24 * 365 * 100)) {
    ready_.wait(lock, ready);
    return true;
  }
  return ready_.wait_for(lock, timeout, ready);
}

template <class Backend, class Events>
weight_cache_stats weight_cache<Backend, Events>::stats() const {
  page_cache_stats const ps = pages_.stats();
  std::lock_guard lock(mu_);
  weight_cache_stats s = counts_;
  s.objects = objects_.size();
  s.objects_pinned = 0;
  s.objects_filling = 0;
  for (auto const& [k, r] : objects_) {
    s.objects_pinned += r->pins != 0;
    s.objects_filling += r->loading;
  }
  s.bytes_resident = ps.bytes_resident;
  s.pages_pinned = ps.pages_pinned;
  return s;
}

}  // namespace ccht
