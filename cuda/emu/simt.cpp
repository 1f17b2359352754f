// The SIMT emulator's scheduler: fibers, barriers, warp collectives.
//
// A block runs as rounds over its fibers (in order, or in a seeded shuffled
// order). A fiber runs until it finishes or must wait (a barrier or a warp
// collective not everyone has reached); waiting is "check, yield, check
// again". A round in which no fiber made progress is a deadlock, which on a
// GPU is a hang or undefined behaviour: we report what each thread waits at.
#include <ember/cuda/emu/async_copy.h>
#include <ember/cuda/emu/simt.h>

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <exception>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <ember/core/error.h>
#include <ember/core/parallel.h>

#if defined(__SANITIZE_THREAD__)
#define EMBER_EMU_TSAN 1
extern "C" {
void* __tsan_get_current_fiber(void);
void* __tsan_create_fiber(unsigned flags);
void __tsan_destroy_fiber(void* fiber);
void __tsan_switch_to_fiber(void* fiber, unsigned flags);
void __tsan_acquire(void* addr);
void __tsan_release(void* addr);
}
#else
#define EMBER_EMU_TSAN 0
#endif

// AddressSanitizer must be told about every stack switch (or it reports
// false stack errors, notably when an exception unwinds inside a fiber).
#if defined(__SANITIZE_ADDRESS__) && !defined(EMBER_EMU_NO_ASAN_ANNOTATIONS)
#define EMBER_EMU_ASAN 1
extern "C" {
void __sanitizer_start_switch_fiber(void** fake_stack_save, const void* bottom, size_t size);
void __sanitizer_finish_switch_fiber(void* fake_stack_save, const void** bottom_old, size_t* size_old);
void __asan_unpoison_memory_region(const volatile void* addr, size_t size);
}
#else
#define EMBER_EMU_ASAN 0
#endif

