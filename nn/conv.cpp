// Conv2d (nn/conv.h): the parameters with PyTorch's initialisation, and
// forward through ops/conv's conv2d.
#include <ember/nn/conv.h>

#include <cmath>

#include <ember/nn/init.h>
#include <ember/ops/conv.h>
#include <ember/ops/factory.h>

namespace ember::nn {

Conv2d::Conv2d(int64_t in, int64_t out, Size2 k, Size2 s, Size2 p, bool has_bias)
    : in_channels(in), out_channels(out), kernel_size(k), stride(s), padding(p) {
  Tensor w = empty({out, in, k[0], k[1]});
  init::kaiming_uniform_(w, std::sqrt(5.0));
  weight = register_parameter("weight", w);
  if (has_bias) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(in * k[0] * k[1]));
    Tensor b = empty({out});
    init::uniform_(b, -bound, bound);
    bias = register_parameter("bias", b);
  }
}

Tensor Conv2d::forward(const Tensor& x) { return conv2d(x, weight, bias, stride, padding); }

}  // namespace ember::nn
