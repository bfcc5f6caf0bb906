/**
 * @file page_ref.hpp
 * @brief The page cache's per-key operations (acquire, lookup, publish, abandon, release,
 *        erase), written once for host threads and CUDA tiles, like core/bucket_ops.hpp.
 *
 * ccht::page_cache (page_cache.hpp) runs them in bulk on either backend; ccht::page_ref is the
 * trivially copyable handle that carries what they need.
 *
 * **Entries.** The index is a ccht::table of a pinnable policy (double_lru or coarse_lru). Each
 * entry's value holds its page id (low 32 bits) and a "filling" flag (bit 63). An entry always
 * owns exactly one page from the moment it is inserted: a new entry takes the page of the entry
 * it evicts (so the caller can copy the old bytes out before filling), or, when it evicts
 * nothing, a page popped from the free ring, inside the insert's bucket locks
 * (page_insert_hook). When the ring is empty (the table's global layer could not evict: every
 * entry it reached was pinned) the insert changes nothing and the key gets no_space. So pages in
 * use never exceed the pool, and the table's transient overshoot never reaches the pool.
 *
 * **Pins** are the core's (core/pin.hpp): a hit, a fill and a lookup each take one; release
 * gives one back. A filling entry holds exactly its filler's pin: nobody else can pin it (they
 * get `pending`), so no reader ever holds a page before it is published, and it cannot be
 * evicted while it is filled.
 *
 * **Free ring.** A bounded multi-producer multi-consumer queue of page ids (num_pages slots and
 * an item count). pop() reserves an item by decrementing the count, then takes slot head++;
 * push() puts a page in slot tail++ and then increments the count. A pop may wait for a push
 * that has taken its slot but not written it yet (and a push for the pop of its slot's last
 * lap): each wait is on another thread that holds no bucket lock and is between two steps, so
 * every wait ends. Pops run inside an insert's bucket locks; pushes never do.
 */
#pragma once

#include <ccht/cache/page_pool.hpp>
#include <ccht/core/atomics.hpp>
#include <ccht/core/bucket_ops.hpp>
#include <ccht/core/config.hpp>
#include <ccht/core/pin.hpp>
#include <ccht/core/types.hpp>
#include <ccht/memory_space.hpp>

#include <cuda/atomic>

#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace ccht {

/// Outcome of an acquire or a lookup of one key.
enum class page_status : std::uint8_t {
  hit = 0,       ///< resident and published: the page is pinned for the caller
  fill = 1,      ///< acquire: a fresh page, pinned and flagged as filling; write it, then publish
  pending = 2,   ///< another caller is filling this key's page; no pin taken, retry later
  no_space = 3,  ///< acquire: every candidate page is pinned (or the key's pins are saturated)
  miss = 4,      ///< lookup: not resident (nothing pinned)
  rejected = 5,  ///< the batch held a reserved key and was skipped whole (CUDA `_async` calls)
};

/// Outcome of a publish, abandon, release or erase of one element.
enum class page_result : std::uint8_t {
  ok = 0,            ///< done
  unknown_key = 1,   ///< the key is not resident (erase: nothing to erase, not an error)
  unknown_page = 2,  ///< release by page id: the page belongs to no key, or is out of range
  not_pinned = 3,    ///< release: no pin is held (a double release); nothing changed
  not_filling = 4,   ///< publish / abandon: the page was not being filled; nothing changed
  filling = 5,       ///< release / erase of a page still being filled: publish or abandon it first
  pinned = 6,        ///< erase of a pinned page: refused, nothing changed
  rejected = 7,      ///< the batch held a reserved key and was skipped whole (CUDA `_async` calls)
};

