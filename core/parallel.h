/// \file
/// Ember's one thread pool and parallel_for.
///
/// All parallelism in Ember goes through this pool, GEMMs included: OpenBLAS
/// is pinned to one thread and Ember splits large products across the pool
/// itself (ops/matmul.cpp). So there is only one set of threads, and Ember's
/// loops and BLAS's threads never fight over the cores (what that fight costs
/// PyTorch: docs/PERFORMANCE.md, "Figures behind the code's comments").
///
/// parallel_for(begin, end, grain, f) calls f(lo, hi) on disjoint chunks
/// covering [begin, end); ranges smaller than grain run inline on the caller
/// with no synchronisation at all, which keeps tiny ops cheap. Nested calls run
/// inline. The thread count defaults to the number of cores, or the
/// EMBER_NUM_THREADS environment variable.
#pragma once

#include <cstdint>
#include <functional>

namespace ember {

/// The most threads the pool takes (set_num_threads refuses more; EMBER_NUM_THREADS is clamped to it).
inline constexpr int kMaxThreads = 1024;
/// The pool's thread count (the number of cores, or EMBER_NUM_THREADS), and changing it. set_num_threads
/// throws ValueError for n < 1, n > kMaxThreads, or when the system cannot start the threads (then the
/// pool keeps its previous count).
///@{
int num_threads();
void set_num_threads(int n);
///@}
/// True inside a parallel_for body running on the pool.
bool in_parallel_region();

namespace detail {
void parallel_run(int64_t begin, int64_t end, int64_t grain, const std::function<void(int64_t, int64_t)>& f);
}

/// Calls f(lo, hi) on disjoint chunks covering [begin, end), across the pool; inline when the range is
/// at most grain, when there is one thread, or inside another parallel_for.
template <class F>
void parallel_for(int64_t begin, int64_t end, int64_t grain, const F& f) {
  if (end <= begin) return;
  if (end - begin <= grain || num_threads() == 1 || in_parallel_region()) {
    f(begin, end);
    return;
  }
  detail::parallel_run(begin, end, grain, f);
}

}  // namespace ember
