/**
 * @file lockstep_tile.hpp
 * @brief A CPU tile of N lanes run in lockstep, with CUDA's collective semantics and the checks
 *        a GPU does not make: how the core's lane logic runs in CI without a GPU.
 *
 * The core (core/bucket_ops.hpp, core/global.hpp, core/kickout.hpp, cache/page_ref.hpp) is
 * written against a tile of T threads (core/tile.hpp). The CPU backend runs it on
 * ccht::scalar_tile (one lane); the CUDA kernels on 16-lane cooperative-groups tiles.
 * lockstep_tile<N> runs it on N lanes on the CPU: each lane is a fiber with its own stack that
 * runs the same code, and every collective (`ballot`, `shfl`, `shfl_xor`, `sync`) is a point
 * where all N lanes meet before any goes on, as the `*_sync` intrinsics require.
 *
 * Why fibers, not threads: a step (the code between two collectives) of every lane runs to
 * completion, one lane after the other, on the calling thread. So a run is deterministic (a
 * failing case replays exactly), costs a context switch instead of a futex wake-up per lane and
 * collective (16 OS threads on a 2-core CI machine would spend their time in the scheduler),
 * and a test can land another writer's store between two lanes' steps (run_options::before_step),
 * which is how lanes come to read one word at different times on a GPU. Concurrency between
 * tiles comes from host threads, each driving its own tiles.
 *
 * Hazards (a GPU runs on, with undefined behaviour or garbage; this throws ccht::lanes::hazard):
 * - divergent_collective: the lanes of a step reached different collectives (call site or kind):
 *   a collective inside a branch some lanes skip, such as `a || tile.shfl(...)`;
 * - lane_left_early: some lanes returned while others wait in a collective;
 * - lane_out_of_range: a `shfl` source lane or `shfl_xor` mask outside the tile;
 * - nonuniform_result: the lanes returned different results (the core's functions return one
 *   result to every lane, so a difference means a lane acted on a value the others did not see:
 *   the mark of a value that steered a lane alone);
 * - racing_store: two lanes stored to one word in the same step (builds with CCHT_LANE_HOOKS,
 *   whose atomics report every store; see core/atomics.hpp);
 * - runaway: more steps than run_options::max_steps.
 * What this cannot show is listed in docs/gpu-lanes.md: the memory model of a real GPU, real
 * scheduling and forward progress, resources, sticky errors.
 */
#pragma once

#include <ccht/core/tile.hpp>

#include <array>
#include <concepts>
#include <cstdint>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#if __has_include(<source_location>)
#include <source_location>
#endif

// A collective's call site, taken by a default argument where the collective is called (also by
// lockstep_block.hpp's barriers):
// std::source_location where the library has it, else the builtins it is made of (clang 14 with
// libstdc++ 12 has no std::source_location, and GCC 12 no __builtin_COLUMN).
#if defined(__cpp_lib_source_location)
#define CCHT_LANES_SITE_PARAM std::source_location loc = std::source_location::current()
#define CCHT_LANES_SITE(kind) \
  ::ccht::lanes::detail::call_site { loc.file_name(), loc.line(), loc.column(), kind }
#else
#define CCHT_LANES_SITE_PARAM                                                             \
  char const *file = __builtin_FILE(), unsigned line = __builtin_LINE(), \
              unsigned column = __builtin_COLUMN()
#define CCHT_LANES_SITE(kind) \
  ::ccht::lanes::detail::call_site { file, line, column, kind }
#endif

namespace ccht::lanes {

/// The collectives of the tile interface, and the block barrier of lockstep_block.hpp.
enum class collective : std::uint8_t { ballot, shfl, shfl_xor, sync, block_sync, block_sync_count };

/// What a lockstep run found wrong (see the file comment).
enum class hazard_kind : std::uint8_t {
  divergent_collective,
  lane_left_early,
  lane_out_of_range,
  nonuniform_result,
  racing_store,
  runaway,
};

/// Name of a hazard kind, as reports print it.
char const* to_string(hazard_kind k) noexcept;

/// A lane hazard: thrown by the runner on the calling thread, never inside a lane.
class hazard : public std::logic_error {
 public:
  /// @param what the report: the kind, then which lanes stood where
  hazard(hazard_kind kind, std::string const& what) : std::logic_error(what), kind_(kind) {}
  /// What was found.
  hazard_kind kind() const noexcept { return kind_; }

