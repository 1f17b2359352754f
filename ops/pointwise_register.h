/// \file
/// Registering a pointwise functor of your own, the way Ember registers its
/// built-in ones (docs/CUSTOM_OPS.md). Write the scalar formula once as a
/// functor callable on the host and on a device, as ops/functors.h does:
/// \code
///   struct Swish {  // x * sigmoid(beta x), beta in `a`
///     EMBER_FUNCTOR_MEMBERS("swish", false)
///     template <class T> EMBER_HD T operator()(T x) const {
///       return x / (T(1) + ember::fn::hd::exp(-T(a) * x));
///     }
///   };
///   EMBER_REGISTER_UNARY_FUNCTOR(Swish);
/// \endcode
/// in a header that both your .cpp and your .cu include. The one line
/// registers the kernel of the backend each source is compiled for: the CPU
/// loop in a .cpp, the CUDA loop in a .cu (built by nvcc, or for the emulator
/// by ember_add_cuda_sources, cmake/EmberCuda.cmake). unary_forward<Swish>(x,
/// beta) (ops/pointwise.h) then runs it on x's device, with the built-ins'
/// dtype rules and broadcasting; a binary functor (f(x, y; a, b)) is
/// registered with EMBER_REGISTER_BINARY_FUNCTOR and run by
/// binary_forward<F>(x, y).
#pragma once

#include <array>

#include <ember/core/dispatch.h>
#include <ember/ops/pointwise_kernels.h>

// The loop of the backend this source is compiled for. A CUDA source is one
// nvcc compiles (__CUDACC__) or one the emulated build includes through its
// generated wrapper (EMBER_CUDA_SOURCE); only there is the CUDA layer's loop
// included, so host sources of every layer stay clear of it.
#if defined(__CUDACC__) || defined(EMBER_CUDA_SOURCE)
#include <ember/cuda/loops.cuh>
#define EMBER_SOURCE_LOOPS ::ember::cuda::CudaLoops
#define EMBER_SOURCE_DEVICE ::ember::DeviceType::CUDA
#else
#include <ember/ops/cpu_loops.h>
#define EMBER_SOURCE_LOOPS ::ember::CpuLoops
#define EMBER_SOURCE_DEVICE ::ember::DeviceType::CPU
namespace ember {
/// cpu::map as the Loops of ops/pointwise_kernels.h.
struct CpuLoops {
  template <class Out, class... In, class F>
  static void map(Tensor& out, const std::array<const Tensor*, sizeof...(In)>& ins, const F& f) {
    cpu::map<Out, In...>(out, ins, f);
  }
};
}  // namespace ember
#endif

/// What every functor holds: its name (its kernel table's, for errors and the
/// profiler), whether integer dtypes run it (false: integers compute in
/// float32), and its two scalar parameters a and b.
#define EMBER_FUNCTOR_MEMBERS(str, integral)  \
  static constexpr const char* name = str;    \
  static constexpr bool kIntegral = integral; \
  double a = 0, b = 0;

namespace ember {

/// Registers functor F's kernel over Loops for device: the table
/// unary_kernel<F>() (y = F(x; a, b)) or binary_kernel<F>() (z = F(x, y; a,
/// b)). Returns true, for static initialisers.
///@{
template <class F, class Loops>
bool register_unary_functor(DeviceType device) {
  unary_kernel<F>().set(device, &PointwiseKernels<Loops>::template unary<F>);
  return true;
}
template <class F, class Loops>
bool register_binary_functor(DeviceType device) {
  binary_kernel<F>().set(device, &PointwiseKernels<Loops>::template binary<F>);
  return true;
}
///@}

}  // namespace ember

/// Registers F for the backend this source is compiled for (see above).
///@{
#define EMBER_REGISTER_UNARY_FUNCTOR(F)                                                     \
  [[maybe_unused]] static const bool EMBER_CONCAT(ember_functor_registered_, __COUNTER__) = \
      ::ember::register_unary_functor<F, EMBER_SOURCE_LOOPS>(EMBER_SOURCE_DEVICE)
#define EMBER_REGISTER_BINARY_FUNCTOR(F)                                                    \
  [[maybe_unused]] static const bool EMBER_CONCAT(ember_functor_registered_, __COUNTER__) = \
      ::ember::register_binary_functor<F, EMBER_SOURCE_LOOPS>(EMBER_SOURCE_DEVICE)
///@}
