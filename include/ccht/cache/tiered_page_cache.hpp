/**
 * @file tiered_page_cache.hpp
 * @brief ccht::tiered_page_cache: a page cache over a larger host-memory page cache, built by
 *        composition. Pages the upper tier evicts are copied down; an upper miss that the lower
 *        tier holds is filled from it. On CUDA the upper tier is device memory and the copies
 *        are issued on the call's stream; on the CPU both tiers are host memory.
 *
 * One acquire():
 *  1. acquire on the upper tier;
 *  2. every upper victim (key, page) is spilled: acquired on the lower tier, its bytes copied
 *     down while the upper page still holds them, published and released there (a victim the
 *     lower tier already holds is only released; one it cannot take, because its pages are all
 *     pinned, is dropped and counted in spill_failures);
 *  3. every upper fill whose key the lower tier holds is copied up, published on the upper tier
 *     and reported as a hit (`from_lower`); the others stay fills for the caller.
 * Steps 2 and 3 finish before acquire() returns, so the caller's own fills cannot overwrite a
 * victim's bytes before they are copied. A key may then sit in both tiers; pages are immutable
 * once published, so both copies agree.
 *
 * **A remote tier** (attach_remote(): a ccht::remote_store such as ccht::redis_tier, shared by
 * many nodes) sits under both: the host tier's victims are written to it before their pages are
 * reused (write-back through the store's bounded asynchronous queue; the bytes are copied at
 * once), and so are upper victims the host tier cannot take; a fill that neither local tier
 * holds is looked up there (4.) before it is left to the caller. With remote_write::through,
 * every published fill is also written at once, so other nodes see a page as soon as it exists.
 * A remote that is down, slow or returns a bad value only turns elements into fills (its
 * stats count why); nothing local is lost or blocked beyond the store's timeout.
 *  4. every fill left whose key the remote tier holds (header and checksum valid) is copied up,
 *     published and reported as a hit (`from_remote`).
 *
 * publish, abandon, release and lookup act on the upper tier only. Concurrent calls from several
 * threads are safe (each tier is), but a key being spilled by one call and filled from the lower
 * tier by another may be filled by the caller instead (the lower tier reports it pending).
 */
#pragma once

#include <ccht/backend.hpp>
#include <ccht/cache/page_cache.hpp>
#include <ccht/cache/remote_store.hpp>

#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>
#include <vector>

namespace ccht {

/// Counters of a tiered_page_cache beyond each tier's own page_cache_stats.
struct tier_stats {
  page_cache_stats upper;          ///< the upper tier's stats
  page_cache_stats lower;          ///< the host tier's stats
  std::uint64_t lower_hits = 0;    ///< upper misses filled from the lower tier
  std::uint64_t spills = 0;        ///< upper victims copied down
  std::uint64_t spill_failures = 0;  ///< upper victims the lower tier could not take
  std::uint64_t remote_hits = 0;     ///< fills served from the remote tier
  std::uint64_t remote_lookups = 0;  ///< fills looked up in the remote tier
  std::uint64_t remote_writes = 0;   ///< pages handed to the remote tier (queued)
  std::uint64_t remote_write_drops = 0;  ///< pages the remote tier's queue refused
  remote_stats remote;               ///< the remote store's own counters (zero when none)
};

/// When pages reach the remote tier (tiered_page_cache::attach_remote).
enum class remote_write : std::uint8_t {
  back = 0,     ///< when the host tier evicts them (or cannot take them)
  through = 1,  ///< also when they are published
};

/**
 * @brief Two page caches of one page size: @p Backend memory over host memory.
 * @tparam Backend backend of the upper tier (the lower tier is always ccht::cpu_backend)
 * @tparam Policy index policy of both tiers
 */
template <class Backend, class Policy = double_lru>
class tiered_page_cache {
 public:
  using upper_type = page_cache<Backend, Policy>;      ///< the upper tier
  using lower_type = page_cache<cpu_backend, Policy>;  ///< the host tier
  using stream_type = typename Backend::stream_type;   ///< stream of the upper tier

  /**
   * @brief Builds both tiers (see page_cache's constructor for the errors).
   * @param upper_bytes,lower_bytes pool sizes of the two tiers
   * @param page_bytes page size of both
   */
  tiered_page_cache(std::size_t upper_bytes, std::size_t lower_bytes, std::size_t page_bytes,
                    page_cache_options upper_options = {}, page_cache_options lower_options = {})
      : upper_(upper_bytes, page_bytes, upper_options),
        lower_(lower_bytes, page_bytes, lower_options) {}

  /// The upper tier.
  upper_type& upper() noexcept { return upper_; }
  /// The host tier.
  lower_type& lower() noexcept { return lower_; }

