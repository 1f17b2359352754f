/// \file
/// An op-level profiler: time and call count per kernel (forward and backward
/// kernels are separate tables, e.g. "softmax" and "softmax_backward"), and
/// per op (each op::call of a declared op, its inner ops and kernels
/// included, with the FLOPs its declaration counts), plus the matmul FLOPs,
/// printed as tables like torch.profiler's key_averages.
///
/// \code
///   { ember::profiler::Guard g;  train_step(); }   // or EMBER_PROFILE=1
///   std::puts(ember::profiler::report().c_str());
/// \endcode
///
/// Kernel tables check one relaxed atomic word per call (core/kernel_hooks.h), so a disabled
/// profiler costs a predictable branch. Times are host wall times around the
/// kernel call; a CUDA backend's kernels are asynchronous and would need a
/// synchronisation to be timed (not done here).
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include <ember/core/device.h>
#include <ember/core/kernel_hooks.h>

namespace ember::profiler {

namespace detail {
extern std::atomic<uint64_t> g_matmul_flops;
extern std::atomic<uint64_t> g_device_launches;
}  // namespace detail

/// Whether the profiler records kernel times, and turning it on or off.
///@{
inline bool enabled() { return (ember::detail::kernel_hooks() & ember::detail::kHookProfiler) != 0; }
void enable(bool on);
///@}

/// Enables the profiler for a scope (restoring the previous state after).
class Guard {
 public:
  Guard() : was_(enabled()) { enable(true); }
  ~Guard() { enable(was_); }
  Guard(const Guard&) = delete;
  Guard& operator=(const Guard&) = delete;

 private:
  bool was_;
};

/// With synchronizing on, a kernel on an asynchronous device (a GPU) is
/// timed from an idle device to its completion, so its row holds device
/// time (host and device serialised: slower, for finding where a step's
/// time goes). Off by default.
///@{
void set_synchronizing(bool on);
bool synchronizing();
///@}
namespace detail {
/// A backend's wait for its device (cuda::synchronize), registered once.
void register_synchronize(DeviceType type, void (*wait)(int device));
void synchronize(Device device);
}  // namespace detail

/// Called by KernelTable when enabled.
void record_kernel(const char* name, double seconds);
/// Called by op::call (core/op.h) when enabled: one call of a declared op,
/// its wall time (nested ops and kernels included) and FLOPs (0: not counted).
void record_op(const char* name, double seconds, int64_t flops);

/// Matmul FLOPs (2 m n k per product) counted always, profiler on or off:
/// the benchmarks divide them by step time.
///@{
inline void add_matmul_flops(uint64_t flops) { detail::g_matmul_flops.fetch_add(flops, std::memory_order_relaxed); }
inline uint64_t matmul_flops() { return detail::g_matmul_flops.load(std::memory_order_relaxed); }
///@}

/// Work handed to an accelerator's stream (kernel launches, library calls
/// such as a cuBLAS GEMM, asynchronous copies), counted always: each costs
/// host time to issue, which on a GPU bounds a step of many small ops. The
/// benchmarks report launches per step.
///@{
inline void add_device_launch() { detail::g_device_launches.fetch_add(1, std::memory_order_relaxed); }
inline uint64_t device_launches() { return detail::g_device_launches.load(std::memory_order_relaxed); }
///@}

/// One kernel's totals: its table's name, how many calls, and the seconds they took.
struct Row {
  std::string name;    ///< the kernel table's (or the op's) name
  int64_t calls = 0;   ///< calls recorded
  double seconds = 0;  ///< their total time
  int64_t flops = 0;   ///< ops only: the FLOPs their declarations counted
};
/// Kernels (rows) and declared ops (op_rows) seen since the last reset,
/// slowest first; reset clears both.
///@{
std::vector<Row> rows();
std::vector<Row> op_rows();
void reset();
///@}
/// The tables: kernel, calls, total ms, % of the total, mean us per call;
/// then op, calls, total ms, us per call and GFLOP/s where FLOPs are counted.
std::string report();

}  // namespace ember::profiler