/// Short name of a page_status ("hit", "fill", ...).
constexpr char const* to_string(page_status s) noexcept {
  switch (s) {
    case page_status::hit: return "hit";
    case page_status::fill: return "fill";
    case page_status::pending: return "pending";
    case page_status::no_space: return "no_space";
    case page_status::miss: return "miss";
    case page_status::rejected: return "rejected";
  }
  return "?";
}
/// Short name of a page_result ("ok", "unknown_key", ...).
constexpr char const* to_string(page_result r) noexcept {
  switch (r) {
    case page_result::ok: return "ok";
    case page_result::unknown_key: return "unknown_key";
    case page_result::unknown_page: return "unknown_page";
    case page_result::not_pinned: return "not_pinned";
    case page_result::not_filling: return "not_filling";
    case page_result::filling: return "filling";
    case page_result::pinned: return "pinned";
    case page_result::rejected: return "rejected";
  }
  return "?";
}

/// Page id that names no page.
inline constexpr page_id no_page = ~page_id{0};

namespace detail {

/// Bit of an entry's value that marks a page being filled.
inline constexpr value_type filling_bit = value_type{1} << 63;
/// Value of an entry owning page @p p.
CCHT_HOST_DEVICE constexpr value_type page_value(page_id p, bool filling) noexcept {
  return value_type{p} | (filling ? filling_bit : 0);
}
/// Page of entry value @p v.
CCHT_HOST_DEVICE constexpr page_id page_of(value_type v) noexcept {
  return static_cast<page_id>(v & 0xffffffffu);
}
/// Whether entry value @p v is being filled.
CCHT_HOST_DEVICE constexpr bool is_filling(value_type v) noexcept { return (v & filling_bit) != 0; }

/// Counters of a free ring (backend memory). `count` is signed so a racing pop can read it low.
struct free_ring_words {
  std::uint64_t head;  ///< next slot a pop takes
  std::uint64_t tail;  ///< next slot a push fills
  std::int64_t count;  ///< pages pushed and not yet reserved by a pop
};

/// The free-page queue (see the file comment). Trivially copyable; called by one thread.
struct free_ring {
  page_id* slots = nullptr;          ///< num_pages slots, no_page when empty
  free_ring_words* words = nullptr;  ///< head, tail, count
  std::uint32_t num_pages = 0;       ///< ring size

  /// Takes a free page, or returns no_page when there is none.
  CCHT_HOST_DEVICE page_id pop() const noexcept {
    atomic_ref_t<std::int64_t> count(words->count);
    std::int64_t c = count.load(cuda::std::memory_order_relaxed);
    do {
      if (c <= 0) { return no_page; }
    } while (!count.compare_exchange_weak(c, c - 1, cuda::std::memory_order_acquire,
                                          cuda::std::memory_order_relaxed));
    std::uint64_t const h =
        atomic_ref_t<std::uint64_t>(words->head).fetch_add(1, cuda::std::memory_order_relaxed);
    atomic_ref_t<page_id> slot(slots[h % num_pages]);
    unsigned spins = 0;
    while (true) {  // the push that owns this slot may not have written it yet
      page_id const p = slot.exchange(no_page, cuda::std::memory_order_acquire);
      if (p != no_page) { return p; }
      spin_wait(spins);
    }
  }

  /// Returns page @p p to the ring. Never called while holding a bucket lock.
  CCHT_HOST_DEVICE void push(page_id p) const noexcept {
    std::uint64_t const t =
        atomic_ref_t<std::uint64_t>(words->tail).fetch_add(1, cuda::std::memory_order_relaxed);
    atomic_ref_t<page_id> slot(slots[t % num_pages]);
    unsigned spins = 0;
    while (true) {  // the pop of this slot's previous lap may not have taken it yet
      page_id expected = no_page;
      if (slot.compare_exchange_weak(expected, p, cuda::std::memory_order_release,
                                     cuda::std::memory_order_relaxed)) {
        break;
      }
      spin_wait(spins);
    }
    atomic_ref_t<std::int64_t>(words->count).fetch_add(1, cuda::std::memory_order_release);
  }

