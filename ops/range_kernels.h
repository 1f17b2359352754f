/// \file
/// What element i of arange and linspace is, as a pure function of (spec, i):
/// shared by the CPU kernel (ops/factory.cpp) and the CUDA kernel
/// (cuda/factory.cu), so both devices produce the same bits and a CUDA range
/// is computed on the device, without a copy from the host (which a CUDA
/// graph capture refuses).
#pragma once

#include <cmath>
#include <cstdint>

#include <ember/core/dispatch.h>
#include <ember/core/hostdevice.h>
#include <ember/core/tensor.h>

namespace ember {

/// A range of n values, computed in double and converted to the output's
/// dtype: element i < split is start + i step, element i >= split is
/// end - (n - 1 - i) step (linspace fills from both ends, as PyTorch does, so
/// its last value is exactly end; arange has split = n).
struct RangeSpec {
  double start, step, end;
  int64_t n, split;
};

/// Element i of spec's range, in double. The product and sum are one fused
/// multiply-add, rounded once, on every device: written as a * b + c the
/// compilers would contract it on some targets and not on others.
EMBER_HD inline double range_value(const RangeSpec& s, int64_t i) {
  return i < s.split ? std::fma(static_cast<double>(i), s.step, s.start)
                     : std::fma(-static_cast<double>(s.n - 1 - i), s.step, s.end);
}

/// Fills out (contiguous, spec.n elements, any dtype) with spec's values,
/// each converted from double as Tensor::to converts a float64 tensor.
extern KernelTable<void(Tensor& out, const RangeSpec& spec)> range_kernel;

}  // namespace ember