 private:
  hazard_kind kind_;
};

/// Options of one lockstep run.
struct run_options {
  /**
   * Called on the runner before lane @p lane runs its step @p step (step 0 starts the body;
   * step s runs from the s-th collective to the next). Stores it makes land between two lanes'
   * steps, as another writer's would on a GPU.
   */
  std::function<void(unsigned lane, std::uint64_t step)> before_step;
  /// Order of the lanes within a step: 0 runs them by rank; any other value draws a
  /// permutation per step from it (lanes of a warp are not ordered on a GPU either).
  std::uint64_t order_seed = 0;
  /// Most steps before the run is reported as a runaway (a livelock); 0: no limit.
  std::uint64_t max_steps = 0;
};

namespace detail {

/// Where a collective was called, and which one.
struct call_site {
  char const* file;
  std::uint32_t line;
  std::uint32_t column;
  collective kind;
};

/// The lanes of one run (host/lanes/lockstep.cpp).
class lane_group;

/// Parks lane @p index of @p group at a collective until every lane it meets there has arrived
/// (its tile's, or its block's for a block barrier); returns the collective's result for that
/// lane (a ballot mask, a shuffled value, a barrier's count, or 0).
std::uint64_t arrive(lane_group* group, unsigned index, call_site const& site, std::uint64_t value,
                     unsigned arg);

/// A lane's body: runs the caller's function on lane @p index of @p group.
using lane_body = void (*)(void* context, unsigned index, lane_group* group);

/// The lanes of one run: @p blocks blocks of @p tiles_per_block tiles of @p lanes_per_tile lanes,
/// numbered block by block, tile by tile.
struct group_shape {
  unsigned lanes_per_tile;
  unsigned tiles_per_block;
  unsigned blocks;
};

/// Runs @p body on every lane of @p shape in lockstep; throws ccht::lanes::hazard.
void run_group(group_shape const& shape, lane_body body, void* context, run_options const& options);

/// Runs @p body on one tile of @p lanes lanes (run_group with one tile).
void run_lanes(unsigned lanes, lane_body body, void* context, run_options const& options);

/// Whether the calling code runs inside a lane (a store hook's question).
bool in_lane() noexcept;

/// Packs a shuffled value into a 64-bit word (the largest the core shuffles).
template <class T>
std::uint64_t pack(T const& v) noexcept {
  static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= sizeof(std::uint64_t),
                "a lane shuffles values of at most 64 bits");
  std::uint64_t w = 0;
  std::memcpy(&w, &v, sizeof(T));
  return w;
}

template <class T>
T unpack(std::uint64_t w) noexcept {
  T v;
  std::memcpy(&v, &w, sizeof(T));
  return v;
}

}  // namespace detail

/**
 * @brief One lane's view of an N-lane tile run in lockstep on the CPU: the tile interface of
 *        core/tile.hpp with CUDA's semantics (`ballot` bit i is lane i; `shfl` and `shfl_xor`
 *        of values up to 64 bits). Made by ccht::lanes::run, never by hand.
 *
 * Each collective records its call site (a default argument evaluated where the collective is
 * called), so the runner can tell that every lane reached the same one.
 */
template <unsigned N>
class lockstep_tile {
  static_assert(N >= 1 && N <= 32 && (N & (N - 1)) == 0,
                "a tile has a power of two lanes, at most a warp's 32");

 public:
  /// Lane @p rank of the tile whose lane 0 is lane @p first of @p group (the runners make them).
  lockstep_tile(unsigned rank, unsigned first, detail::lane_group* group) noexcept
      : rank_(rank), first_(first), group_(group) {}

  /// Number of lanes.
  static constexpr unsigned num_threads() noexcept { return N; }
  /// Rank of this lane.
  unsigned thread_rank() const noexcept { return rank_; }