namespace ember::emu {

thread_local constinit std::atomic<const BlockInfo*> t_block{nullptr};
thread_local constinit std::atomic<const ThreadInfo*> t_thread{nullptr};

namespace {

// ---- context switching ------------------------------------------------------------
#if defined(__x86_64__)
// switch_context(&save, next): pushes the callee-saved registers, stores the
// stack pointer in *save, loads next and pops its registers. A new fiber's
// stack is prepared so that the first switch "returns" into fiber_start,
// which calls r12 = entry(rbx = argument).
extern "C" void ember_emu_switch(void** save, void* next);
extern "C" void ember_emu_fiber_start();
asm(R"(
  .text
  .p2align 4
  .globl ember_emu_switch
  .hidden ember_emu_switch
  .type ember_emu_switch,@function
ember_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size ember_emu_switch,.-ember_emu_switch
  .p2align 4
  .globl ember_emu_fiber_start
  .hidden ember_emu_fiber_start
  .type ember_emu_fiber_start,@function
ember_emu_fiber_start:
  movq %rbx, %rdi
  callq *%r12
  ud2
  .size ember_emu_fiber_start,.-ember_emu_fiber_start
)");

struct Context {
  void* sp = nullptr;
};
void prepare(Context& c, char* stack_top, void (*entry)(void*), void* arg) {
  // After the 6 pops and the ret, rsp must be 16-byte aligned so that the
  // call in fiber_start leaves the callee's stack as the ABI wants it.
  auto top = reinterpret_cast<uintptr_t>(stack_top) & ~uintptr_t{15};
  auto* slots = reinterpret_cast<void**>(top - 16 - 7 * sizeof(void*));
  slots[0] = nullptr;                                          // r15
  slots[1] = nullptr;                                          // r14
  slots[2] = nullptr;                                          // r13
  slots[3] = reinterpret_cast<void*>(entry);                   // r12
  slots[4] = arg;                                              // rbx
  slots[5] = nullptr;                                          // rbp
  slots[6] = reinterpret_cast<void*>(&ember_emu_fiber_start);  // ret
  c.sp = slots;
}
inline void switch_to(Context& from, Context& to) { ember_emu_switch(&from.sp, to.sp); }
#else
#error "CUDA emulator: the fiber context switch is written for x86-64 only (add one, or a ucontext fallback)"
#endif

constexpr size_t kStackSize = 64 * 1024;
constexpr size_t kMaxSharedBytes = 48 * 1024;  // the default per-block limit
constexpr unsigned kMaxThreads = 1024;

enum class State : uint8_t { Ready, Barrier, Warp, Done };

struct Block;

struct Fiber {
  Context ctx;
  char* stack = nullptr;  // lowest address (a guard page below)
  void* asan_fake_stack = nullptr;
  ThreadInfo info;
  Block* block = nullptr;
  std::atomic<State> state{State::Ready};
  // Where it waits, for the deadlock report.
  const char* file = nullptr;
  int line = 0;
#if EMBER_EMU_TSAN
  void* tsan = nullptr;
#endif
};

struct Warp {
  // Collective in progress: which lanes arrived and a generation that moves
  // on when the last one does. Values travel through slots, double-buffered
  // by the generation's parity: a lane can be at most one collective ahead
  // of a lane still reading (it waits for that lane at the next one), so one
  // rendezvous per shuffle is enough.
  std::atomic<unsigned> arrived_mask{0};
  std::atomic<unsigned> mask{0};
  std::atomic<uint64_t> generation{0};
  std::atomic<uint64_t> slots[2][kWarpSize];
  std::atomic<uint8_t> preds[2][kWarpSize];
};

struct Block {
  BlockInfo info;
  unsigned nthreads = 0;
  std::vector<Fiber*> fibers;
  std::vector<Warp> warps;
  uint64_t serial = 0;  // unique per block run: cp.async's pending copies are the block's
  // __syncthreads bookkeeping.
  std::atomic<unsigned> barrier_arrived{0};
  std::atomic<uint64_t> barrier_generation{0};
  std::atomic<const char*> barrier_file{nullptr};
  std::atomic<int> barrier_line{0};
  std::atomic<uint64_t> progress{0};
  std::exception_ptr error;
  Context scheduler;
  const std::function<void()>* body = nullptr;
  // The scheduler's (OS thread's) stack, learnt by the first fiber (ASan).
  const void* scheduler_stack_bottom = nullptr;
  size_t scheduler_stack_size = 0;
  void* scheduler_fake_stack = nullptr;
#if EMBER_EMU_TSAN
  void* tsan_scheduler = nullptr;
  char barrier_sync[2];
  char warp_sync[1];
  char done_sync;
#endif
};

// Per OS thread: fiber stacks and the dynamic shared memory, reused by every
// block this thread runs.
struct Worker {
  std::vector<std::unique_ptr<Fiber>> fibers;
  std::vector<char> dyn_shared;
  size_t shared_bytes = 0;  // the running launch's dynamic shared memory
  Block* current = nullptr;
  std::atomic<Fiber*> running{nullptr};  // atomic for TSan's sake, as t_thread

