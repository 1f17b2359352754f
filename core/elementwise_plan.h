/// \file
/// The geometry of an elementwise op, worked out once for every backend.
///
/// Operand 0 is the output; inputs have already been broadcast to its shape
/// (expand gives broadcast dims stride 0). The plan drops size-1 dims and
/// merges adjacent dims that are contiguous for every operand, so a
/// contiguous op becomes one flat run and a transposed or broadcast one the
/// fewest nested loops. CPU loops (ops/cpu_loops.h) and CUDA kernels
/// (cuda/) both walk a plan; neither re-derives broadcasting.
#pragma once

#include <array>
#include <cstdint>

#include <ember/core/tensor.h>

namespace ember {

/// How N operands of one shape are walked: size-1 dims dropped, dims contiguous for every operand
/// merged (make_plan).
template <int N>
struct ElementwisePlan {
  int ndim = 0;                                            ///< >= 1 after planning
  std::array<int64_t, kMaxDims> sizes{};                   ///< outermost first
  std::array<std::array<int64_t, kMaxDims>, N> strides{};  ///< per operand, in elements
  int64_t numel = 0;                                       ///< elements in all

  /// True when every operand is one dense run: the fast path.
  bool contiguous() const {
    if (ndim != 1) return false;
    for (int k = 0; k < N; ++k)
      if (strides[k][0] != 1) return false;
    return true;
  }
};

/// ops[0] is the output; every operand must have its shape.
template <int N>
ElementwisePlan<N> make_plan(const std::array<const Tensor*, N>& ops) {
  ElementwisePlan<N> p;
  const Shape& shape = ops[0]->shape();
  p.numel = shape.numel();
  int nd = 0;
  for (int d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    p.sizes[nd] = shape[d];
    for (int k = 0; k < N; ++k) p.strides[k][nd] = ops[k]->strides()[d];
    ++nd;
  }
  // Merge dim i into i-1 when, for every operand, stepping dim i-1 once is the
  // same as stepping dim i size[i] times.
  int out = 0;
  for (int d = 0; d < nd; ++d) {
    if (out > 0) {
      bool mergeable = true;
      for (int k = 0; k < N; ++k)
        if (p.strides[k][out - 1] != p.strides[k][d] * p.sizes[d]) mergeable = false;
      if (mergeable) {
        p.sizes[out - 1] *= p.sizes[d];
        for (int k = 0; k < N; ++k) p.strides[k][out - 1] = p.strides[k][d];
        continue;
      }
    }
    p.sizes[out] = p.sizes[d];
    for (int k = 0; k < N; ++k) p.strides[k][out] = p.strides[k][d];
    ++out;
  }
  if (out == 0) {  // a single element
    p.sizes[0] = 1;
    for (int k = 0; k < N; ++k) p.strides[k][0] = 1;
    out = 1;
  }
  p.ndim = out;
  return p;
}

}  // namespace ember