  /// Pages free now (a snapshot).
  CCHT_HOST_DEVICE std::int64_t available() const noexcept {
    return atomic_ref_t<std::int64_t>(words->count).load(cuda::std::memory_order_relaxed);
  }
};

/// Insert hook of acquire (see detail::upsert_hook): an existing key is left alone; a new entry
/// starts pinned and filling, with its victim's page or a page popped from the free ring.
struct page_insert_hook {
  static constexpr bool assigns_existing = false;  ///< a present key is reported, not changed
  static constexpr score_type initial_pins = pin_one;  ///< the filler's pin
  free_ring ring;           ///< where a page for a free slot comes from
  key_type* owner;          ///< page -> key map
  key_type key;             ///< the key being inserted
  page_id reserved = no_page;  ///< page popped by reserve()

  /// Pops a page for an entry that evicts nothing; false (no page) refuses the slot.
  CCHT_HOST_DEVICE bool reserve() noexcept {
    reserved = ring.pop();
    return reserved != no_page;
  }
  /// The new entry's value: the victim's page when it evicted one, else the reserved page.
  CCHT_HOST_DEVICE value_type value_for(value_type, bool evicted, value_type victim) noexcept {
    page_id const p = evicted ? page_of(victim) : reserved;
    store_relaxed(owner[p], key);
    return page_value(p, true);
  }
};

}  // namespace detail

/// What one page operation did, for the bulk layer's outputs and statistics.
struct page_op_result {
  page_status status = page_status::miss;  ///< acquire / lookup outcome
  page_result result = page_result::ok;    ///< publish / abandon / release / erase outcome
  page_id page = no_page;                  ///< the page handed out, or the one acted on
  bool evicted = false;                    ///< acquire: an entry was evicted for this page
  key_type evicted_key = empty_key;        ///< acquire: that entry's key (its page is `page`)
  std::int8_t pinned_delta = 0;            ///< change in the number of pinned pages
  std::int8_t filling_delta = 0;           ///< change in the number of pages being filled
  /// Field by field (every lane of a tile returns the same result).
  bool operator==(page_op_result const&) const = default;
};

/**
 * @brief Trivially copyable handle to a page cache's storage: its index, free ring, page
 *        owners and pool. Every member is called by all threads of a tile with the same
 *        arguments (a ccht::scalar_tile on the host); results are returned to every thread.
 * @tparam Policy a pinnable policy with a global capacity layer (ccht::double_lru, coarse_lru)
 */
template <class Policy, int BucketSize = default_bucket_size>
struct page_ref {
  static_assert(Policy::pinnable, "the page cache needs a pinnable policy");
  /// Index operations.
  using ops = bucket_ops<Policy, BucketSize>;

  bucket_array_view<BucketSize> index{};  ///< the table's storage
  detail::free_ring ring{};               ///< free pages
  key_type* owner = nullptr;              ///< key owning each page, empty_key when free
  std::byte* data = nullptr;              ///< first byte of the pool
  std::size_t page_bytes = 0;             ///< bytes per page

  /// Most tries of one acquire before it reports no_space (each try is bounded).
  static constexpr int max_attempts = 4;

  /// First byte of page @p p.
  CCHT_HOST_DEVICE std::byte* page_data(page_id p) const noexcept {
    return data + std::size_t{p} * page_bytes;
  }

  /// Pins @p key if it is resident and published (hit), reports pending when it is being
  /// filled, miss when absent. Lock-free: a validated read and one compare-and-swap
  /// (bucket_ops::pin_optimistic).
  template <class Tile>
  CCHT_HOST_DEVICE page_op_result lookup(Tile const& tile, key_type key,
                                         detail::slot_hint const* hint = nullptr) const noexcept {
    value_type val = 0;
    pin_outcome const held =
        ops::pin_optimistic(tile, index, key, val,
                            [](value_type v) { return !detail::is_filling(v); }, nullptr, hint);
    page_op_result r;
    if (held == pin_outcome::absent) {
      r.status = page_status::miss;
    } else if (held == pin_outcome::refused) {
      r.status = page_status::pending;  // being filled
    } else if (held == pin_outcome::saturated) {
      r.status = page_status::no_space;  // max_pins held already
    } else {
      r.status = page_status::hit;
      r.page = detail::page_of(val);
      r.pinned_delta = held == pin_outcome::pinned_first ? 1 : 0;
    }
    return r;
  }