  ~Worker() {
    for (auto& f : fibers)
      if (f->stack) munmap(f->stack - 4096, kStackSize + 4096);
  }
  Fiber* fiber(size_t i) {
    while (fibers.size() <= i) {
      auto f = std::make_unique<Fiber>();
      void* mem = mmap(nullptr, kStackSize + 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (mem == MAP_FAILED) throw std::bad_alloc();
      mprotect(mem, 4096, PROT_NONE);  // guard page: a stack overflow faults
      f->stack = static_cast<char*>(mem) + 4096;
      fibers.push_back(std::move(f));
    }
    return fibers[i].get();
  }
};
thread_local Worker t_worker;

std::atomic<uint64_t> g_seed{0};
std::atomic<uint64_t> g_block_serial{0};
std::atomic<bool> g_seed_read{false};

Worker& worker() { return t_worker; }

Fiber& self() {
  Fiber* f = worker().running.load(std::memory_order_relaxed);
  if (!f) throw DeviceError("CUDA emulator: a device function was called outside a kernel launch");
  return *f;
}

// Back to the scheduler; returns when the scheduler resumes this fiber.
void yield(Fiber& f) {
  Block& b = *f.block;
#if EMBER_EMU_TSAN
  __tsan_switch_to_fiber(b.tsan_scheduler, 1 /* no sync: fibers order memory only at barriers */);
#endif
#if EMBER_EMU_ASAN
  __sanitizer_start_switch_fiber(&f.asan_fake_stack, b.scheduler_stack_bottom, b.scheduler_stack_size);
#endif
  switch_to(f.ctx, b.scheduler);
#if EMBER_EMU_ASAN
  __sanitizer_finish_switch_fiber(f.asan_fake_stack, nullptr, nullptr);
#endif
  t_block.store(&b.info, std::memory_order_relaxed);
  t_thread.store(&f.info, std::memory_order_relaxed);
}

void fiber_entry(void* arg) {
  Fiber& f = *static_cast<Fiber*>(arg);
  Block& b = *f.block;
#if EMBER_EMU_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &b.scheduler_stack_bottom, &b.scheduler_stack_size);
#endif
  try {
    (*b.body)();
  } catch (...) {
    if (!b.error) b.error = std::current_exception();
  }
  void* const scheduler_sp = b.scheduler.sp;
#if EMBER_EMU_TSAN
  void* const scheduler_fiber = b.tsan_scheduler;
#endif
  f.state.store(State::Done, std::memory_order_relaxed);
  b.progress.fetch_add(1, std::memory_order_relaxed);
#if EMBER_EMU_TSAN
  // Everything this thread did happens before the end of the block (the
  // scheduler acquires it), as a kernel's writes are visible after it ends.
  // After this, the block (on the scheduler's stack) is not touched again.
  __tsan_release(&b.done_sync);
  __tsan_switch_to_fiber(scheduler_fiber, 1);
#endif
#if EMBER_EMU_ASAN
  __sanitizer_start_switch_fiber(nullptr, b.scheduler_stack_bottom, b.scheduler_stack_size);  // for good
#endif
  ember_emu_switch(&f.ctx.sp, scheduler_sp);
  __builtin_trap();  // a finished fiber is never resumed
}

std::string dim_str(const dim3& d) {
  return "(" + std::to_string(d.x) + "," + std::to_string(d.y) + "," + std::to_string(d.z) + ")";
}

[[noreturn]] void fail(const Block& b, const std::string& what) {
  throw DeviceError("CUDA emulator: block " + dim_str(b.info.block_idx) + ": " + what);
}

// Explains a round without progress: who waits where, who exited.
[[noreturn]] void report_deadlock(const Block& b) {
  unsigned done = 0, at_barrier = 0, at_warp = 0;
  std::map<std::string, unsigned> sites;
  for (unsigned i = 0; i < b.nthreads; ++i) {
    const Fiber& f = *b.fibers[i];
    const State s = f.state.load(std::memory_order_relaxed);
    if (s == State::Done) ++done;
    if (s == State::Barrier) ++at_barrier;
    if (s == State::Warp) ++at_warp;
    if (s == State::Barrier || s == State::Warp)
      ++sites[s == State::Barrier ? "__syncthreads() at " + std::string(f.file) + ":" + std::to_string(f.line)
                                  : std::string(f.file)];
  }
  std::ostringstream os;
  if (at_barrier && !at_warp) {
    os << "__syncthreads() reached by " << at_barrier << " of " << b.nthreads << " threads (" << done
       << " exited without reaching it): every thread of a block must reach the same barrier";
  } else {
    os << "deadlock: " << at_barrier << " threads wait at a barrier, " << at_warp
       << " at a warp collective whose mask names lanes that never arrive, " << done << " exited";
  }
  for (const auto& [site, n] : sites) os << "; " << n << " at " << site;
  fail(b, os.str());
}

void run_block(Block& b, Worker& w, uint64_t seed, uint64_t block_linear) {
  const unsigned n = b.nthreads;
  b.fibers.resize(n);
  for (unsigned i = 0; i < n; ++i) {
    Fiber* f = w.fiber(i);
    f->block = &b;
    f->state.store(State::Ready, std::memory_order_relaxed);
    const dim3& bd = b.info.block_dim;
    f->info.linear = i;
    f->info.thread_idx = dim3(i % bd.x, (i / bd.x) % bd.y, i / (bd.x * bd.y));
#if EMBER_EMU_ASAN
    // A fiber abandoned mid-kernel (after an error) left its frames'
    // redzones poisoned on this stack.
    __asan_unpoison_memory_region(f->stack, kStackSize);
#endif
    prepare(f->ctx, f->stack + kStackSize, &fiber_entry, f);
#if EMBER_EMU_TSAN
    f->tsan = __tsan_create_fiber(0);
#endif
    b.fibers[i] = f;
  }
  std::vector<unsigned> order(n);
  for (unsigned i = 0; i < n; ++i) order[i] = i;
  std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull + block_linear);
#if EMBER_EMU_TSAN
  b.tsan_scheduler = __tsan_get_current_fiber();
#endif
  unsigned live = n;
  while (live > 0) {
    if (seed) std::shuffle(order.begin(), order.end(), rng);
    const uint64_t before = b.progress.load(std::memory_order_relaxed);
    for (unsigned i : order) {
      Fiber& f = *b.fibers[i];
      if (f.state.load(std::memory_order_relaxed) == State::Done) continue;
      w.running.store(&f, std::memory_order_relaxed);
      t_block.store(&b.info, std::memory_order_relaxed);
      t_thread.store(&f.info, std::memory_order_relaxed);
#if EMBER_EMU_TSAN
      __tsan_switch_to_fiber(f.tsan, 0);
#endif
#if EMBER_EMU_ASAN
      __sanitizer_start_switch_fiber(&b.scheduler_fake_stack, f.stack, kStackSize);
#endif
      switch_to(b.scheduler, f.ctx);
#if EMBER_EMU_ASAN
      __sanitizer_finish_switch_fiber(b.scheduler_fake_stack, nullptr, nullptr);
#endif
      w.running.store(nullptr, std::memory_order_relaxed);
      if (f.state.load(std::memory_order_relaxed) == State::Done) --live;
      if (b.error) break;
    }
    if (b.error) break;
    if (live > 0 && b.progress.load(std::memory_order_relaxed) == before) {
      try {
        report_deadlock(b);
      } catch (...) {
        b.error = std::current_exception();
      }
      break;
    }
  }
#if EMBER_EMU_TSAN
  __tsan_acquire(&b.done_sync);
  for (unsigned i = 0; i < n; ++i) __tsan_destroy_fiber(b.fibers[i]->tsan);
#endif
  t_block.store(nullptr, std::memory_order_relaxed);
  t_thread.store(nullptr, std::memory_order_relaxed);
  if (b.error) std::rethrow_exception(b.error);
}

}  // namespace

void set_schedule_seed(uint64_t seed) {
  g_seed.store(seed);
  g_seed_read.store(true);
}

uint64_t schedule_seed() {
  if (!g_seed_read.load()) {
    const char* e = std::getenv("EMBER_EMU_SHUFFLE");
    uint64_t s = 0;
    if (e && *e) s = std::strtoull(e, nullptr, 10);
    uint64_t expected = 0;
    (void)expected;
    g_seed.store(s);
    g_seed_read.store(true);
  }
  return g_seed.load();
}

void launch(const LaunchConfig& cfg, const std::function<void()>& body) {
  const dim3 g = cfg.grid, bd = cfg.block;
  const uint64_t nthreads = uint64_t{bd.x} * bd.y * bd.z;
  const uint64_t nblocks = uint64_t{g.x} * g.y * g.z;
  auto bad = [&](const std::string& why) {
    throw DeviceError(std::string("CUDA emulator: launch of ") + cfg.name + " with grid " + dim_str(g) + ", block " +
                      dim_str(bd) + ": invalid configuration argument (" + why + ")");
  };
  if (nthreads == 0 || nblocks == 0) bad("a zero dimension");
  if (nthreads > kMaxThreads) bad("more than 1024 threads per block");
  if (bd.z > 64) bad("blockDim.z > 64");
  if (g.y > 65535 || g.z > 65535) bad("gridDim.y or .z > 65535");
  if (cfg.shared_bytes > kMaxSharedBytes) bad("more than 48 KiB of dynamic shared memory");
  const uint64_t seed = schedule_seed();
  parallel_for(0, static_cast<int64_t>(nblocks), 1, [&](int64_t lo, int64_t hi) {
    Worker& w = worker();
    if (w.dyn_shared.size() < cfg.shared_bytes + 128) w.dyn_shared.resize(cfg.shared_bytes + 128);
    w.shared_bytes = cfg.shared_bytes;
    for (int64_t i = lo; i < hi; ++i) {
      Block b;
      b.info.grid_dim = g;
      b.info.block_dim = bd;
      b.info.block_idx = dim3(static_cast<unsigned>(i % g.x), static_cast<unsigned>((i / g.x) % g.y),
                              static_cast<unsigned>(i / (uint64_t{g.x} * g.y)));
      b.nthreads = static_cast<unsigned>(nthreads);
      b.warps = std::vector<Warp>((nthreads + kWarpSize - 1) / kWarpSize);
      b.body = &body;
      b.serial = g_block_serial.fetch_add(1, std::memory_order_relaxed);
      w.current = &b;
      struct Reset {
        Worker& w;
        ~Reset() { w.current = nullptr; }
      } reset{w};
      run_block(b, w, seed, static_cast<uint64_t>(i));
    }
  });
}

// ---- device-side primitives ---------------------------------------------------------

void syncthreads(const char* file, int line) {
  Fiber& f = self();
  Block& b = *f.block;
  const uint64_t gen = b.barrier_generation.load(std::memory_order_relaxed);
  const unsigned arrived = b.barrier_arrived.load(std::memory_order_relaxed);
  if (arrived == 0) {
    b.barrier_file.store(file, std::memory_order_relaxed);
    b.barrier_line.store(line, std::memory_order_relaxed);
  } else if (b.barrier_line.load(std::memory_order_relaxed) != line ||
             std::strcmp(b.barrier_file.load(std::memory_order_relaxed), file) != 0) {
    fail(b, "__syncthreads() at " + std::string(file) + ":" + std::to_string(line) + " reached while " +
                std::to_string(arrived) + " threads wait at the one at " +
                b.barrier_file.load(std::memory_order_relaxed) + ":" +
                std::to_string(b.barrier_line.load(std::memory_order_relaxed)) +
                ": threads of a block must reach the same barrier");
  }
#if EMBER_EMU_TSAN
  __tsan_release(&b.barrier_sync[gen & 1]);
#endif
  b.progress.fetch_add(1, std::memory_order_relaxed);
  if (arrived + 1 == b.nthreads) {
    b.barrier_arrived.store(0, std::memory_order_relaxed);
    b.barrier_generation.store(gen + 1, std::memory_order_relaxed);
  } else {
    b.barrier_arrived.store(arrived + 1, std::memory_order_relaxed);
    f.state.store(State::Barrier, std::memory_order_relaxed);
    f.file = file;
    f.line = line;
    while (b.barrier_generation.load(std::memory_order_relaxed) == gen) yield(f);
    f.state.store(State::Ready, std::memory_order_relaxed);
  }
#if EMBER_EMU_TSAN
  __tsan_acquire(&b.barrier_sync[gen & 1]);
#endif
}

namespace {

// Every lane in mask arrives; returns once all have. The lanes' slots may
// be read between the two halves of a collective (see shfl).
void warp_rendezvous(Fiber& f, unsigned mask, const char* what) {
  Block& b = *f.block;
  const unsigned lane = f.info.linear % kWarpSize;
  const unsigned warp_id = f.info.linear / kWarpSize;
  Warp& w = b.warps[warp_id];
  const unsigned lanes_here = std::min<unsigned>(kWarpSize, b.nthreads - warp_id * kWarpSize);
  const unsigned existing = lanes_here == kWarpSize ? 0xffffffffu : ((1u << lanes_here) - 1);
  if (!(mask & (1u << lane)))
    fail(b, std::string(what) + ": calling lane " + std::to_string(lane) + " of warp " + std::to_string(warp_id) +
                " is not in its mask");
  if (mask & ~existing) {
    std::ostringstream os;
    os << what << ": mask 0x" << std::hex << mask << " names lanes that do not exist in warp " << std::dec << warp_id
       << " (the block has " << b.nthreads << " threads)";
    fail(b, os.str());
  }
  const unsigned arrived = w.arrived_mask.load(std::memory_order_relaxed);
  if (arrived == 0)
    w.mask.store(mask, std::memory_order_relaxed);
  else if (w.mask.load(std::memory_order_relaxed) != mask) {
    std::ostringstream os;
    os << what << ": lanes of warp " << warp_id << " use different masks (0x" << std::hex
       << w.mask.load(std::memory_order_relaxed) << " and 0x" << mask << ")";
    fail(b, os.str());
  }
  const uint64_t gen = w.generation.load(std::memory_order_relaxed);
  b.progress.fetch_add(1, std::memory_order_relaxed);
  if ((arrived | (1u << lane)) == mask) {
    w.arrived_mask.store(0, std::memory_order_relaxed);
    w.generation.store(gen + 1, std::memory_order_relaxed);
    return;
  }
  w.arrived_mask.store(arrived | (1u << lane), std::memory_order_relaxed);
  f.state.store(State::Warp, std::memory_order_relaxed);
  f.file = what;
  f.line = 0;
  while (w.generation.load(std::memory_order_relaxed) == gen) yield(f);
  f.state.store(State::Ready, std::memory_order_relaxed);
}

void warp_sync_as(unsigned mask, const char* what) {
  Fiber& f = self();
  Block& b = *f.block;
  (void)b;
#if EMBER_EMU_TSAN
  __tsan_release(&b.warp_sync[0]);
#endif
  warp_rendezvous(f, mask, what);
#if EMBER_EMU_TSAN
  __tsan_acquire(&b.warp_sync[0]);
#endif
}
}  // namespace

void syncwarp(unsigned mask) { warp_sync_as(mask, "__syncwarp"); }
void warp_collective(const char* what) { warp_sync_as(0xffffffffu, what); }
uint64_t block_serial() { return self().block->serial; }

uint64_t shfl(unsigned mask, uint64_t value, int arg, int width, ShflKind kind) {
  Fiber& f = self();
  Block& b = *f.block;
  if (width <= 0 || width > kWarpSize || (width & (width - 1)))
    fail(b, "__shfl_sync: width " + std::to_string(width) + " is not a power of two up to 32");
  const int lane = static_cast<int>(f.info.linear % kWarpSize);
  Warp& w = b.warps[f.info.linear / kWarpSize];
  // Everyone publishes into this generation's buffer, meets, then reads.
  const unsigned buf = w.generation.load(std::memory_order_relaxed) & 1;
  w.slots[buf][lane].store(value, std::memory_order_relaxed);
  warp_rendezvous(f, mask, "__shfl_sync");
  const int base = lane & ~(width - 1);
  int src = lane;
  switch (kind) {
    case ShflKind::Idx:
      src = base + (arg & (width - 1));
      break;
    case ShflKind::Xor:
      src = lane ^ arg;
      if (src < base || src >= base + width) src = lane;
      break;
    case ShflKind::Down:
      src = lane + arg;
      if (src >= base + width) src = lane;
      break;
    case ShflKind::Up:
      src = lane - arg;
      if (src < base) src = lane;
      break;
  }
  if (!(mask & (1u << src)))
    fail(b, "__shfl_sync: lane " + std::to_string(lane) + " reads lane " + std::to_string(src) +
                ", which is not in the mask (undefined on a GPU)");
  return w.slots[buf][src].load(std::memory_order_relaxed);
}

unsigned ballot(unsigned mask, bool pred) {
  Fiber& f = self();
  Block& b = *f.block;
  const unsigned lane = f.info.linear % kWarpSize;
  Warp& w = b.warps[f.info.linear / kWarpSize];
  const unsigned buf = w.generation.load(std::memory_order_relaxed) & 1;
  w.preds[buf][lane].store(pred ? 1 : 0, std::memory_order_relaxed);
  warp_rendezvous(f, mask, "__ballot_sync");
  unsigned bits = 0;
  for (unsigned l = 0; l < kWarpSize; ++l)
    if ((mask & (1u << l)) && w.preds[buf][l].load(std::memory_order_relaxed)) bits |= 1u << l;
  return bits;
}

void* dynamic_shared() {
  Worker& w = worker();
  if (!w.running.load(std::memory_order_relaxed))
    throw DeviceError("CUDA emulator: dynamic shared memory used outside a kernel launch");
  auto p = reinterpret_cast<uintptr_t>(w.dyn_shared.data());
  return reinterpret_cast<void*>((p + 127) & ~uintptr_t{127});
}

bool in_dynamic_shared(const void* p, size_t bytes) {
  const auto lo = reinterpret_cast<uintptr_t>(dynamic_shared()), at = reinterpret_cast<uintptr_t>(p);
  return at >= lo && at - lo + bytes <= worker().shared_bytes;
}

}  // namespace ember::emu
