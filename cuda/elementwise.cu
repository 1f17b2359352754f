// CUDA kernels of ops/elementwise.cpp (and the activations, which share its
// functor lists): one kernel template per kind (unary, binary, compare)
// instantiated for every functor of ops/functors.h, the same scalar formulas
// the CPU loops run, plus where and masked_fill.
#include <ember/core/dtype_dispatch.h>
#include <ember/cuda/loops.cuh>
#include <ember/ops/functors.h>
#include <ember/ops/pointwise.h>

namespace ember::cuda {
namespace {

template <class F, class T>
struct Unary {
  F f;
  EMBER_HD T operator()(T v) const { return f(v); }
};
template <class F, class T>
struct Binary {
  F f;
  EMBER_HD T operator()(T u, T v) const { return f(u, v); }
};
template <class F, class T>
struct Compare {
  EMBER_HD bool operator()(T u, T v) const { return F{}(u, v); }
};
template <class T>
struct Where {
  EMBER_HD T operator()(bool c, T u, T v) const { return c ? u : v; }
};
template <class T>
struct MaskedFill {
  T value;
  EMBER_HD T operator()(T u, bool m) const { return m ? value : u; }
};

template <class F>
void cuda_unary(const Tensor& x, Tensor& out, double a, double b) {
  F f;
  f.a = a;
  f.b = b;
  auto run = [&](auto tag) {
    using T = decltype(tag);
    map<T, T>(out, {&x}, Unary<F, T>{f});
  };
  if constexpr (F::kIntegral) dispatch_numeric(x.dtype(), F::name, run);
  else dispatch_floating(x.dtype(), F::name, run);
}

template <class F>
void cuda_binary(const Tensor& x, const Tensor& y, Tensor& out, double a, double b) {
  F f;
  f.a = a;
  f.b = b;
  auto run = [&](auto tag) {
    using T = decltype(tag);
    map<T, T, T>(out, {&x, &y}, Binary<F, T>{f});
  };
  if constexpr (F::kIntegral) dispatch_numeric(x.dtype(), F::name, run);
  else dispatch_floating(x.dtype(), F::name, run);
}

template <class F>
void cuda_compare(const Tensor& x, const Tensor& y, Tensor& out) {
  dispatch_all(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    map<bool, T, T>(out, {&x, &y}, Compare<F, T>{});
  });
}

void cuda_where(const Tensor& cond, const Tensor& x, const Tensor& y, Tensor& out) {
  dispatch_all(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    map<T, bool, T, T>(out, {&cond, &x, &y}, Where<T>{});
  });
}

void cuda_masked_fill(const Tensor& x, const Tensor& mask, Tensor& out, double value) {
  dispatch_all(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    map<T, T, bool>(out, {&x, &mask}, MaskedFill<T>{static_cast<T>(value)});
  });
}

}  // namespace

EMBER_REGISTER_KERNEL(where_kernel, CUDA, cuda_where);
EMBER_REGISTER_KERNEL(masked_fill_kernel, CUDA, cuda_masked_fill);

#define EMBER_REG_UNARY(F) EMBER_REGISTER_KERNEL(unary_kernel<fn::F>(), CUDA, cuda_unary<fn::F>);
#define EMBER_REG_BINARY(F) EMBER_REGISTER_KERNEL(binary_kernel<fn::F>(), CUDA, cuda_binary<fn::F>);
#define EMBER_REG_COMPARE(F) EMBER_REGISTER_KERNEL(compare_kernel<fn::F>(), CUDA, cuda_compare<fn::F>);
EMBER_UNARY_FUNCTORS(EMBER_REG_UNARY)
EMBER_BINARY_FUNCTORS(EMBER_REG_BINARY)
EMBER_COMPARE_FUNCTORS(EMBER_REG_COMPARE)
#undef EMBER_REG_UNARY
#undef EMBER_REG_BINARY
#undef EMBER_REG_COMPARE

}  // namespace ember::cuda
