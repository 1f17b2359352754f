/// \file
/// The SIMT emulator: CUDA kernel source compiled by the host C++ compiler
/// and run on the CPU with CUDA's execution semantics.
///
/// defines: dim3, threadIdx/blockIdx/blockDim/gridDim, __global__/__device__/
/// __shared__, __syncthreads, __syncwarp, __shfl_sync/_xor/_down/_up,
/// __ballot_sync/__any_sync/__all_sync, atomicAdd/Max/Min/CAS/Exch,
/// __threadfence, the float intrinsics the kernels use, and
/// ember::emu::launch (what cuda/launch.h calls instead of <<<...>>>).
///
/// How a launch runs: every CUDA thread is a user-space fiber with its own
/// stack. All threads of a block run on one OS thread, switching only where a
/// GPU thread could be held back (a barrier or a warp collective), so
/// `__shared__` is simply per-OS-thread storage (`static thread_local`) and
/// blocks are spread over cores with Ember's parallel_for. A hand-rolled
/// context switch (x86-64: six register pushes) keeps a switch at a few ns;
/// ucontext's swapcontext makes a system call per switch.
///
/// What it checks (see docs/CUDA.md for what it cannot):
///  - a __syncthreads that only part of the block reaches (some threads
///    exited or wait at another barrier) throws DeviceError naming file:line;
///  - a warp collective whose mask names lanes that never arrive or do not
///    exist throws;
///  - `EMBER_EMU_SHUFFLE=<seed>` (or set_schedule_seed) runs the threads of each
///    block in a seeded random order, reshuffled at every barrier phase, so a
///    kernel that leans on thread order without a barrier gives wrong results;
///  - built with -fsanitize=thread, fibers are TSan fibers and only barriers
///    and __syncwarp order memory, so a missing barrier is a reported race.
#pragma once

#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <type_traits>

/// CUDA's dim3: a grid or block size, or an index (uint3).
struct dim3 {
  ///@{
  unsigned x, y, z;  ///< the three components
  ///@}
  /// Unnamed components are 1, as in CUDA.
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
/// threadIdx and blockIdx's type (the same struct here).
using uint3 = dim3;

namespace ember::emu {

/// Lanes per warp, as on every NVIDIA GPU.
inline constexpr int kWarpSize = 32;

/// The state of the block running on this OS thread and of the fiber (CUDA
/// thread) running in it; set by the scheduler before every switch.
struct BlockInfo {
  ///@{
  dim3 block_idx, block_dim, grid_dim;  ///< blockIdx, blockDim, gridDim
  ///@}
};
/// The CUDA thread (fiber) running now.
struct ThreadInfo {
  dim3 thread_idx;  ///< threadIdx
  unsigned linear;  ///< x + y*bx + z*bx*by
};
/// Atomics (relaxed: plain loads and stores on x86) only so that a TSan build
/// does not count the scheduler's bookkeeping as the kernel's races.
///@{
extern thread_local constinit std::atomic<const BlockInfo*> t_block;
extern thread_local constinit std::atomic<const ThreadInfo*> t_thread;
///@}

/// One launch: grid and block sizes, dynamic shared memory, and the kernel's
/// name for error messages.
struct LaunchConfig {
  ///@{
  dim3 grid, block;  ///< <<<grid, block>>>
  ///@}
  size_t shared_bytes = 0;      ///< dynamic shared memory per block (at most 48 KiB)
  const char* name = "kernel";  ///< the kernel, as errors name it
};

/// Runs body once per CUDA thread of the grid; returns when all have finished.
/// Throws DeviceError for an invalid configuration or a semantics violation.
void launch(const LaunchConfig& cfg, const std::function<void()>& body);

/// Thread order within a block: 0 runs threads in order; any other value
/// shuffles them with that seed. The default comes from EMBER_EMU_SHUFFLE.
///@{
void set_schedule_seed(uint64_t seed);
uint64_t schedule_seed();
///@}

/// Device-side primitives (called through the CUDA names below).
///@{
void syncthreads(const char* file, int line);
void syncwarp(unsigned mask);
enum class ShflKind { Idx, Xor, Down, Up };
uint64_t shfl(unsigned mask, uint64_t value, int arg, int width, ShflKind kind);
unsigned ballot(unsigned mask, bool pred);
void* dynamic_shared();
///@}

/// shfl for any 4- or 8-byte trivially copyable T (through its bits).
template <class T>
T shfl_typed(unsigned mask, T v, int arg, int width, ShflKind kind) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>, "__shfl_sync: 4- or 8-byte values only");
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  bits = shfl(mask, bits, arg, width, kind);
  T out;
  std::memcpy(&out, &bits, sizeof(T));
  return out;
}

}  // namespace ember::emu

