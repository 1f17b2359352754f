// gradcheck: autograd gradients against central finite differences.
#include <ember/ops/gradcheck.h>

#include <cmath>
#include <sstream>

#include <ember/core/autograd.h>
#include <ember/ops/elementwise.h>
#include <ember/ops/factory.h>
#include <ember/ops/reduce.h>

namespace ember {

namespace {

// Storage offsets (in elements) of every element of t, in row-major order.
std::vector<int64_t> element_offsets(const Tensor& t) {
  std::vector<int64_t> offs;
  offs.reserve(static_cast<size_t>(t.numel()));
  std::vector<int64_t> idx(static_cast<size_t>(t.dim()), 0);
  for (int64_t n = 0; n < t.numel(); ++n) {
    int64_t off = t.offset();
    for (int d = 0; d < t.dim(); ++d) off += idx[d] * t.strides()[d];
    offs.push_back(off);
    for (int d = t.dim() - 1; d >= 0; --d) {
      if (++idx[d] < t.shape()[d]) break;
      idx[d] = 0;
    }
  }
  return offs;
}

double loss_value(const GradcheckFn& fn, const std::vector<Tensor>& inputs, const Tensor& w) {
  NoGradGuard no_grad;
  return sum(mul(fn(inputs).to(DType::Float64), w)).item<double>();
}

}  // namespace

GradcheckResult gradcheck(const GradcheckFn& fn, const std::vector<Tensor>& inputs, GradcheckOptions opts) {
  GradcheckResult res;
  for (const Tensor& t : inputs)
    EMBER_CHECK(!t.defined() || t.device().is_cpu(), DeviceError, "gradcheck: inputs must be CPU tensors");

  // Analytical gradients.
  for (const Tensor& t : inputs)
    if (t.defined() && t.requires_grad()) const_cast<Tensor&>(t).zero_grad();
  Tensor out = fn(inputs);
  Generator gen(1234);
  const Tensor w = rand(out.shape(), TensorOptions(DType::Float64), &gen);
  Tensor loss = sum(mul(out.to(DType::Float64), w));
  bool any = false;
  for (const Tensor& t : inputs) any = any || (t.defined() && t.requires_grad());
  EMBER_CHECK(any, ValueError, "gradcheck: no input requires grad");
  EMBER_CHECK(loss.requires_grad(), AutogradError, "gradcheck: the output does not depend on any input that ",
              "requires grad (is the op missing its backward?)");
  loss.backward();

  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& x = inputs[i];
    if (!x.defined() || !x.requires_grad()) continue;
    EMBER_CHECK(x.dtype() == DType::Float64, DTypeError, "gradcheck: input ", i, " is ", dtype_name(x.dtype()),
                "; use float64 inputs");
    const Tensor g = x.grad();
    const std::vector<double> analytic =
        g.defined() ? g.to_vector<double>() : std::vector<double>(static_cast<size_t>(x.numel()), 0.0);
    const std::vector<int64_t> offs = element_offsets(x);
    double* base = static_cast<double*>(x.storage()->data());
    for (size_t e = 0; e < offs.size(); ++e) {
      const double orig = base[offs[e]];
      base[offs[e]] = orig + opts.eps;
      const double lp = loss_value(fn, inputs, w);
      base[offs[e]] = orig - opts.eps;
      const double lm = loss_value(fn, inputs, w);
      base[offs[e]] = orig;
      const double numeric = (lp - lm) / (2 * opts.eps);
      const double a = analytic[e];
      if (!(std::fabs(a - numeric) <= opts.atol + opts.rtol * std::fabs(numeric))) {
        std::ostringstream os;
        os << "gradcheck: input " << i << " (shape " << x.shape().str() << "), element " << e << ": analytical " << a
           << " vs numerical " << numeric;
        res.ok = false;
        res.message = os.str();
        return res;
      }
    }
  }
  return res;
}

}  // namespace ember