  /**
   * @brief Puts @p remote (not owned; it must outlive its use here) under both tiers, or none
   *        (nullptr). Attach before concurrent use.
   */
  void attach_remote(remote_store* remote, remote_write mode = remote_write::back) noexcept {
    remote_ = remote;
    write_ = mode;
  }
  /// The remote tier attached, or nullptr.
  remote_store* remote() const noexcept { return remote_; }

  /**
   * @brief page_cache::acquire on the upper tier, with spills and fills from the lower tier.
   * @param keys, pages_out, status_out as page_cache::acquire (backend memory)
   * @param from_lower per element, true where a fill was served from the lower tier (then the
   *        status is `hit`); host memory, may be empty
   * @param from_remote the same for the remote tier; may be empty
   * @return the number of elements served from the lower and remote tiers
   */
  std::size_t acquire(std::span<key_type const> keys, std::span<page_id> pages_out,
                      std::span<page_status> status_out, std::span<bool> from_lower = {},
                      std::span<bool> from_remote = {}, stream_type stream = {}) {
    std::size_t const n = keys.size();
    if (!from_lower.empty()) {
      detail::check_span(from_lower, n, "tiered_page_cache::acquire", "from_lower");
    }
    if (!from_remote.empty()) {
      detail::check_span(from_remote, n, "tiered_page_cache::acquire", "from_remote");
      std::fill(from_remote.begin(), from_remote.end(), false);
    }
    if (n == 0) { return 0; }
    buffer_of<key_type> ev_keys(n);  // the upper tier's victims, in its memory
    buffer_of<page_id> ev_pages(n);
    std::size_t const ne =
        upper_.acquire(keys, pages_out, status_out, std::span<key_type>(ev_keys.p, n),
                       std::span<page_id>(ev_pages.p, n), stream);
    // Host copies of what the orchestration reads (identity copies on the CPU backend).
    std::vector<key_type> hkeys(n);
    std::vector<page_status> hstatus(n);
    std::vector<page_id> hpages(n);
    Backend::copy_to_host(hkeys.data(), keys.data(), n * sizeof(key_type), stream);
    Backend::copy_to_host(hstatus.data(), status_out.data(), n * sizeof(page_status), stream);
    Backend::copy_to_host(hpages.data(), pages_out.data(), n * sizeof(page_id), stream);
    if (ne > 0) {
      std::vector<key_type> ek(ne);
      std::vector<page_id> ep(ne);
      Backend::copy_to_host(ek.data(), ev_keys.p, ne * sizeof(key_type), stream);
      Backend::copy_to_host(ep.data(), ev_pages.p, ne * sizeof(page_id), stream);
      spill(ek, ep, stream);
    }
    if (!from_lower.empty()) { std::fill(from_lower.begin(), from_lower.end(), false); }
    std::vector<std::size_t> fills;
    for (std::size_t i = 0; i < n; ++i) {
      if (hstatus[i] == page_status::fill) { fills.push_back(i); }
    }
    if (fills.empty()) { return 0; }
    std::size_t served = 0;
    std::vector<key_type> fk(fills.size());
    for (std::size_t j = 0; j < fills.size(); ++j) { fk[j] = hkeys[fills[j]]; }
    std::vector<page_id> lp(fills.size());
    std::vector<page_status> ls(fills.size());
    lower_.lookup(fk, lp, ls);
    std::vector<key_type> up_keys, low_keys;
    std::vector<std::size_t> still;  // fills neither local tier holds
    for (std::size_t j = 0; j < fills.size(); ++j) {
      if (ls[j] != page_status::hit) {
        still.push_back(fills[j]);
        continue;
      }
      std::size_t const i = fills[j];
      Backend::copy_from_host(upper_.page_data(hpages[i]), lower_.page_data(lp[j]),
                              upper_.page_bytes(), stream);
      up_keys.push_back(fk[j]);
      low_keys.push_back(fk[j]);
      hstatus[i] = page_status::hit;
      if (!from_lower.empty()) { from_lower[i] = true; }
    }
    if (!up_keys.empty()) {
      Backend::synchronize(stream);  // the copies are done before the pages are published
      publish_upper(up_keys, stream);
      lower_.release(low_keys);
      lower_hits_.fetch_add(up_keys.size(), std::memory_order_relaxed);
      served += up_keys.size();
    }
    if (remote_ != nullptr && !still.empty()) {
      served += fill_from_remote(still, hkeys, hpages, hstatus, from_remote, stream);
    }
    if (remote_ != nullptr && write_ == remote_write::through) {
      std::lock_guard lock(fills_mu_);
      for (std::size_t i = 0; i < n; ++i) {
        if (hstatus[i] == page_status::fill) { filling_[hkeys[i]] = hpages[i]; }
      }
    }
    if (served != 0) {
      Backend::copy_from_host(status_out.data(), hstatus.data(), n * sizeof(page_status), stream);
    }
    return served;
  }