// ---- the CUDA spellings ---------------------------------------------------------
/// CUDA's function and pointer qualifiers, which mean nothing on the host.
///@{
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__
#define __launch_bounds__(...)
#define __restrict__ __restrict
///@}
/// Per block: all threads of a block share the OS thread, blocks on one OS
/// thread run one after another.
///@{
#define __shared__ static thread_local
#define threadIdx (::ember::emu::t_thread.load(std::memory_order_relaxed)->thread_idx)
#define blockIdx (::ember::emu::t_block.load(std::memory_order_relaxed)->block_idx)
#define blockDim (::ember::emu::t_block.load(std::memory_order_relaxed)->block_dim)
#define gridDim (::ember::emu::t_block.load(std::memory_order_relaxed)->grid_dim)
#define warpSize 32
#define __syncthreads() ::ember::emu::syncthreads(__FILE__, __LINE__)
///@}

/// CUDA's warp-level intrinsics with CUDA's semantics: the lanes in mask
/// meet (a mask naming a lane that never arrives is a DeviceError), then
/// exchange values (4- or 8-byte), vote, or fence.
///@{
inline void __syncwarp(unsigned mask = 0xffffffffu) { ::ember::emu::syncwarp(mask); }
template <class T>
T __shfl_sync(unsigned mask, T v, int src, int width = 32) {
  return ::ember::emu::shfl_typed(mask, v, src, width, ::ember::emu::ShflKind::Idx);
}
template <class T>
T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
  return ::ember::emu::shfl_typed(mask, v, lane_mask, width, ::ember::emu::ShflKind::Xor);
}
template <class T>
T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  return ::ember::emu::shfl_typed(mask, v, static_cast<int>(delta), width, ::ember::emu::ShflKind::Down);
}
template <class T>
T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  return ::ember::emu::shfl_typed(mask, v, static_cast<int>(delta), width, ::ember::emu::ShflKind::Up);
}
inline unsigned __ballot_sync(unsigned mask, int pred) { return ::ember::emu::ballot(mask, pred != 0); }
inline int __any_sync(unsigned mask, int pred) { return ::ember::emu::ballot(mask, pred != 0) != 0; }
inline int __all_sync(unsigned mask, int pred) {
  return ::ember::emu::ballot(mask, pred != 0) == (mask & ::ember::emu::ballot(mask, true));
}
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline void __threadfence_block() { std::atomic_thread_fence(std::memory_order_seq_cst); }
///@}

/// Atomics: real atomics, since blocks run on several OS threads at once.
///@{
template <class T>
T atomicAdd(T* p, T v) {
  return std::atomic_ref<T>(*p).fetch_add(v, std::memory_order_relaxed);
}
template <class T>
T atomicExch(T* p, T v) {
  return std::atomic_ref<T>(*p).exchange(v, std::memory_order_relaxed);
}
template <class T>
T atomicCAS(T* p, T expected, T desired) {
  std::atomic_ref<T>(*p).compare_exchange_strong(expected, desired, std::memory_order_relaxed);
  return expected;
}
template <class T>
T atomicMax(T* p, T v) {
  std::atomic_ref<T> r(*p);
  T old = r.load(std::memory_order_relaxed);
  while (old < v && !r.compare_exchange_weak(old, v, std::memory_order_relaxed)) {}
  return old;
}
template <class T>
T atomicMin(T* p, T v) {
  std::atomic_ref<T> r(*p);
  T old = r.load(std::memory_order_relaxed);
  while (v < old && !r.compare_exchange_weak(old, v, std::memory_order_relaxed)) {}
  return old;
}
///@}

/// Math intrinsics the kernels use that the C library lacks. The emulator
/// computes them with the host libm: results may differ from the device's in
/// the last bits (docs/CUDA.md).
///@{
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }
inline float __expf(float x) { return std::exp(x); }
inline float __logf(float x) { return std::log(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __int_as_float(int v) {
  float f;
  std::memcpy(&f, &v, 4);
  return f;
}
inline int __float_as_int(float f) {
  int v;
  std::memcpy(&v, &f, 4);
  return v;
}
template <class T>
T __ldg(const T* p) {
  return *p;
}
inline int __popc(unsigned v) { return __builtin_popcount(v); }
inline int __ffs(int v) { return __builtin_ffs(v); }
///@}
