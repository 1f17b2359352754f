/// \file
/// Reductions over any set of dims, with keepdim, as in PyTorch. An empty dim
/// list reduces over all dims.
#pragma once

#include <ember/core/dispatch.h>
#include <ember/core/tensor.h>

namespace ember {

/// Sum over all elements (a 0-dim tensor), or over dims (keepdim keeps them as size 1). Integer inputs
/// sum to int64.
///@{
Tensor sum(const Tensor& x);
Tensor sum(const Tensor& x, const Shape& dims, bool keepdim = false);
///@}
/// Mean over all elements, or over dims; floating inputs only.
///@{
Tensor mean(const Tensor& x);
Tensor mean(const Tensor& x, const Shape& dims, bool keepdim = false);
///@}
/// Variance and standard deviation with Bessel's correction by default
/// (correction = 1, as torch.var); correction = 0 gives the population value.
///@{
Tensor var(const Tensor& x, const Shape& dims, int64_t correction = 1, bool keepdim = false);
Tensor std(const Tensor& x, const Shape& dims, int64_t correction = 1, bool keepdim = false);
///@}
/// log(sum(exp(x))) computed stably (the max is subtracted first).
Tensor logsumexp(const Tensor& x, const Shape& dims, bool keepdim = false);

/// Largest / smallest value over all elements.
///@{
Tensor max(const Tensor& x);
Tensor min(const Tensor& x);
///@}
/// What max and min along a dim return.
struct ValuesIndices {
  Tensor values;   ///< the largest or smallest values
  Tensor indices;  ///< their positions along dim (int64)
};
/// The tensors of a ValuesIndices, for an exporter's record (core/onnx_lowering.h).
inline void add_outputs(std::vector<Tensor>& out, const ValuesIndices& r) {
  out.push_back(r.values), out.push_back(r.indices);
}
/// Values and their int64 indices along one dim (the first occurrence on ties).
///@{
ValuesIndices max(const Tensor& x, int64_t dim, bool keepdim = false);
ValuesIndices min(const Tensor& x, int64_t dim, bool keepdim = false);
///@}
/// Over a set of dims, values only (torch.amax / amin).
///@{
Tensor amax(const Tensor& x, const Shape& dims, bool keepdim = false);
Tensor amin(const Tensor& x, const Shape& dims, bool keepdim = false);
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor argmin(const Tensor& x, int64_t dim, bool keepdim = false);
///@}
/// Over all elements, as an index into the flattened tensor.
Tensor argmax(const Tensor& x);

/// Kernels (a backend registers these). Every reduction first views its input
/// as a contiguous [A, R, B] block x3 (ops/reduce_layout.h) and reduces R.
/// out[a, b] = sum_r x3[a, r, b]; out: [A, B], x3's dtype (float64 math for
/// floats on the CPU).
extern KernelTable<void(const Tensor& x3, Tensor& out)> sum_kernel;
/// values2[a, b] = max_r (is_max) or min_r x3[a, r, b]; indices2: [A, B] int64
/// (the first r on ties) or undefined when only values are wanted.
extern KernelTable<void(const Tensor& x3, Tensor& values2, Tensor& indices2, bool is_max)> minmax_kernel;

}  // namespace ember
