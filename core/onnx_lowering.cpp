// The parts of op lowering (core/onnx_lowering.h) that are not templates:
// the thread's tracer, a recorded call's argument accessors, ONNX's dtype
// numbers.
#include <ember/core/onnx_lowering.h>

#include <ember/core/error.h>
#include <ember/core/op.h>

namespace ember::lowering {

namespace detail {
thread_local Tracer* t_tracer = nullptr;
}  // namespace detail

void decompose(Graph&, const Call& call) {
  throw std::logic_error(std::string("lowering::decompose called for ") + call.name() + "; op::call never should");
}

int onnx_dtype(DType dt) {
  switch (dt) {
    case DType::Float32:
      return 1;
    case DType::Int64:
      return 7;
    case DType::Bool:
      return 9;
    case DType::Float16:
      return 10;
    case DType::Float64:
      return 11;
    case DType::BFloat16:
      return 16;
  }
  return 0;
}

const char* Call::name() const { return op ? op->name : "?"; }

namespace {
const Arg& arg(const Call& c, size_t i, const char* want) {
  EMBER_CHECK(i < c.args.size(), ValueError, "ONNX export of '", c.name(), "': its lowering reads argument ", i, " of ",
              c.args.size(), " (", want, ")");
  return c.args[i];
}
[[noreturn]] void wrong(const Call& c, size_t i, const char* want) {
  throw ValueError(ember::detail::cat_str("ONNX export of '", c.name(), "': argument ", i, " is not ", want));
}
}  // namespace

const Tensor& Call::tensor(size_t i) const {
  const Arg& a = arg(*this, i, "a tensor");
  if (a.kind != Arg::Kind::Tensor) wrong(*this, i, "a defined tensor");
  return a.tensor;
}

const std::vector<Tensor>& Call::tensors(size_t i) const {
  const Arg& a = arg(*this, i, "a list of tensors");
  if (a.kind != Arg::Kind::Tensors) wrong(*this, i, "a list of tensors");
  return a.tensors;
}

int64_t Call::i(size_t i) const {
  const Arg& a = arg(*this, i, "an integer");
  if (a.kind != Arg::Kind::Int && a.kind != Arg::Kind::Bool) wrong(*this, i, "an integer");
  return a.i;
}

double Call::f(size_t i) const {
  const Arg& a = arg(*this, i, "a number");
  if (a.kind == Arg::Kind::Int) return static_cast<double>(a.i);
  if (a.kind != Arg::Kind::Float) wrong(*this, i, "a number");
  return a.f;
}

const std::vector<int64_t>& Call::ints(size_t i) const {
  const Arg& a = arg(*this, i, "a list of integers");
  if (a.kind != Arg::Kind::Ints) wrong(*this, i, "a list of integers");
  return a.ints;
}

}  // namespace ember::lowering
