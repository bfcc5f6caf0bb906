// The lockstep runner of include/ccht/lanes/lockstep_tile.hpp: lanes are fibers on the calling
// thread, switched by a dozen instructions (x86-64) or ucontext elsewhere, with the sanitizers
// told about every switch so that ASan and TSan follow the stacks.
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
  unsigned lane = 0;
  lane_group* group = nullptr;
  bool done = false;
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
    makecontext(&ctx, reinterpret_cast<void (*)()>(&ccht_lanes_fiber_main), 1, static_cast<void*>(this));
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
  __sanitizer_finish_switch_fiber(nullptr, &tls_runner.runner_stack, &tls_runner.runner_stack_bytes);
#endif
  while (true) {  // one body per run; between runs the fiber waits here, parked
    try {  // an exception must not unwind past the fiber's first frame
      f->body(f->context, f->lane, f->group);
    } catch (...) {
      f->error = std::current_exception();
    }
    f->done = true;
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
  }
  return out;
}

bool same_site(call_site const& a, call_site const& b) {
  return a.kind == b.kind && a.line == b.line && a.column == b.column &&
         (a.file == b.file || std::string_view(a.file) == std::string_view(b.file));
}

}  // namespace

/// The lanes of one run and the hazard a lane's store hook found, if any.
class lane_group {
 public:
  unsigned lanes = 0;
  fiber* lane[32] = {};
  std::uint64_t step = 0;
  // stores of this step: (address, lane); a second lane storing to one word is a hazard
  std::vector<std::pair<std::uintptr_t, unsigned>> stores;
  bool store_hazard = false;
  std::string store_report;
};

std::uint64_t arrive(lane_group* group, unsigned lane, call_site const& site, std::uint64_t value,
                     unsigned arg) {
  fiber* f = group->lane[lane];
  f->at = site;
  f->value = value;
  f->arg = arg;
  park(f);
  return f->result;
}

bool in_lane() noexcept { return tls_runner.current != nullptr; }

void note_store(void const* address) noexcept {
  fiber* f = tls_runner.current;
  if (f == nullptr) { return; }
  lane_group* g = f->group;
  auto const a = reinterpret_cast<std::uintptr_t>(address);
  for (auto const& [at, lane] : g->stores) {
    if (at == a && lane != f->lane && !g->store_hazard) {
      g->store_hazard = true;
      std::ostringstream os;
      os << "racing_store: lanes " << lane << " and " << f->lane << " stored to one word in step "
         << g->step << " with no collective between them";
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
  for (unsigned l = 0; l < g.lanes; ++l) {
    if (!g.lane[l]->done) { g.lane[l]->dirty = true; }
  }
}

/// Stops a run with a hazard.
[[noreturn]] void stop(lane_group& g, hazard_kind kind, std::string const& report) {
  abandon(g);
  throw hazard(kind, report);
}

/// The lanes' positions, for a report.
std::string positions(lane_group const& g) {
  std::ostringstream os;
  for (unsigned l = 0; l < g.lanes; ++l) {
    fiber const* f = g.lane[l];
    os << "\n  lane " << l << ": " << (f->done ? std::string("returned") : where(f->at));
  }
  return os.str();
}

/// Every lane waits in a collective: check they all reached the same one, then resolve it.
void resolve(lane_group& g) {
  fiber* const first = g.lane[0];
  for (unsigned l = 1; l < g.lanes; ++l) {
    if (!same_site(g.lane[l]->at, first->at)) {
      stop(g, hazard_kind::divergent_collective,
           "divergent_collective: the lanes of step " + std::to_string(g.step) +
               " reached different collectives" + positions(g));
    }
  }
  unsigned const n = g.lanes;
  switch (first->at.kind) {
    case collective::ballot: {
      std::uint64_t mask = 0;
      for (unsigned l = 0; l < n; ++l) { mask |= (g.lane[l]->value & 1u) << l; }
      for (unsigned l = 0; l < n; ++l) { g.lane[l]->result = mask; }
      break;
    }
    case collective::shfl:
    case collective::shfl_xor: {
      bool const by_xor = first->at.kind == collective::shfl_xor;
      for (unsigned l = 0; l < n; ++l) {
        unsigned const arg = g.lane[l]->arg;
        if (arg >= n) {
          stop(g, hazard_kind::lane_out_of_range,
               std::string("lane_out_of_range: lane ") + std::to_string(l) +
                   (by_xor ? " shuffles with xor mask " : " reads lane ") + std::to_string(arg) +
                   " of a " + std::to_string(n) + "-lane tile at " + where(first->at));
        }
        g.lane[l]->result = g.lane[by_xor ? (l ^ arg) : arg]->value;
      }
      break;
    }
    case collective::sync:
      for (unsigned l = 0; l < n; ++l) { g.lane[l]->result = 0; }
      break;
  }
}

/// The order of the lanes in step @p step.
void lane_order(unsigned n, std::uint64_t seed, std::uint64_t step, unsigned (&order)[32]) {
  for (unsigned l = 0; l < n; ++l) { order[l] = l; }
  if (seed == 0) { return; }
  std::mt19937_64 rng(seed ^ (step * 0x9E3779B97F4A7C15ull));
  std::shuffle(order, order + n, rng);
}

}  // namespace

void run_lanes(unsigned lanes, lane_body body, void* context, run_options const& options) {
  runner_state& r = tls_runner;
  if (r.current != nullptr) {
    throw std::logic_error("ccht::lanes::run: a lane cannot start another lockstep run");
  }
  if (lanes == 0 || lanes > 32) { throw std::invalid_argument("ccht::lanes::run: 1 to 32 lanes"); }
  while (r.fibers.size() < lanes) { r.fibers.push_back(std::make_unique<fiber>()); }
  lane_group g;
  g.lanes = lanes;
  for (unsigned l = 0; l < lanes; ++l) {
    fiber* f = r.fibers[l].get();
    if (f->dirty) { f->prepare(); }
    f->body = body;
    f->context = context;
    f->lane = l;
    f->group = &g;
    f->done = false;
    f->error = nullptr;
    g.lane[l] = f;
  }
  unsigned order[32];
  for (;; ++g.step) {
    lane_order(lanes, options.order_seed, g.step, order);
    for (unsigned i = 0; i < lanes; ++i) {
      fiber* f = g.lane[order[i]];
      if (options.before_step) { options.before_step(order[i], g.step); }
      resume(f);
    }
    for (unsigned l = 0; l < lanes; ++l) {
      if (g.lane[l]->error) {
        std::exception_ptr const e = std::exchange(g.lane[l]->error, nullptr);
        abandon(g);
        std::rethrow_exception(e);
      }
    }
    if (g.store_hazard) { stop(g, hazard_kind::racing_store, g.store_report); }
    g.stores.clear();
    unsigned done = 0;
    for (unsigned l = 0; l < lanes; ++l) { done += g.lane[l]->done ? 1u : 0u; }
    if (done == lanes) { return; }
    if (done != 0) {
      stop(g, hazard_kind::lane_left_early,
           "lane_left_early: in step " + std::to_string(g.step) +
               " some lanes returned while others wait in a collective" + positions(g));
    }
    resolve(g);
    if (options.max_steps != 0 && g.step + 1 >= options.max_steps) {
      stop(g, hazard_kind::runaway,
           "runaway: " + std::to_string(options.max_steps) + " steps without returning" +
               positions(g));
    }
  }
}

}  // namespace detail
}  // namespace ccht::lanes

extern "C" void ccht_lanes_fiber_main(void* f) {
  ccht::lanes::detail::fiber_loop(static_cast<ccht::lanes::detail::fiber*>(f));
}
