// The lockstep runner of include/ccht/lanes/lockstep_tile.hpp: lanes are fibers on the calling
// thread, switched by a dozen instructions (x86-64) or ucontext elsewhere, with the sanitizers
// told about every switch so that ASan and TSan follow the stacks.
#include <ccht/core/atomics.hpp>
#include <ccht/lanes/lockstep_tile.hpp>
#include <ccht/lanes/store_hook.hpp>

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <memory>
#include <new>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#define CCHT_LANES_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CCHT_LANES_ASAN 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define CCHT_LANES_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define CCHT_LANES_TSAN 1
#endif
#endif

#if CCHT_LANES_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif
#if CCHT_LANES_TSAN
#include <sanitizer/tsan_interface.h>
#endif

#if !defined(__x86_64__)
#include <ucontext.h>
#endif

// ---- context switch (global names: the assembly below refers to them) --------------------------
extern "C" void ccht_lanes_switch(void** save, void* to);
extern "C" void ccht_lanes_start();
extern "C" [[noreturn]] __attribute__((used)) void ccht_lanes_fiber_main(void* f);

#if defined(__x86_64__)
// switch_stack(save, to): pushes the callee-saved registers and the FPU/SSE control words, saves
// the stack pointer in *save, loads `to` and pops the same from there. A new fiber's stack is
// laid out as if it had switched away just before fiber_start (fiber::prepare).
asm(R"(
  .text
  .globl ccht_lanes_switch
  .type ccht_lanes_switch, @function
ccht_lanes_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size ccht_lanes_switch, .-ccht_lanes_switch

  .globl ccht_lanes_start
  .type ccht_lanes_start, @function
ccht_lanes_start:
  movq %rbx, %rdi
  call ccht_lanes_fiber_main@PLT
  ud2
  .size ccht_lanes_start, .-ccht_lanes_start
)");
#endif

namespace ccht::lanes {

char const* to_string(hazard_kind k) noexcept {
  switch (k) {
    case hazard_kind::divergent_collective: return "divergent_collective";
    case hazard_kind::lane_left_early: return "lane_left_early";
    case hazard_kind::lane_out_of_range: return "lane_out_of_range";
    case hazard_kind::nonuniform_result: return "nonuniform_result";
    case hazard_kind::racing_store: return "racing_store";
    case hazard_kind::runaway: return "runaway";
  }
  return "unknown";
}

namespace detail {
namespace {

// ---- context switch ------------------------------------------------------------------------------


/// Where a lane stands between two of its runs.
enum class lane_state : std::uint8_t {
  runnable,  // runs in the next step
  waiting,   // in a collective or a block barrier (fiber::at)
  spinning,  // parked by the spin hook; runs again in the next step
  done,      // returned from the body
};

/// One lane: a stack, where it stands, and what it runs.
struct fiber {
  static constexpr std::size_t guard_bytes = 4096;
#if CCHT_LANES_ASAN || CCHT_LANES_TSAN
  static constexpr std::size_t stack_bytes = std::size_t{1} << 20;
#else
  static constexpr std::size_t stack_bytes = std::size_t{256} << 10;
#endif

  void* mapping = nullptr;  // guard page, then the stack
  void* sp = nullptr;       // saved stack pointer while switched out
#if !defined(__x86_64__)
  ucontext_t ctx{};
#endif
#if CCHT_LANES_TSAN
  void* tsan_fiber = nullptr;
#endif
#if CCHT_LANES_ASAN
  void* asan_fake = nullptr;
#endif
  bool dirty = false;  // left inside a body (a hazard stopped the run): prepare() again

  // the work of the current run
  lane_body body = nullptr;
  void* context = nullptr;
  unsigned lane = 0;  // index in the group
  lane_group* group = nullptr;
  lane_state state = lane_state::done;
  std::exception_ptr error;  // what the body threw (rethrown by the runner)
  // the collective it waits in
  call_site at{};
  std::uint64_t value = 0;
  unsigned arg = 0;
  std::uint64_t result = 0;

