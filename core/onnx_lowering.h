/// \file
/// How an op declares its ONNX form, its lowering, without core/ or ops/
/// seeing protobuf. An op's declaration (`OpDef::onnx`, core/op.h) points at
/// a `Lowering`: a function that writes one recorded call of the op as ONNX
/// nodes through the abstract `lowering::Graph` below. The ONNX layer
/// (onnx/export*.cpp) implements Graph, records a forward pass and writes
/// the file.
///
/// Recording: while a `Tracer` is installed on the thread, `op::call` hands
/// it every declared op's call (arguments and results, as a `Call`) and runs
/// the op's body with recording suspended, so the ops inside a body are not
/// recorded twice. An op declared `.onnx = lowering::decompose` is recorded
/// as the ops its body runs instead. An op without a lowering is still
/// handed to the tracer, which refuses it by name.
///
/// \code
///   // ops/elementwise.cpp
///   constexpr OpDef relu_op{.name = "relu", .onnx = lowering::unary<"Relu">};
///   // a lowering of one's own: y = x * sigmoid(x)
///   void lower_silu(lowering::Graph& g, const lowering::Call& c) {
///     const std::string x = g.value(c.tensor(0));
///     g.bind(c.outputs[0], g.node("Mul", {x, g.node("Sigmoid", {x})[0]})[0]);
///   }
/// \endcode
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include <ember/core/device.h>
#include <ember/core/shape.h>
#include <ember/core/tensor.h>

namespace ember {

struct OpDef;

namespace lowering {

/// One argument of a recorded call, as a lowering reads it.
struct Arg {
  enum class Kind : uint8_t { None, Tensor, Tensors, Int, Float, Bool, Ints, Other };
  Kind kind = Kind::None;
  ember::Tensor tensor;                ///< Kind::Tensor (None for an undefined tensor)
  std::vector<ember::Tensor> tensors;  ///< Kind::Tensors
  int64_t i = 0;                       ///< Kind::Int and Kind::Bool (0 or 1)
  double f = 0;                        ///< Kind::Float
  std::vector<int64_t> ints;           ///< Kind::Ints (a Shape, an array, a vector of sizes)
};

/// A std::array of integers.
template <class T>
concept IntArray = requires {
  std::tuple_size<T>::value;
  typename T::value_type;
}
&&std::is_integral_v<typename T::value_type>;

/// An argument of any type as an Arg: tensors, lists of tensors, integers and enums, floating values,
/// bools, shapes and integer lists, optionals of those; anything else (a generator, a device) is Other.
template <class T>
Arg to_arg(const T& v) {
  using U = std::decay_t<T>;
  Arg a;
  if constexpr (std::is_same_v<U, ember::Tensor>) {
    if (v.defined()) a.kind = Arg::Kind::Tensor, a.tensor = v;
  } else if constexpr (std::is_same_v<U, std::vector<ember::Tensor>>) {
    a.kind = Arg::Kind::Tensors, a.tensors = v;
  } else if constexpr (std::is_same_v<U, bool>) {
    a.kind = Arg::Kind::Bool, a.i = v;
  } else if constexpr (std::is_integral_v<U> || std::is_enum_v<U>) {
    a.kind = Arg::Kind::Int, a.i = static_cast<int64_t>(v);
  } else if constexpr (std::is_floating_point_v<U>) {
    a.kind = Arg::Kind::Float, a.f = static_cast<double>(v);
  } else if constexpr (std::is_same_v<U, Shape>) {
    a.kind = Arg::Kind::Ints, a.ints.assign(v.begin(), v.end());
  } else if constexpr (std::is_same_v<U, std::vector<int64_t>>) {
    a.kind = Arg::Kind::Ints, a.ints = v;
  } else if constexpr (IntArray<U>) {
    a.kind = Arg::Kind::Ints, a.ints.assign(v.begin(), v.end());
  } else if constexpr (requires {
                         v.has_value();
                         *v;
                       }) {
    if (v.has_value()) return to_arg(*v);
  } else {
    a.kind = Arg::Kind::Other;
  }
  return a;
}

/// One recorded call: the op, its arguments in order, its tensor results.
struct Call {
  const OpDef* op = nullptr;
  std::vector<Arg> args;
  std::vector<ember::Tensor> outputs;

