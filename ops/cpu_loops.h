/// \file
/// CPU loops over an ElementwisePlan: the contiguous fast path the compiler
/// vectorises, and the strided fallback for transposed and broadcast operands.
/// Large ops are split over the thread pool by element range.
#pragma once

#include <algorithm>
#include <utility>

#include <ember/core/elementwise_plan.h>
#include <ember/core/parallel.h>

namespace ember::cpu {

/// Elements per parallel chunk: below this an op runs on the calling thread.
inline constexpr int64_t kGrain = 32768;

/// Calls run(ptrs, strides, n) for 1-D runs covering elements [lo, hi) of the
/// plan; ptrs point at each operand's first element of the run.
template <int N, class Run>
void for_each_run(const ElementwisePlan<N>& p, const std::array<char*, N>& base, const std::array<int64_t, N>& elsize,
                  int64_t lo, int64_t hi, const Run& run) {
  const int nd = p.ndim;
  const int64_t inner = p.sizes[nd - 1];
  // Multi-index of element lo (outer dims), and the offset in the inner dim.
  std::array<int64_t, kMaxDims> idx{};
  int64_t rem = lo / inner;
  int64_t in0 = lo % inner;
  for (int d = nd - 2; d >= 0; --d) {
    idx[d] = rem % p.sizes[d];
    rem /= p.sizes[d];
  }
  std::array<int64_t, N> istride;
  for (int k = 0; k < N; ++k) istride[k] = p.strides[k][nd - 1] * elsize[k];
  int64_t pos = lo;
  while (pos < hi) {
    std::array<char*, N> ptr;
    for (int k = 0; k < N; ++k) {
      int64_t off = in0 * p.strides[k][nd - 1];
      for (int d = 0; d < nd - 1; ++d) off += idx[d] * p.strides[k][d];
      ptr[k] = base[k] + off * elsize[k];
    }
    const int64_t n = std::min(inner - in0, hi - pos);
    run(ptr, istride, n);
    pos += n;
    in0 = 0;
    for (int d = nd - 2; d >= 0; --d) {
      if (++idx[d] < p.sizes[d]) break;
      idx[d] = 0;
    }
  }
}

/// out = f(in...) elementwise; operands are typed pointers of Out and In...
template <class Out, class... In, class F>
void map(Tensor& out, const std::array<const Tensor*, sizeof...(In)>& ins, const F& f) {
  constexpr int N = sizeof...(In) + 1;
  std::array<const Tensor*, N> ops;
  ops[0] = &out;
  for (size_t i = 0; i < ins.size(); ++i) ops[i + 1] = ins[i];
  const ElementwisePlan<N> p = make_plan<N>(ops);
  std::array<char*, N> base;
  for (int k = 0; k < N; ++k) base[k] = static_cast<char*>(ops[k]->data_ptr());
  const std::array<int64_t, N> elsize{static_cast<int64_t>(sizeof(Out)), static_cast<int64_t>(sizeof(In))...};
  if (p.contiguous()) {
    parallel_for(0, p.numel, kGrain, [&](int64_t lo, int64_t hi) {
      [&]<size_t... I>(std::index_sequence<I...>) {
        Out* o = reinterpret_cast<Out*>(base[0]);
        [[maybe_unused]] const std::array<const void*, N - 1> in{base[I + 1]...};
        for (int64_t i = lo; i < hi; ++i) o[i] = f(static_cast<const In*>(in[I])[i]...);
      }
      (std::index_sequence_for<In...>{});
    });
    return;
  }
  parallel_for(0, p.numel, kGrain, [&](int64_t lo, int64_t hi) {
    for_each_run<N>(p, base, elsize, lo, hi,
                    [&](const std::array<char*, N>& ptr, const std::array<int64_t, N>& st, int64_t n) {
                      bool dense = true;  // every operand contiguous along this run
                      for (int k = 0; k < N; ++k) dense = dense && st[k] == elsize[k];
                      if (dense) {
                        // A broadcast bias, a permuted copy with contiguous rows: indexed
                        // like the contiguous path, so the compiler vectorises the run.
                        [&]<size_t... I>(std::index_sequence<I...>) {
                          Out* o = reinterpret_cast<Out*>(ptr[0]);
                          [[maybe_unused]] const std::array<const char*, N - 1> in{ptr[I + 1]...};
                          for (int64_t i = 0; i < n; ++i) o[i] = f(reinterpret_cast<const In*>(in[I])[i]...);
                        }
                        (std::index_sequence_for<In...>{});
                        return;
                      }
                      [&]<size_t... I>(std::index_sequence<I...>) {
                        char* o = ptr[0];
                        [[maybe_unused]] std::array<const char*, N - 1> in{ptr[I + 1]...};
                        for (int64_t i = 0; i < n; ++i) {
                          *reinterpret_cast<Out*>(o) = f(*reinterpret_cast<const In*>(in[I])...);
                          o += st[0];
                          ((in[I] += st[I + 1]), ...);
                        }
                      }
                      (std::index_sequence_for<In...>{});
                    });
  });
}

}  // namespace ember::cpu