  fiber() {
    mapping = mmap(nullptr, guard_bytes + stack_bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mapping == MAP_FAILED) { throw std::bad_alloc(); }
    (void)mprotect(mapping, guard_bytes, PROT_NONE);  // an overflow faults instead of corrupting
    prepare();
  }
  ~fiber() {
#if CCHT_LANES_TSAN
    if (tsan_fiber != nullptr) { __tsan_destroy_fiber(tsan_fiber); }
#endif
    munmap(mapping, guard_bytes + stack_bytes);
  }
  fiber(fiber const&) = delete;
  fiber& operator=(fiber const&) = delete;

  char* stack_bottom() const { return static_cast<char*>(mapping) + guard_bytes; }

  /// Lays out a fresh stack whose first switch-in enters ccht_lanes_fiber_main(this).
  void prepare() {
#if CCHT_LANES_ASAN
    __asan_unpoison_memory_region(stack_bottom(), stack_bytes);
#endif
#if CCHT_LANES_TSAN
    if (tsan_fiber != nullptr) { __tsan_destroy_fiber(tsan_fiber); }
    tsan_fiber = __tsan_create_fiber(0);
#endif
#if defined(__x86_64__)
    // From the top: the return address of ccht_lanes_switch (ccht_lanes_start, entered with
    // rsp % 16 == 0 as a call expects), six registers (rbx = this), the control words.
    auto* top = reinterpret_cast<std::uint64_t*>(stack_bottom() + stack_bytes);
    top -= 2;  // keeps ccht_lanes_start's rsp 16-byte aligned
    std::uint64_t* p = top;
    *--p = reinterpret_cast<std::uint64_t>(&ccht_lanes_start);
    *--p = 0;                                     // rbp
    *--p = reinterpret_cast<std::uint64_t>(this);  // rbx
    *--p = 0;                                     // r12
    *--p = 0;                                     // r13
    *--p = 0;                                     // r14
    *--p = 0;                                     // r15
    *--p = 0x037f00001f80ull;  // mxcsr 0x1f80 (low half), x87 control word 0x037f
    sp = p;
#else
    getcontext(&ctx);
    ctx.uc_stack.ss_sp = stack_bottom();
    ctx.uc_stack.ss_size = stack_bytes;
    ctx.uc_link = nullptr;
    makecontext(&ctx, reinterpret_cast<void (*)()>(&ccht_lanes_fiber_main), 1,
                static_cast<void*>(this));
#endif
#if CCHT_LANES_ASAN
    asan_fake = nullptr;
#endif
    dirty = false;
  }
};

/// Per host thread: its fibers and the runner's own context.
struct runner_state {
  std::vector<std::unique_ptr<fiber>> fibers;
  fiber* current = nullptr;  // the lane running now, or null on the runner
  void* runner_sp = nullptr;
#if !defined(__x86_64__)
  ucontext_t runner_ctx{};
#endif
#if CCHT_LANES_TSAN
  void* tsan_runner = nullptr;
#endif
#if CCHT_LANES_ASAN
  void const* runner_stack = nullptr;
  std::size_t runner_stack_bytes = 0;
#endif
};

thread_local runner_state tls_runner;

/// Runner -> lane @p f, until it parks in a collective or finishes its body.
void resume(fiber* f) {
  runner_state& r = tls_runner;
  r.current = f;
#if CCHT_LANES_TSAN
  if (r.tsan_runner == nullptr) { r.tsan_runner = __tsan_get_current_fiber(); }
  __tsan_switch_to_fiber(f->tsan_fiber, 0);
#endif
#if CCHT_LANES_ASAN
  void* fake = nullptr;
  __sanitizer_start_switch_fiber(&fake, f->stack_bottom(), fiber::stack_bytes);
#endif
#if defined(__x86_64__)
  ccht_lanes_switch(&r.runner_sp, f->sp);
#else
  swapcontext(&r.runner_ctx, &f->ctx);
#endif
#if CCHT_LANES_ASAN
  __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
  r.current = nullptr;
}

/// Lane @p f -> runner (f parks; resume() continues it here).
void park(fiber* f) {
  runner_state& r = tls_runner;
#if CCHT_LANES_TSAN
  __tsan_switch_to_fiber(r.tsan_runner, 0);
#endif
#if CCHT_LANES_ASAN
  __sanitizer_start_switch_fiber(&f->asan_fake, r.runner_stack, r.runner_stack_bytes);
#endif
#if defined(__x86_64__)
  ccht_lanes_switch(&f->sp, r.runner_sp);
#else
  swapcontext(&f->ctx, &r.runner_ctx);
#endif
#if CCHT_LANES_ASAN
  __sanitizer_finish_switch_fiber(f->asan_fake, &r.runner_stack, &r.runner_stack_bytes);
#endif
}

[[noreturn]] void fiber_loop(fiber* f) {
#if CCHT_LANES_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &tls_runner.runner_stack,
                                  &tls_runner.runner_stack_bytes);
#endif
  while (true) {  // one body per run; between runs the fiber waits here, parked
    try {  // an exception must not unwind past the fiber's first frame
      f->body(f->context, f->lane, f->group);
    } catch (...) {
      f->error = std::current_exception();
    }
    f->state = lane_state::done;
    park(f);
  }
}

std::string where(call_site const& s) {
  std::string out = s.file;
  auto const slash = out.rfind('/');
  if (slash != std::string::npos) { out = out.substr(slash + 1); }
  out += ':';
  out += std::to_string(s.line);
  out += ':';
  out += std::to_string(s.column);
  out += ' ';
  switch (s.kind) {
    case collective::ballot: out += "ballot"; break;
    case collective::shfl: out += "shfl"; break;
    case collective::shfl_xor: out += "shfl_xor"; break;
    case collective::sync: out += "sync"; break;
    case collective::block_sync: out += "block sync"; break;
    case collective::block_sync_count: out += "block sync_count"; break;
  }
  return out;
}

bool same_site(call_site const& a, call_site const& b) {
  return a.kind == b.kind && a.line == b.line && a.column == b.column &&
         (a.file == b.file || std::string_view(a.file) == std::string_view(b.file));
}

}  // namespace

/// The fibers of one run: blocks of tiles of lanes, and the hazard a store hook found, if any.
class lane_group {
 public:
  group_shape shape{};
  unsigned fibers = 0;       // lanes in all
  unsigned block_fibers = 0;  // lanes per block
  std::vector<fiber*> lane;  // by index: block, then tile, then lane
  std::uint64_t step = 0;
  // stores of this step: (address, lane); a second lane of one tile storing to one word is a hazard
  std::vector<std::pair<std::uintptr_t, unsigned>> stores;
  bool store_hazard = false;
  std::string store_report;

