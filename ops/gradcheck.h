/// \file
/// Finite-difference gradient checking, for built-in ops and for users who
/// add their own (torch.autograd.gradcheck).
///
/// fn maps the inputs to one output. The check draws fixed random weights w of
/// the output's shape and compares, for every element of every floating input
/// that requires grad, the autograd gradient of sum(w * fn(x)) with the
/// central difference (L(x + eps) - L(x - eps)) / 2 eps. Use float64 inputs:
/// float32 cannot resolve eps = 1e-6. Inputs may be non-contiguous (their
/// elements are perturbed through their strides) but must not overlap in
/// memory (no expanded leaves).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <ember/core/tensor.h>

namespace ember {

/// The finite-difference step and the tolerances: an element passes when |analytical - numerical| <=
/// atol + rtol |numerical|.
struct GradcheckOptions {
  double eps = 1e-6;   ///< the step of the central difference
  double atol = 1e-5;  ///< absolute tolerance
  double rtol = 1e-3;  ///< relative tolerance
};

/// Whether every checked element agreed, and the first mismatch.
struct GradcheckResult {
  bool ok = true;       ///< every element within tolerance
  std::string message;  ///< the first mismatch: input, element, analytical vs numerical
};

/// The function checked: inputs to one output.
using GradcheckFn = std::function<Tensor(const std::vector<Tensor>&)>;

/// Checks fn's autograd gradients against central differences for every element of every input that
/// requires grad (float64, CPU). Throws AutogradError when the output does not depend on any such input
/// (an op missing its backward).
GradcheckResult gradcheck(const GradcheckFn& fn, const std::vector<Tensor>& inputs, GradcheckOptions opts = {});

}  // namespace ember