  /// Hit (pinned), fill (a fresh pinned page to write, then publish), pending, or no_space.
  template <class Tile>
  CCHT_HOST_DEVICE page_op_result acquire(Tile const& tile, key_type key, tick_type tick,
                                          access_counts* acc = nullptr,
                                          detail::slot_hint const* hint = nullptr) const noexcept {
    page_op_result r;
    for (int attempt = 0; attempt < max_attempts; ++attempt) {
      r = lookup(tile, key, attempt == 0 ? hint : nullptr);
      if (r.status != page_status::miss) { return r; }
      detail::page_insert_hook hook{ring, owner, key};
      value_type value = 0;
      key_type ek = empty_key;
      value_type ev = 0;
      op_status const st = ops::insert_with(tile, index, key, value, tick, ek, ev, hook, acc);
      if (st == op_status::inserted || st == op_status::inserted_evicted) {
        r.status = page_status::fill;
        r.page = detail::page_of(value);
        r.pinned_delta = 1;
        r.filling_delta = 1;
        r.evicted = st == op_status::inserted_evicted;
        r.evicted_key = r.evicted ? ek : empty_key;
        return r;
      }
      // assigned: another caller inserted it since the lookup; look again. no_space: nothing
      // was evictable, or no free page yet (an abandon or erase may be pushing one): retry.
    }
    r = page_op_result{};
    r.status = page_status::no_space;
    return r;
  }

  /// Marks @p key's page as filled: from now on lookups hit it. The filler keeps its pin.
  template <class Tile>
  CCHT_HOST_DEVICE page_op_result publish(Tile const& tile, key_type key) const noexcept {
    page_op_result r;
    int res = static_cast<int>(page_result::ok);
    value_type val = 0;
    bool const found = ops::update_locked(tile, index, key, [&](auto& b, std::uint32_t, int slot) {
      val = detail::load_relaxed(b.values[slot]);
      if (!detail::is_filling(val)) {
        res = static_cast<int>(page_result::not_filling);
        return;
      }
      detail::store_relaxed(b.values[slot], val & ~detail::filling_bit);
    });
    res = tile.shfl(res, 0);
    r.result = found ? static_cast<page_result>(res) : page_result::unknown_key;
    if (r.result == page_result::ok) {
      r.page = detail::page_of(tile.shfl(val, 0));
      r.filling_delta = -1;
    }
    return r;
  }

  /// Gives up a fill: the key goes away and its page is free again (no reader ever saw it).
  template <class Tile>
  CCHT_HOST_DEVICE page_op_result abandon(Tile const& tile, key_type key) const noexcept {
    page_op_result r;
    int res = static_cast<int>(page_result::ok);
    value_type val = 0;
    bool const found = ops::update_locked(tile, index, key, [&](auto& b, std::uint32_t, int slot) {
      val = detail::load_relaxed(b.values[slot]);
      if (!detail::is_filling(val)) {
        res = static_cast<int>(page_result::not_filling);
        return;
      }
      detail::store_relaxed(owner[detail::page_of(val)], empty_key);
      ops::erase_locked_slot(index, b, slot);
    });
    res = tile.shfl(res, 0);
    r.result = found ? static_cast<page_result>(res) : page_result::unknown_key;
    if (r.result == page_result::ok) {
      r.page = detail::page_of(tile.shfl(val, 0));
      if (tile.thread_rank() == 0) { ring.push(r.page); }  // after the unlock
      r.pinned_delta = -1;
      r.filling_delta = -1;
    }
    return r;
  }

