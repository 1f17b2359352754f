/// \file
/// How a reduction sees its input: as a contiguous [A, R, B] block, reducing
/// R. Reduced dims that are adjacent in a contiguous tensor need no copy
/// (sum over the last dim: B = 1; over the first: A = 1); other dim sets are
/// permuted to the end and copied once. Backends then implement only the
/// [A, R, B] -> [A, B] kernel.
#pragma once

#include <ember/core/tensor.h>

namespace ember {

/// A reduction's input as a contiguous [A, R, B] block (reduce_layout()).
struct ReduceLayout {
  Tensor x3;         ///< [A, R, B], contiguous, no autograd
  Shape out_shape;   ///< the result's shape (keepdim applied)
  Shape keep_shape;  ///< the result's shape with keepdim = true
  ///@{
  int64_t A = 1, R = 1, B = 1;  ///< outer, reduced and inner sizes
  ///@}
  std::vector<bool> reduced;  ///< per input dim
};

/// dims empty = all dims. Throws IndexError naming op for a bad dim.
ReduceLayout reduce_layout(const Tensor& x, const Shape& dims, bool keepdim, const char* op);

}  // namespace ember