  /// page_cache::publish on the upper tier (and, with remote_write::through, a remote write).
  void publish(std::span<key_type const> keys, stream_type stream = {}) {
    upper_.publish(keys, stream);
    if (remote_ != nullptr && write_ == remote_write::through) {
      std::vector<key_type> hk(keys.size());
      Backend::copy_to_host(hk.data(), keys.data(), keys.size() * sizeof(key_type), stream);
      std::vector<key_type> wk;
      std::vector<page_id> wp;
      {
        std::lock_guard lock(fills_mu_);
        for (key_type k : hk) {
          if (auto it = filling_.find(k); it != filling_.end()) {
            wk.push_back(k);
            wp.push_back(it->second);
            filling_.erase(it);
          }
        }
      }
      // The caller still pins these pages, so their bytes cannot change under the copy.
      write_remote(wk, [&](std::size_t j) { return upper_.page_data(wp[j]); }, !host_upper,
                   stream);
    }
  }
  /// page_cache::abandon on the upper tier.
  void abandon(std::span<key_type const> keys, stream_type stream = {}) {
    upper_.abandon(keys, stream);
    if (remote_ != nullptr && write_ == remote_write::through) {
      std::vector<key_type> hk(keys.size());
      Backend::copy_to_host(hk.data(), keys.data(), keys.size() * sizeof(key_type), stream);
      std::lock_guard lock(fills_mu_);
      for (key_type k : hk) { filling_.erase(k); }
    }
  }
  /// page_cache::release on the upper tier.
  void release(std::span<key_type const> keys, stream_type stream = {}) {
    upper_.release(keys, stream);
  }

  /// Both tiers' stats and the tier counters.
  tier_stats stats(stream_type stream = {}) const {
    tier_stats s;
    s.upper = upper_.stats(stream);
    s.lower = lower_.stats();
    s.lower_hits = lower_hits_.load(std::memory_order_relaxed);
    s.spills = spills_.load(std::memory_order_relaxed);
    s.spill_failures = spill_failures_.load(std::memory_order_relaxed);
    s.remote_hits = remote_hits_.load(std::memory_order_relaxed);
    s.remote_lookups = remote_lookups_.load(std::memory_order_relaxed);
    s.remote_writes = remote_writes_.load(std::memory_order_relaxed);
    s.remote_write_drops = remote_write_drops_.load(std::memory_order_relaxed);
    if (remote_ != nullptr) { s.remote = remote_->stats(); }
    return s;
  }

 private:
  /// Copies the upper victims (@p ek, @p ep: host copies) into the lower tier.
  void spill(std::vector<key_type> const& ek, std::vector<page_id> const& ep, stream_type stream) {
    std::size_t const m = ek.size();
    std::vector<page_id> lp(m);
    std::vector<page_status> ls(m);
    std::vector<key_type> lk(m);
    std::vector<page_id> lep(m);
    std::size_t const le = lower_.acquire(ek, lp, ls, lk, lep);
    if (remote_ != nullptr && le != 0) {
      // The host tier's victims go to the remote tier now: their pages are the ones the copies
      // below overwrite (put_async copies the bytes before it returns).
      write_remote(std::span<key_type const>(lk.data(), le),
                   [&](std::size_t j) { return lower_.page_data(lep[j]); }, false, stream);
    }
    std::vector<key_type> filled, held, lost;
    std::vector<page_id> lost_pages;
    std::uint64_t failed = 0;
    for (std::size_t j = 0; j < m; ++j) {
      if (ls[j] == page_status::fill) {
        Backend::copy_to_host(lower_.page_data(lp[j]), upper_.page_data(ep[j]),
                              upper_.page_bytes(), stream);
        filled.push_back(ek[j]);
      } else if (ls[j] == page_status::hit) {
        held.push_back(ek[j]);
      } else {
        ++failed;  // pending (another call spills it) or no_space
        if (ls[j] == page_status::no_space) {
          lost.push_back(ek[j]);
          lost_pages.push_back(ep[j]);
        }
      }
    }
    if (remote_ != nullptr && !lost.empty()) {  // what the host tier cannot take goes lower still
      write_remote(lost, [&](std::size_t j) { return upper_.page_data(lost_pages[j]); },
                   !host_upper, stream);
    }
    if (!filled.empty()) {
      lower_.publish(filled);
      lower_.release(filled);
    }
    if (!held.empty()) { lower_.release(held); }
    spills_.fetch_add(filled.size() + held.size(), std::memory_order_relaxed);
    spill_failures_.fetch_add(failed, std::memory_order_relaxed);
  }

