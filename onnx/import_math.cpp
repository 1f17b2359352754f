// The CPU kernels of the importer's own pointwise functors (import_math.h),
// and the helpers of import_helpers.h. The op groups call the helpers
// defined here, which is what keeps this object, and so its kernel
// registrations, in a link against the static library.
#include <ember/onnx/import_math.h>

#include <ember/onnx/import_helpers.h>

namespace ember::onnx::detail {

namespace fn {
EMBER_REGISTER_UNARY_FUNCTOR(Tan);
EMBER_REGISTER_UNARY_FUNCTOR(Asin);
EMBER_REGISTER_UNARY_FUNCTOR(Acos);
EMBER_REGISTER_UNARY_FUNCTOR(Atan);
EMBER_REGISTER_UNARY_FUNCTOR(Sinh);
EMBER_REGISTER_UNARY_FUNCTOR(Cosh);
EMBER_REGISTER_UNARY_FUNCTOR(Asinh);
EMBER_REGISTER_UNARY_FUNCTOR(Acosh);
EMBER_REGISTER_UNARY_FUNCTOR(Atanh);
EMBER_REGISTER_UNARY_FUNCTOR(Erf);
EMBER_REGISTER_UNARY_FUNCTOR(Floor);
EMBER_REGISTER_UNARY_FUNCTOR(Ceil);
EMBER_REGISTER_UNARY_FUNCTOR(Round);
EMBER_REGISTER_UNARY_FUNCTOR(Trunc);
EMBER_REGISTER_UNARY_FUNCTOR(Sign);
EMBER_REGISTER_UNARY_FUNCTOR(WrapInt);
EMBER_REGISTER_BINARY_FUNCTOR(ModFloor);
EMBER_REGISTER_BINARY_FUNCTOR(ModTrunc);
EMBER_REGISTER_BINARY_FUNCTOR(BitShift);
}  // namespace fn

DType dtype_of_onnx(const NodeArgs& a, int64_t t) {
  if (const auto dt = dtype_of_element(t)) return *dt;
  using TP = ::onnx::TensorProto;
  if (t == TP::STRING) a.unsupported("string tensors are not supported");
  if (t == TP::COMPLEX64 || t == TP::COMPLEX128) a.unsupported("complex tensors are not supported");
  a.unsupported("element type " + std::to_string(t) + " is not supported");
}

Tensor legacy_broadcast(const NodeArgs& a, const Tensor& x, const Tensor& b) {
  if (a.opset() >= 7 || a.attr_int("broadcast", 0) == 0 || b.dim() == 0) return b;
  // B's dims line up with A's from `axis` on (default: with A's last dims); size-1 dims are appended
  // after them so that B broadcasts over A's remaining trailing dims.
  const int64_t axis = a.has_attr("axis") ? norm_axis(a, a.attr_int("axis"), x.dim()) : x.dim() - b.dim();
  if (axis < 0 || axis + b.dim() > x.dim())
    a.invalid("B of shape " + b.shape().str() + " does not fit A of shape " + x.shape().str() + " at axis " +
              std::to_string(axis));
  Shape s = b.shape();
  for (int64_t i = axis + b.dim(); i < x.dim(); ++i) s.push_back(1);
  return b.reshape(s);
}

double scalar_value(const NodeArgs& a, size_t input) {
  const Tensor& t = a.input(input);
  if (t.numel() != 1)
    a.invalid("input " + std::to_string(input) + " must hold one value; it has shape " + t.shape().str());
  return t.cpu().to(DType::Float64).item<double>();
}

}  // namespace ember::onnx::detail
