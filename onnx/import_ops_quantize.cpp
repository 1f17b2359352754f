// ONNX import: linear quantization (QuantizeLinear, DequantizeLinear,
// DynamicQuantizeLinear), with int8 and uint8 values held in int64.
//
//   quantize:    y = saturate(round(x / scale) + zero_point)   (round halves to even)
//   dequantize:  x = (y - zero_point) * scale
// A scale and zero point are one value, or one per entry of `axis`
// (opset 13). Which integer type saturates is the zero point's declared
// type (NodeArgs::input_type): int8 clamps to [-128, 127], uint8 (also the
// default without a zero point) to [0, 255]. The arithmetic is float32, as
// ONNX's reference computes it.
#include <ember/onnx/import_helpers.h>
#include <ember/onnx/import_math.h>
#include <ember/ops/reduce.h>

namespace ember::onnx::detail {

namespace {

using Outs = std::vector<Tensor>;

// scale or zero point broadcast against x: a 1-D one lies along axis.
Tensor along_axis(const NodeArgs& a, const Tensor& p, const Tensor& x) {
  if (p.numel() == 1) return p.reshape({});
  const int64_t axis = norm_axis(a, a.attr_int("axis", 1), x.dim());
  if (p.dim() != 1 || p.size(0) != x.size(axis))
    a.invalid("a per-axis scale or zero point must be 1-D of size " + std::to_string(x.size(axis)));
  Shape s = Shape::filled(x.dim(), 1);
  s[static_cast<int>(axis)] = p.size(0);
  return p.reshape(s);
}

// round(v) + zp, saturated to the range of the zero point's type.
Tensor saturate(const Tensor& v, const Tensor& zp, bool int8) {
  Tensor q = run_unary<fn::Round>(v);
  if (zp.defined()) q = add(q, zp.to(kFloat32));
  return clamp(q, int8 ? -128.0 : 0.0, int8 ? 127.0 : 255.0).to(kInt64);
}

Outs quantize_linear_op(const NodeArgs& a) {
  const Tensor x = a.input(0).to(kFloat32);
  const Tensor scale = along_axis(a, a.input(1).to(kFloat32), x);
  Tensor zp;
  if (a.has_input(2)) zp = along_axis(a, a.input(2), x);
  const int t = a.input_type(2);
  if (t != 0 && t != ::onnx::TensorProto::INT8 && t != ::onnx::TensorProto::UINT8)
    a.unsupported("zero points of element type " + std::to_string(t));
  return {saturate(div(x, scale), zp, t == ::onnx::TensorProto::INT8)};
}

Outs dequantize_linear_op(const NodeArgs& a) {
  const Tensor x = a.input(0).to(kFloat32);
  const Tensor scale = along_axis(a, a.input(1).to(kFloat32), x);
  Tensor v = x;
  if (a.has_input(2)) v = sub(v, along_axis(a, a.input(2), x).to(kFloat32));
  return {mul(v, scale)};
}

// uint8 quantization of x over the range [min(x, 0), max(x, 0)]: scale = (max - min) / 255, zero point
// round(-min / scale).
Outs dynamic_quantize_linear_op(const NodeArgs& a) {
  const Tensor x = a.input(0).to(kFloat32);
  const float lo = x.numel() ? std::min(min(x).item<float>(), 0.0f) : 0.0f;
  const float hi = x.numel() ? std::max(max(x).item<float>(), 0.0f) : 0.0f;
  const float scale = (hi - lo) / 255.0f;
  if (scale == 0) return {zeros(x.shape(), kInt64), scalar_tensor(0.0), scalar_tensor(0, kInt64)};
  const Tensor zp = saturate(scalar_tensor(static_cast<double>(0.0f - lo / scale)), Tensor(), false);
  return {saturate(div(x, scalar_tensor(scale)), zp, false), scalar_tensor(scale), zp};
}

}  // namespace

void register_quantize_ops(OpTable& t) {
  t.add("QuantizeLinear", quantize_linear_op);
  t.add("DequantizeLinear", dequantize_linear_op);
  t.add("DynamicQuantizeLinear", dynamic_quantize_linear_op);
}

}  // namespace ember::onnx::detail
