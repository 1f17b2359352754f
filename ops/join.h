/// \file
/// Joining and splitting along a dim, and constant padding.
#pragma once

#include <vector>

#include <ember/core/tensor.h>

namespace ember {

/// Concatenates along dim; all other dims must match. dtypes promote.
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim = 0);
/// Stacks equally shaped tensors along a new dim.
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim = 0);
/// Views of consecutive pieces of split_size along dim (the last may be smaller).
std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim = 0);
/// Views of pieces with the given sizes, which must add up to the dim's size.
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim = 0);
/// `chunks` views of ceil(size / chunks) elements (fewer if the dim runs out).
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim = 0);
/// Constant padding as torch.nn.functional.pad: pads = {left, right} for the
/// last dim, then {left, right} for the one before, and so on. Negative pads
/// (cropping) are not supported and throw ValueError.
Tensor pad(const Tensor& x, const std::vector<int64_t>& pads, double value = 0.0);

}  // namespace ember
