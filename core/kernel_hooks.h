/// \file
/// The switches every kernel-table call tests: the profiler and the anomaly
/// mode share one atomic word, so a call with both off costs one relaxed load
/// and one predictable branch (core/dispatch.h), however many hooks exist.
#pragma once

#include <atomic>

namespace ember::detail {

enum : unsigned { kHookProfiler = 1u, kHookAnomaly = 2u };
extern std::atomic<unsigned> g_kernel_hooks;  ///< defined in core/anomaly.cpp

inline unsigned kernel_hooks() { return g_kernel_hooks.load(std::memory_order_relaxed); }
inline void set_kernel_hook(unsigned bit, bool on) {
  if (on)
    g_kernel_hooks.fetch_or(bit, std::memory_order_relaxed);
  else
    g_kernel_hooks.fetch_and(~bit, std::memory_order_relaxed);
}

}  // namespace ember::detail
