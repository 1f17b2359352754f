// ONNX import: the window functions of opset 17 (HannWindow, HammingWindow,
// BlackmanWindow). With N = size and d = N (periodic, the default) or N - 1
// (symmetric), for n = 0 .. N - 1:
//   Hann      1/2 - 1/2 cos(2 pi n / d)
//   Hamming   25/46 - 21/46 cos(2 pi n / d)
//   Blackman  0.42 - 0.5 cos(2 pi n / d) + 0.08 cos(4 pi n / d)
// computed in float64 and returned in output_datatype (float by default).
#include <cmath>

#include <ember/onnx/import_helpers.h>

namespace ember::onnx::detail {

namespace {

using Outs = std::vector<Tensor>;

template <class F>
Outs window(const NodeArgs& a, F f) {
  const double size = scalar_value(a, 0);
  if (size < 0 || size > 1e9) a.invalid("size must be in [0, 1e9]");
  const int64_t n = static_cast<int64_t>(size);
  const double d = static_cast<double>(a.attr_int("periodic", 1) ? n : n - 1);
  std::vector<double> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = d == 0 ? 1.0 : f(2 * M_PI * static_cast<double>(i) / d);
  return {from_vector(v, Shape{n}).to(dtype_of_onnx(a, a.attr_int("output_datatype", ::onnx::TensorProto::FLOAT)))};
}

Outs hann_op(const NodeArgs& a) {
  return window(a, [](double t) { return 0.5 - 0.5 * std::cos(t); });
}
Outs hamming_op(const NodeArgs& a) {
  return window(a, [](double t) { return 25.0 / 46.0 - 21.0 / 46.0 * std::cos(t); });
}
Outs blackman_op(const NodeArgs& a) {
  return window(a, [](double t) { return 0.42 - 0.5 * std::cos(t) + 0.08 * std::cos(2 * t); });
}

}  // namespace

void register_signal_ops(OpTable& t) {
  t.add("HannWindow", hann_op);
  t.add("HammingWindow", hamming_op);
  t.add("BlackmanWindow", blackman_op);
}

}  // namespace ember::onnx::detail