  static constexpr bool host_upper = std::is_same_v<Backend, cpu_backend>;

  /// Hands pages to the remote tier's write-back queue; @p page(j) gives page j's first byte,
  /// in backend memory when @p device (staged through host memory first).
  template <class PageOf>
  void write_remote(std::span<key_type const> keys, PageOf&& page, bool device, stream_type stream) {
    std::size_t const m = keys.size();
    if (m == 0) { return; }
    std::size_t const pb = upper_.page_bytes();
    std::vector<std::byte const*> src(m);
    std::vector<std::byte> staging;
    if (device) {
      staging.resize(m * pb);
      for (std::size_t j = 0; j < m; ++j) {
        Backend::copy_to_host(staging.data() + j * pb, page(j), pb, stream);
        src[j] = staging.data() + j * pb;
      }
      Backend::synchronize(stream);
    } else {
      for (std::size_t j = 0; j < m; ++j) { src[j] = page(j); }
    }
    std::vector<std::size_t> sizes(m, pb);
    std::size_t const q = remote_->put_async(keys, src, sizes);
    remote_writes_.fetch_add(q, std::memory_order_relaxed);
    remote_write_drops_.fetch_add(m - q, std::memory_order_relaxed);
  }

  /// Step 4: fills @p still (element indices) from the remote tier. @return the hits
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
// GCC 12 at -O3 reports a free of a nonzero offset inside ~vector here: a known false positive.
#pragma GCC diagnostic ignored "-Wfree-nonheap-object"
#endif
  std::size_t fill_from_remote(std::vector<std::size_t> const& still,
                               std::vector<key_type> const& hkeys,
                               std::vector<page_id> const& hpages,
                               std::vector<page_status>& hstatus, std::span<bool> from_remote,
                               stream_type stream) {
    std::size_t const m = still.size();
    std::size_t const pb = upper_.page_bytes();
    std::vector<key_type> rk(m);
    std::vector<std::byte*> dst(m);
    std::vector<std::byte> staging;
    if constexpr (!host_upper) { staging.resize(m * pb); }
    for (std::size_t j = 0; j < m; ++j) {
      rk[j] = hkeys[still[j]];
      // The upper page is held by this fill: on the CPU the remote bytes land in it directly.
      dst[j] = host_upper ? upper_.page_data(hpages[still[j]]) : staging.data() + j * pb;
    }
    std::vector<std::size_t> sizes(m, pb);
    std::unique_ptr<bool[]> found(new bool[m]);
    std::size_t const hits = remote_->get(rk, dst, sizes, std::span<bool>(found.get(), m));
    remote_lookups_.fetch_add(m, std::memory_order_relaxed);
    if (hits == 0) { return 0; }
    std::vector<key_type> up;
    for (std::size_t j = 0; j < m; ++j) {
      if (!found[j]) { continue; }
      std::size_t const i = still[j];
      if (!host_upper) { Backend::copy_from_host(upper_.page_data(hpages[i]), dst[j], pb, stream); }
      up.push_back(rk[j]);
      hstatus[i] = page_status::hit;
      if (!from_remote.empty()) { from_remote[i] = true; }
    }
    Backend::synchronize(stream);
    publish_upper(up, stream);
    remote_hits_.fetch_add(up.size(), std::memory_order_relaxed);
    return up.size();
  }
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

  void publish_upper(std::vector<key_type> const& keys, stream_type stream) {
    if constexpr (std::is_same_v<Backend, cpu_backend>) {
      upper_.publish(keys, stream);
    } else {
      buffer_of<key_type> d(keys.size());
      Backend::copy_from_host(d.p, keys.data(), keys.size() * sizeof(key_type), stream);
      upper_.publish(std::span<key_type const>(d.p, keys.size()), stream);
    }
  }

  template <class T>
  struct buffer_of {
    T* p = nullptr;
    explicit buffer_of(std::size_t n) : p(static_cast<T*>(Backend::allocate(n * sizeof(T)))) {}
    ~buffer_of() { Backend::deallocate(p); }
    buffer_of(buffer_of const&) = delete;
    buffer_of& operator=(buffer_of const&) = delete;
  };

  upper_type upper_;
  lower_type lower_;
  std::atomic<std::uint64_t> lower_hits_{0}, spills_{0}, spill_failures_{0};
  std::atomic<std::uint64_t> remote_hits_{0}, remote_lookups_{0}, remote_writes_{0},
      remote_write_drops_{0};
  remote_store* remote_ = nullptr;
  remote_write write_ = remote_write::back;
  std::mutex fills_mu_;  // write-through: the pages of fills not yet published
  std::unordered_map<key_type, page_id> filling_;
};

}  // namespace ccht