  unsigned tile_of(unsigned index) const noexcept { return index / shape.lanes_per_tile; }
  unsigned block_of(unsigned index) const noexcept { return index / block_fibers; }
};

std::uint64_t arrive(lane_group* group, unsigned index, call_site const& site, std::uint64_t value,
                     unsigned arg) {
  fiber* f = group->lane[index];
  f->at = site;
  f->value = value;
  f->arg = arg;
  f->state = lane_state::waiting;
  park(f);
  return f->result;
}

bool in_lane() noexcept { return tls_runner.current != nullptr; }

namespace {

/// core/atomics.hpp's spin hook while lanes run: the spinning lane parks until the next step, so
/// the tile holding the lock it waits for gets to run (a GPU's other warps would).
bool park_spinning() noexcept {
  fiber* f = tls_runner.current;
  if (f == nullptr) { return false; }
  f->state = lane_state::spinning;
  park(f);
  return true;
}

}  // namespace

void note_store(void const* address) noexcept {
  fiber* f = tls_runner.current;
  if (f == nullptr) { return; }
  lane_group* g = f->group;
  auto const a = reinterpret_cast<std::uintptr_t>(address);
  for (auto const& [at, lane] : g->stores) {
    if (at == a && lane != f->lane && g->tile_of(lane) == g->tile_of(f->lane) && !g->store_hazard) {
      g->store_hazard = true;
      std::ostringstream os;
      os << "racing_store: lanes " << lane % g->shape.lanes_per_tile << " and "
         << f->lane % g->shape.lanes_per_tile << " of tile " << g->tile_of(f->lane)
         << " stored to one word in step " << g->step << " with no collective between them";
      g->store_report = os.str();
    }
  }
  g->stores.emplace_back(a, f->lane);
}

[[noreturn]] void throw_nonuniform(unsigned lanes, unsigned first_differing) {
  throw hazard(hazard_kind::nonuniform_result,
               "nonuniform_result: lane " + std::to_string(first_differing) + " of " +
                   std::to_string(lanes) + " returned another result than lane 0");
}

namespace {

/// Abandons the lanes still inside the body: their stacks are laid out afresh next time.
void abandon(lane_group& g) {
  for (fiber* f : g.lane) {
    if (f->state != lane_state::done) { f->dirty = true; }
  }
}

/// Stops a run with a hazard.
[[noreturn]] void stop(lane_group& g, hazard_kind kind, std::string const& report) {
  abandon(g);
  throw hazard(kind, report);
}

/// Where lanes [first, first + count) stand, for a report (at most 32 lines).
std::string positions(lane_group const& g, unsigned first, unsigned count) {
  std::ostringstream os;
  unsigned const shown = std::min(count, 32u);
  for (unsigned i = first; i < first + shown; ++i) {
    fiber const* f = g.lane[i];
    os << "\n  " << (g.block_fibers > g.shape.lanes_per_tile ? "thread " : "lane ") << i - first
       << ": ";
    switch (f->state) {
      case lane_state::done: os << "returned"; break;
      case lane_state::waiting: os << where(f->at); break;
      default: os << "running"; break;
    }
  }
  if (count > shown) { os << "\n  (" << count - shown << " more)"; }
  return os.str();
}

bool is_block_collective(collective k) noexcept {
  return k == collective::block_sync || k == collective::block_sync_count;
}

/// Resolves a tile collective where every lane of the tile waits in one.
void resolve_collective(lane_group& g, unsigned first) {
  unsigned const n = g.shape.lanes_per_tile;
  fiber* const lead = g.lane[first];
  switch (lead->at.kind) {
    case collective::ballot: {
      std::uint64_t mask = 0;
      for (unsigned l = 0; l < n; ++l) { mask |= (g.lane[first + l]->value & 1u) << l; }
      for (unsigned l = 0; l < n; ++l) { g.lane[first + l]->result = mask; }
      break;
    }
    case collective::shfl:
    case collective::shfl_xor: {
      bool const by_xor = lead->at.kind == collective::shfl_xor;
      for (unsigned l = 0; l < n; ++l) {
        unsigned const arg = g.lane[first + l]->arg;
        if (arg >= n) {
          stop(g, hazard_kind::lane_out_of_range,
               std::string("lane_out_of_range: lane ") + std::to_string(l) +
                   (by_xor ? " shuffles with xor mask " : " reads lane ") + std::to_string(arg) +
                   " of a " + std::to_string(n) + "-lane tile at " + where(lead->at));
        }
        g.lane[first + l]->result = g.lane[first + (by_xor ? (l ^ arg) : arg)]->value;
      }
      break;
    }
    default:
      for (unsigned l = 0; l < n; ++l) { g.lane[first + l]->result = 0; }
      break;
  }
  for (unsigned l = 0; l < n; ++l) { g.lane[first + l]->state = lane_state::runnable; }
}

/// A tile whose lanes all stopped: resolves its collective, leaves it at a block barrier, or
/// reports lanes that went separate ways.
void settle_tile(lane_group& g, unsigned tile) {
  unsigned const n = g.shape.lanes_per_tile;
  unsigned const first = tile * n;
  unsigned done = 0;
  unsigned at_block = 0;
  for (unsigned l = 0; l < n; ++l) {
    fiber const* f = g.lane[first + l];
    if (f->state == lane_state::runnable || f->state == lane_state::spinning) { return; }
    done += f->state == lane_state::done ? 1u : 0u;
    at_block += f->state == lane_state::waiting && is_block_collective(f->at.kind) ? 1u : 0u;
  }
  std::string const tile_name = g.fibers > n ? " of tile " + std::to_string(tile) : std::string();
  if (done == n) { return; }
  if (done != 0) {
    stop(g, hazard_kind::lane_left_early,
         "lane_left_early: in step " + std::to_string(g.step) + " some lanes" + tile_name +
             " returned while others wait in a collective" + positions(g, first, n));
  }
  fiber const* lead = g.lane[first];
  for (unsigned l = 1; l < n; ++l) {
    if (!same_site(g.lane[first + l]->at, lead->at)) {
      stop(g, hazard_kind::divergent_collective,
           "divergent_collective: the lanes" + tile_name + " in step " + std::to_string(g.step) +
               " reached different collectives" + positions(g, first, n));
    }
  }
  if (at_block == 0) { resolve_collective(g, first); }
}

/// A block whose threads all wait at a barrier (or returned): releases them, or reports threads
/// that returned or stand at another barrier (__syncthreads must be reached by the whole block).
void settle_block(lane_group& g, unsigned block) {
  unsigned const first = block * g.block_fibers;
  unsigned done = 0;
  fiber const* lead = nullptr;
  for (unsigned i = first; i < first + g.block_fibers; ++i) {
    fiber const* f = g.lane[i];
    if (f->state == lane_state::done) {
      ++done;
      continue;
    }
    if (f->state != lane_state::waiting || !is_block_collective(f->at.kind)) { return; }
    if (lead == nullptr) { lead = f; }
    if (!same_site(f->at, lead->at)) {
      stop(g, hazard_kind::divergent_collective,
           "divergent_collective: the threads of block " + std::to_string(block) + " in step " +
               std::to_string(g.step) + " wait at different barriers" +
               positions(g, first, g.block_fibers));
    }
  }
  if (lead == nullptr) { return; }
  if (done != 0) {
    stop(g, hazard_kind::lane_left_early,
         "lane_left_early: in step " + std::to_string(g.step) + " " + std::to_string(done) +
             " threads of block " + std::to_string(block) +
             " returned while the others wait at a block barrier" +
             positions(g, first, g.block_fibers));
  }
  std::uint64_t count = 0;
  for (unsigned i = first; i < first + g.block_fibers; ++i) { count += g.lane[i]->value & 1u; }
  for (unsigned i = first; i < first + g.block_fibers; ++i) {
    g.lane[i]->result = count;
    g.lane[i]->state = lane_state::runnable;
  }
}

/// The lanes that run in step @p step, in their order: all runnable ones, by index when
/// @p seed is 0, else in an order drawn from the seed and the step.
void step_order(lane_group const& g, std::uint64_t seed, std::vector<unsigned>& order) {
  order.clear();
  for (unsigned i = 0; i < g.fibers; ++i) {
    lane_state const s = g.lane[i]->state;
    if (s == lane_state::runnable || s == lane_state::spinning) { order.push_back(i); }
  }
  if (seed == 0) { return; }
  std::mt19937_64 rng(seed ^ (g.step * 0x9E3779B97F4A7C15ull));
  std::shuffle(order.begin(), order.end(), rng);
}

/// Restores the spin hook a run replaced (runs nest only by a hazard's unwinding).
class spin_hook_scope {
 public:
  spin_hook_scope() : saved_(ccht::detail::lane_spin_hook) {
    ccht::detail::lane_spin_hook = &park_spinning;
  }
  ~spin_hook_scope() { ccht::detail::lane_spin_hook = saved_; }
  spin_hook_scope(spin_hook_scope const&) = delete;
  spin_hook_scope& operator=(spin_hook_scope const&) = delete;

