// cp.async under the SIMT emulator (declared in simt.h, used through
// cuda/mma.cuh): each CUDA thread's pending 16-byte copies and their commit
// groups. A copy takes its source when issued and lands in shared memory
// only when a cp.async.wait_group completes its group, the latest a GPU may
// land it, so a kernel that reads a tile before waiting (or before the
// barrier after the wait) reads stale data here and fails its tests.
#include <ember/cuda/emu/async_copy.h>
#include <ember/cuda/emu/simt.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <ember/core/error.h>

namespace ember::emu {
namespace {

struct Copy {
  void* dst;
  unsigned char bytes[16];
};

struct ThreadCopies {
  std::vector<Copy> pending;       // issued, not yet landed, oldest first
  std::vector<size_t> group_ends;  // pending's committed prefix, one end per group
};

// The copies of the block running on this OS thread, by linear thread index.
// A block that ends (or fails) with copies pending leaves them behind; the
// next block (another serial) starts afresh.
struct BlockCopies {
  uint64_t serial = ~uint64_t{0};
  std::vector<ThreadCopies> threads;
};
thread_local BlockCopies t_copies;

ThreadCopies& mine() {
  const ThreadInfo* t = t_thread.load(std::memory_order_relaxed);
  if (!t) throw DeviceError("CUDA emulator: cp.async called outside a kernel launch");
  const uint64_t serial = block_serial();
  if (t_copies.serial != serial) {
    t_copies.serial = serial;
    for (ThreadCopies& c : t_copies.threads) {
      c.pending.clear();
      c.group_ends.clear();
    }
  }
  if (t_copies.threads.size() <= t->linear) t_copies.threads.resize(t->linear + 1);
  return t_copies.threads[t->linear];
}

}  // namespace

void cp_async(void* dst, const void* src, int src_bytes) {
  const auto d = reinterpret_cast<uintptr_t>(dst), s = reinterpret_cast<uintptr_t>(src);
  if (d % 16 != 0 || !in_dynamic_shared(dst, 16))
    throw DeviceError("CUDA emulator: cp.async.cg: the destination " + std::to_string(d) +
                      " is not a 16-byte-aligned address in the block's dynamic shared memory");
  if (s % 16 != 0)
    throw DeviceError("CUDA emulator: cp.async.cg: the source " + std::to_string(s) +
                      " is not 16-byte aligned (a 16-byte copy needs both ends on 16 bytes)");
  if (src_bytes != 0 && src_bytes != 16)
    throw DeviceError("CUDA emulator: cp.async.cg: copies 0 or 16 source bytes here, got " + std::to_string(src_bytes));
  Copy c{dst, {}};
  if (src_bytes) std::memcpy(c.bytes, src, 16);
  mine().pending.push_back(c);
}

void cp_async_commit() {
  ThreadCopies& t = mine();
  t.group_ends.push_back(t.pending.size());
}

void cp_async_wait(int n) {
  if (n < 0) throw DeviceError("CUDA emulator: cp.async.wait_group: a negative group count");
  ThreadCopies& t = mine();
  if (t.group_ends.size() <= static_cast<size_t>(n)) return;
  const size_t keep_groups = static_cast<size_t>(n);
  const size_t done = t.group_ends[t.group_ends.size() - keep_groups - 1];  // copies of the completed groups
  for (size_t i = 0; i < done; ++i) std::memcpy(t.pending[i].dst, t.pending[i].bytes, 16);
  t.pending.erase(t.pending.begin(), t.pending.begin() + static_cast<std::ptrdiff_t>(done));
  t.group_ends.erase(t.group_ends.begin(), t.group_ends.end() - static_cast<std::ptrdiff_t>(keep_groups));
  for (size_t& e : t.group_ends) e -= done;
}

}  // namespace ember::emu
