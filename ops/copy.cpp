// Copies, conversions and fills: contiguous(), clone(), to(dtype/device),
// copy_() and fill_(), with their CPU kernels.
#include <ember/core/op.h>
#include <ember/ops/copy.h>
#include <ember/ops/onnx_lowerings.h>

#include <cstring>

#include <ember/core/autograd.h>
#include <ember/core/dtype_dispatch.h>
#include <ember/ops/convert.h>
#include <ember/ops/cpu_loops.h>
#include <ember/ops/pointwise.h>

namespace ember {

decltype(copy_kernel) copy_kernel("copy");
decltype(cross_device_copy_kernel) cross_device_copy_kernel("copy between devices");
decltype(fill_kernel) fill_kernel("fill");

namespace {

void cpu_copy(const Tensor& src, Tensor& dst) {
  if (src.dtype() == dst.dtype() && src.is_contiguous() && dst.is_contiguous() && src.shape() == dst.shape()) {
    const size_t n = static_cast<size_t>(dst.numel()) * dst.element_size();
    if (n && src.data_ptr() != dst.data_ptr()) std::memcpy(dst.data_ptr(), src.data_ptr(), n);
    return;
  }
  if (cpu::copy_convert_contiguous(src, dst)) return;  // float32 <-> 16-bit, vectorised
  dispatch_all(dst.dtype(), [&](auto dtag) {
    using D = decltype(dtag);
    dispatch_all(src.dtype(), [&](auto stag) {
      using S = decltype(stag);
      cpu::map<D, S>(dst, {&src}, [](S v) { return convert_element<D, S>(v); });
    });
  });
}

void cpu_fill(Tensor& dst, double value) {
  dispatch_all(dst.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T v = static_cast<T>(value);
    if (dst.is_contiguous()) {
      T* p = static_cast<T*>(dst.data_ptr());
      parallel_for(0, dst.numel(), cpu::kGrain, [&](int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi; ++i) p[i] = v;
      });
    } else {
      cpu::map<T>(dst, {}, [v]() { return v; });
    }
  });
}

}  // namespace

EMBER_REGISTER_KERNEL(copy_kernel, CPU, cpu_copy);
EMBER_REGISTER_KERNEL(fill_kernel, CPU, cpu_fill);

using autograd::BackwardContext;
using autograd::needs_grad;
using autograd::record;

Tensor& Tensor::fill_(double value) {
  check_inplace("fill", *this);
  if (numel()) fill_kernel(device(), *this, value);
  bump_version();
  return *this;
}

Tensor& Tensor::copy_(const Tensor& src) {
  check_inplace("copy", *this);
  Tensor s = broadcast_view(src, shape());
  if (s.device() == device()) {
    if (numel()) copy_kernel(device(), s, *this);
  } else {
    // Cross-device: bring src to this dtype contiguously on its own device,
    // move it, then copy into this tensor's layout.
    Tensor sc = s.dtype() == dtype() && s.is_contiguous() ? s : empty(shape(), TensorOptions(dtype(), s.device()));
    if (!sc.is_same(s)) copy_kernel(s.device(), s, sc);
    const Device other = s.device().is_cpu() ? device() : s.device();
    if (is_contiguous()) {
      cross_device_copy_kernel(other, sc, *this);
    } else {
      Tensor tmp = empty(shape(), TensorOptions(dtype(), device()));
      cross_device_copy_kernel(other, sc, tmp);
      copy_kernel(device(), tmp, *this);
    }
  }
  bump_version();
  return *this;
}

Tensor Tensor::contiguous() const {
  if (is_contiguous()) return *this;
  return clone();
}

namespace {
void lower_to_dtype(lowering::Graph& g, const lowering::Call& c) {
  g.bind(c.outputs[0], lowering::cast_to(g, c.tensor(0), c.outputs[0].dtype()));
}
}  // namespace

constexpr OpDef clone_op{.name = "clone", .onnx = lowering::identity};
EMBER_REGISTER_OP(clone_op);

Tensor Tensor::clone() const {
  return op::call_captured<clone_op>(
      [&](const auto&...) -> Tensor {
        Tensor out = empty(shape(), TensorOptions(dtype(), device()));
        if (numel()) copy_kernel(device(), *this, out);
        if (needs_grad({*this}))
          record("clone", {*this}, out, [](BackwardContext& ctx) { ctx.set_grad(0, ctx.grad_output()); });
        return out;
      },
      *this);
}

constexpr OpDef to_dtype_op{.name = "to_dtype", .onnx = lower_to_dtype};
EMBER_REGISTER_OP(to_dtype_op);

Tensor Tensor::to(DType dt) const {
  return op::call_captured<to_dtype_op>(
      [&](const auto&...) -> Tensor {
        if (dt == dtype()) return *this;
        Tensor out = empty(shape(), TensorOptions(dt, device()));
        if (numel()) copy_kernel(device(), *this, out);
        if (is_floating(dt) && needs_grad({*this})) {
          const DType from = dtype();
          record("to", {*this}, out, [from](BackwardContext& ctx) { ctx.set_grad(0, ctx.grad_output().to(from)); });
        }
        return out;
      },
      *this, dt);
}

constexpr OpDef to_device_op{.name = "to_device", .onnx = lowering::identity};
EMBER_REGISTER_OP(to_device_op);

Tensor Tensor::to(Device dev) const {
  return op::call_captured<to_device_op>(
      [&](const auto&...) -> Tensor {
        if (dev == device()) return *this;
        Tensor out = empty(shape(), TensorOptions(dtype(), dev));
        {
          NoGradGuard no_grad;  // the copy itself is recorded below as one op
          out.copy_(*this);
        }
        if (needs_grad({*this})) {
          const Device from = device();
          record("to", {*this}, out, [from](BackwardContext& ctx) { ctx.set_grad(0, ctx.grad_output().to(from)); });
        }
        return out;
      },
      *this, dev);
}

}  // namespace ember