 private:
  bool (*saved_)() noexcept;
};

/// Takes the calling thread's fibers for a run of @p g.fibers lanes.
void bind_fibers(lane_group& g, lane_body body, void* context) {
  runner_state& r = tls_runner;
  while (r.fibers.size() < g.fibers) { r.fibers.push_back(std::make_unique<fiber>()); }
  g.lane.resize(g.fibers);
  for (unsigned i = 0; i < g.fibers; ++i) {
    fiber* f = r.fibers[i].get();
    if (f->dirty) { f->prepare(); }
    f->body = body;
    f->context = context;
    f->lane = i;
    f->group = &g;
    f->state = lane_state::runnable;
    f->error = nullptr;
    g.lane[i] = f;
  }
}

/// After a step: a lane's exception or a racing store ends the run.
void check_step(lane_group& g) {
  for (fiber* f : g.lane) {
    if (f->error) {
      std::exception_ptr const e = std::exchange(f->error, nullptr);
      abandon(g);
      std::rethrow_exception(e);
    }
  }
  if (g.store_hazard) { stop(g, hazard_kind::racing_store, g.store_report); }
  g.stores.clear();
}

}  // namespace

void run_group(group_shape const& shape, lane_body body, void* context,
               run_options const& options) {
  if (tls_runner.current != nullptr) {
    throw std::logic_error("ccht::lanes::run: a lane cannot start another lockstep run");
  }
  unsigned const w = shape.lanes_per_tile;
  if (w == 0 || w > 32 || shape.tiles_per_block == 0 || shape.blocks == 0 ||
      std::uint64_t{w} * shape.tiles_per_block * shape.blocks > 65536) {
    throw std::invalid_argument(
        "ccht::lanes::run: 1 to 32 lanes per tile, at least one tile and block, 65536 lanes at "
        "most");
  }
  lane_group g;
  g.shape = shape;
  g.block_fibers = w * shape.tiles_per_block;
  g.fibers = g.block_fibers * shape.blocks;
  bind_fibers(g, body, context);
  spin_hook_scope const hook;
  std::vector<unsigned> order;
  for (;; ++g.step) {
    step_order(g, options.order_seed, order);
    if (order.empty()) {
      stop(g, hazard_kind::runaway, "runaway: no lane can go on in step " + std::to_string(g.step));
    }
    for (unsigned const i : order) {
      if (options.before_step) { options.before_step(i, g.step); }
      g.lane[i]->state = lane_state::runnable;
      resume(g.lane[i]);
    }
    check_step(g);
    bool all_done = true;
    for (fiber const* f : g.lane) { all_done = all_done && f->state == lane_state::done; }
    if (all_done) { return; }
    for (unsigned t = 0; t < g.fibers / w; ++t) { settle_tile(g, t); }
    for (unsigned b = 0; b < shape.blocks; ++b) { settle_block(g, b); }
    if (options.max_steps != 0 && g.step + 1 >= options.max_steps) {
      stop(g, hazard_kind::runaway,
           "runaway: " + std::to_string(options.max_steps) + " steps without returning" +
               positions(g, 0, g.fibers));
    }
  }
}

void run_lanes(unsigned lanes, lane_body body, void* context, run_options const& options) {
  run_group(group_shape{lanes, 1, 1}, body, context, options);
}

}  // namespace detail
}  // namespace ccht::lanes

extern "C" void ccht_lanes_fiber_main(void* f) {
  ccht::lanes::detail::fiber_loop(static_cast<ccht::lanes::detail::fiber*>(f));
}