  /// Releases one pin of @p key. The last release is a use at @p tick.
  template <class Tile>
  CCHT_HOST_DEVICE page_op_result release(Tile const& tile, key_type key, tick_type tick,
                                          access_counts* acc = nullptr,
                                          detail::slot_hint const* hint = nullptr) const noexcept {
    return release_if(tile, key, no_page, tick, acc, hint);
  }

  /// Releases one pin of page @p p (whichever key owns it).
  template <class Tile>
  CCHT_HOST_DEVICE page_op_result release_page(Tile const& tile, page_id p, tick_type tick,
                                               access_counts* acc = nullptr) const noexcept {
    page_op_result r;
    key_type k = empty_key;
    if (p < ring.num_pages && tile.thread_rank() == 0) {
      k = detail::atomic_ref_t<key_type>(owner[p]).load(cuda::std::memory_order_acquire);
    }
    k = tile.shfl(k, 0);
    if (k == empty_key) {
      r.result = page_result::unknown_page;
      return r;
    }
    r = release_if(tile, k, p, tick, acc, nullptr);
    if (r.result == page_result::unknown_key) { r.result = page_result::unknown_page; }
    return r;
  }

  /// Erases @p key unless its page is pinned (refused: page_result::pinned); frees the page.
  template <class Tile>
  CCHT_HOST_DEVICE page_op_result erase(Tile const& tile, key_type key) const noexcept {
    page_op_result r;
    int res = static_cast<int>(page_result::ok);
    value_type val = 0;
    bool const found = ops::update_locked(tile, index, key, [&](auto& b, std::uint32_t, int slot) {
      val = detail::load_relaxed(b.values[slot]);
      // Claim the score word first: a lock-free pin may race with the erase (core/pin.hpp).
      if (!detail::claim_score(scalar_tile{}, b.scores[slot])) {
        res = static_cast<int>(detail::is_filling(val) ? page_result::filling : page_result::pinned);
        return;
      }
      detail::store_relaxed(owner[detail::page_of(val)], empty_key);
      ops::erase_locked_slot(index, b, slot);
    });
    res = tile.shfl(res, 0);
    r.result = found ? static_cast<page_result>(res) : page_result::unknown_key;
    if (r.result == page_result::ok) {
      r.page = detail::page_of(tile.shfl(val, 0));
      if (tile.thread_rank() == 0) { ring.push(r.page); }  // after the unlock
    }
    return r;
  }

 private:
  /// Unpins @p key when it is published and, if @p expect is a page, owns that page. Lock-free
  /// (bucket_ops::unpin_optimistic): a release is one validated read and one compare-and-swap.
  template <class Tile>
  CCHT_HOST_DEVICE page_op_result release_if(Tile const& tile, key_type key, page_id expect,
                                             tick_type tick, access_counts* acc,
                                             detail::slot_hint const* hint) const noexcept {
    page_op_result r;
    bool filling = false;
    value_type val = 0;
    pin_outcome const left = ops::unpin_optimistic(tile, index, key, tick, val, [&](value_type v) {
      filling = detail::is_filling(v);
      return !filling && (expect == no_page || detail::page_of(v) == expect);
    }, acc, hint);
    if (pin_changed(left)) {
      r.result = page_result::ok;
      r.page = detail::page_of(val);
      r.pinned_delta = left == pin_outcome::released_last ? -1 : 0;
    } else if (left == pin_outcome::not_pinned) {
      r.result = page_result::not_pinned;
    } else if (left == pin_outcome::absent) {
      r.result = page_result::unknown_key;
    } else {  // refused
      r.result = tile.shfl(static_cast<int>(filling), 0) ? page_result::filling
                                                         : page_result::unknown_page;
    }
    return r;
  }
};

static_assert(std::is_trivially_copyable_v<page_ref<double_lru>>);

}  // namespace ccht