  /// The op's name (for errors).
  const char* name() const;
  /// Argument i as a defined tensor / whether it is one.
  const ember::Tensor& tensor(size_t i) const;
  bool has_tensor(size_t i) const { return i < args.size() && args[i].kind == Arg::Kind::Tensor; }
  const std::vector<ember::Tensor>& tensors(size_t i) const;
  /// Argument i as an integer (Int or Bool), a floating value (Float or Int), or an integer list. A
  /// lowering that takes a size which may follow an input's dynamic axis asks Graph::ints instead.
  int64_t i(size_t i) const;
  double f(size_t i) const;
  const std::vector<int64_t>& ints(size_t i) const;
};

/// An ONNX attribute: an int, a float, a string, or a list of ints or floats.
struct Attr {
  std::string name;
  std::variant<int64_t, double, std::string, std::vector<int64_t>, std::vector<double>> value;
};

/// What a lowering writes into: ONNX values are named by strings.
class Graph {
 public:
  virtual ~Graph() = default;
  /// The value holding t: a graph input, an initializer (a parameter or buffer, by its state-dict name),
  /// an earlier op's result, or, for a tensor the record has not seen, a new constant.
  virtual std::string value(const ember::Tensor& t) = 0;
  /// Argument i of the call (Ints, Int, or a whole Float) as a 1-D int64 value. Where the sizes follow a dynamic axis
  /// of the graph's inputs, the value is computed from the input's shape, so the graph works for any size.
  virtual std::string ints(const Call& call, size_t i) = 0;
  /// The shape of result j of the call being lowered, as a 1-D int64 value, computed from the inputs'
  /// shapes where it follows their dynamic axes. The call's integer arguments count as written by it.
  virtual std::string shape(const Call& call, size_t j) = 0;
  /// A constant int64 1-D value, and a 0-d constant of dtype dt.
  virtual std::string constant_ints(const std::vector<int64_t>& v) = 0;
  virtual std::string scalar(double v, DType dt) = 0;
  /// Adds a node; returns its n_outputs output names.
  virtual std::vector<std::string> node(const std::string& op_type, const std::vector<std::string>& inputs,
                                        const std::vector<Attr>& attrs = {}, int n_outputs = 1) = 0;
  /// Records that t (a result of the call) is held in value.
  virtual void bind(const ember::Tensor& t, const std::string& value) = 0;
};

/// A lowering: writes call into g and binds every result of the call.
using Lowering = void (*)(Graph& g, const Call& call);

/// The lowering that means "record the ops this op's body runs instead" (never called).
void decompose(Graph& g, const Call& call);

/// ONNX's TensorProto element type for dt (1 float, 7 int64, 9 bool, 10 float16, 11 double, 16 bfloat16).
int onnx_dtype(DType dt);

/// Receives the calls of a forward pass (onnx/export*.cpp).
class Tracer {
 public:
  virtual ~Tracer() = default;
  /// A declared op ran (not called for ops declared `decompose`).
  virtual void record(Call call) = 0;
};

namespace detail {
/// The tracer installed on this thread, or null: op::call's one check.
extern thread_local Tracer* t_tracer;
}  // namespace detail

/// Installs a tracer on this thread for a scope (restoring the previous one).
class TraceScope {
 public:
  explicit TraceScope(Tracer* t) : prev_(detail::t_tracer) { detail::t_tracer = t; }
  ~TraceScope() { detail::t_tracer = prev_; }
  TraceScope(const TraceScope&) = delete;
  TraceScope& operator=(const TraceScope&) = delete;

 private:
  Tracer* prev_;
};

/// A result of any op's type as the tensors it holds: a tensor, a pair or tuple of tensors, a vector.
inline void add_outputs(std::vector<ember::Tensor>& out, const ember::Tensor& t) { out.push_back(t); }
inline void add_outputs(std::vector<ember::Tensor>& out, const std::vector<ember::Tensor>& ts) {
  out.insert(out.end(), ts.begin(), ts.end());
}
template <class A, class B>
void add_outputs(std::vector<ember::Tensor>& out, const std::pair<A, B>& p) {
  add_outputs(out, p.first), add_outputs(out, p.second);
}
template <class... T>
void add_outputs(std::vector<ember::Tensor>& out, const std::tuple<T...>& t) {
  std::apply([&](const auto&... e) { (add_outputs(out, e), ...); }, t);
}

}  // namespace lowering
}  // namespace ember
