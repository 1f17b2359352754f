// Dropout, composed from the random and elementwise ops: keep = u >= p with
// u uniform in [0, 1) per element, y = x * keep / (1 - p). Its backward is
// the backward of that product: the incoming gradient times the same mask.
#include <ember/ops/dropout.h>

#include <ember/ops/elementwise.h>
#include <ember/ops/factory.h>

namespace ember {

Tensor dropout(const Tensor& x, double p, bool training, Generator* gen) {
  EMBER_CHECK(p >= 0.0 && p <= 1.0, ValueError, "dropout: probability has to be between 0 and 1, got ", p);
  EMBER_CHECK(x.is_floating_point(), DTypeError, "dropout: expected a floating-point tensor, got ",
              dtype_name(x.dtype()));
  if (!training || p == 0.0) return x;
  if (p == 1.0) return mul(x, 0.0);
  const Tensor u = rand(x.shape(), TensorOptions(x.dtype(), x.device()), gen);
  const Tensor scale = mul(ge(u, p).to(x.dtype()), 1.0 / (1.0 - p));
  return mul(x, scale);
}

}  // namespace ember