  /// Bit i set when lane i's predicate holds.
  unsigned ballot(bool p, CCHT_LANES_SITE_PARAM) const {
    return static_cast<unsigned>(meet(CCHT_LANES_SITE(collective::ballot), p ? 1u : 0u, 0));
  }
  /// Value of @p v held by lane @p src (a source outside the tile is a hazard).
  template <class T>
  T shfl(T v, unsigned src, CCHT_LANES_SITE_PARAM) const {
    return detail::unpack<T>(meet(CCHT_LANES_SITE(collective::shfl), detail::pack(v), src));
  }
  /// Value of @p v held by lane (rank ^ @p mask) (a mask reaching outside the tile is a hazard).
  template <class T>
  T shfl_xor(T v, unsigned mask, CCHT_LANES_SITE_PARAM) const {
    return detail::unpack<T>(meet(CCHT_LANES_SITE(collective::shfl_xor), detail::pack(v), mask));
  }
  /// Barrier across the tile.
  void sync(CCHT_LANES_SITE_PARAM) const { (void)meet(CCHT_LANES_SITE(collective::sync), 0, 0); }

 private:
  std::uint64_t meet(detail::call_site const& site, std::uint64_t value, unsigned arg) const {
    return detail::arrive(group_, first_ + rank_, site, value, arg);
  }

  unsigned rank_;
  unsigned first_;
  detail::lane_group* group_;
};

namespace detail {

/// Calls @p f on every lane and keeps each lane's result.
template <unsigned N, class F, class R>
struct lane_call {
  F* f;
  std::array<R, N> results{};

  static void body(void* self, unsigned lane, lane_group* group) {
    auto* c = static_cast<lane_call*>(self);
    c->results[lane] = (*c->f)(lockstep_tile<N>(lane, 0, group));
  }
};

template <unsigned N, class F>
struct lane_call_void {
  F* f;
  static void body(void* self, unsigned lane, lane_group* group) {
    (*static_cast<lane_call_void*>(self)->f)(lockstep_tile<N>(lane, 0, group));
  }
};

[[noreturn]] void throw_nonuniform(unsigned lanes, unsigned first_differing);

}  // namespace detail

/**
 * @brief Runs @p f(tile) on the N lanes of a lockstep tile and returns lane 0's result.
 *
 * @p f is called once per lane with that lane's lockstep_tile<N>; it must return the same value
 * on every lane when its result can be compared (a differing lane is a nonuniform_result
 * hazard), which is the core's contract. Return outputs by value (a tuple or a struct with ==),
 * not through shared references, which every lane would write.
 * @throws ccht::lanes::hazard (see the file comment)
 */
template <unsigned N, class F>
decltype(auto) run(F&& f, run_options const& options = {}) {
  using R = std::invoke_result_t<F&, lockstep_tile<N> const&>;
  if constexpr (std::is_void_v<R>) {
    detail::lane_call_void<N, std::remove_reference_t<F>> call{&f};
    detail::run_lanes(N, &decltype(call)::body, &call, options);
  } else {
    static_assert(std::is_default_constructible_v<R> && std::is_copy_assignable_v<R>,
                  "a lane's result is kept per lane: make it default-constructible");
    detail::lane_call<N, std::remove_reference_t<F>, R> call{&f};
    detail::run_lanes(N, &decltype(call)::body, &call, options);
    if constexpr (std::equality_comparable<R>) {
      for (unsigned l = 1; l < N; ++l) {
        if (!(call.results[l] == call.results[0])) { detail::throw_nonuniform(N, l); }
      }
    }
    return R(call.results[0]);
  }
}

/// Runs @p f on a tile of N lanes: ccht::scalar_tile for N = 1 (no emulation), else run<N>.
template <unsigned N, class F>
decltype(auto) on_tile(F&& f) {
  if constexpr (N == 1) {
    return f(scalar_tile{});
  } else {
    return run<N>(std::forward<F>(f));
  }
}

}  // namespace ccht::lanes
