/// \file
/// What every CUDA source of the backend includes: the CUDA runtime, cuBLAS
/// and the 16-bit types __half / __nv_bfloat16 (real, or the emulated ones
/// when EMBER_CUDA_EMULATE is defined), the checked-call macros, the one
/// launch helper, and the per-device stream and cuBLAS handle.
///
/// The same .cu source is compiled twice: by nvcc into ember_cuda (real
/// GPUs), and by the host compiler with EMBER_CUDA_EMULATE into
/// ember_cuda_emu, where kernels run on the SIMT emulator (cuda/emu/simt.h).
/// So kernels stay inside what both accept: C++20, the CUDA subset the
/// emulator implements, dynamic shared memory only through
/// EMBER_DYNAMIC_SHARED, launches only through EMBER_CUDA_LAUNCH.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>

#if defined(EMBER_CUDA_EMULATE)
#include <ember/cuda/emu/cuda_api.h>
#include <ember/cuda/emu/cuda_half.h>
#include <ember/cuda/emu/simt.h>
#else
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#endif

#include <ember/core/device.h>
#include <ember/core/half.h>
#include <ember/core/profiler.h>

namespace ember::cuda {

/// Throws DeviceError: "<call> failed at <file>:<line>: <error name>: <text>".
///@{
[[noreturn]] void throw_cuda_error(const char* call, const char* file, int line, cudaError_t e);
[[noreturn]] void throw_cublas_error(const char* call, const char* file, int line, cublasStatus_t s);
///@}

/// EMBER_CUDA_CHECK(cudaXxx(...)) and EMBER_CUBLAS_CHECK(cublasXxx(...)):
/// a failing call throws DeviceError naming the call, file, line and error.
///@{
#define EMBER_CUDA_CHECK(call)                                                                                       \
  do {                                                                                                               \
    const cudaError_t ember_cuda_err_ = (call);                                                                      \
    if (ember_cuda_err_ != cudaSuccess) ::ember::cuda::throw_cuda_error(#call, __FILE__, __LINE__, ember_cuda_err_); \
  } while (0)
#define EMBER_CUBLAS_CHECK(call)                                                      \
  do {                                                                                \
    const cublasStatus_t ember_cublas_st_ = (call);                                   \
    if (ember_cublas_st_ != CUBLAS_STATUS_SUCCESS)                                    \
      ::ember::cuda::throw_cublas_error(#call, __FILE__, __LINE__, ember_cublas_st_); \
  } while (0)
///@}

/// Number of CUDA devices; throws DeviceError "no CUDA device available: ..."
/// when there is no driver or no device. Only called once a CUDA tensor is
/// asked for, never at static initialisation.
int device_count();
/// Checks that device exists (throws as device_count does) and makes it current.
void set_device(int device);
/// The one stream of a device (non-blocking), created on first use; every
/// kernel, copy and cuBLAS call for that device goes to it.
///@{
cudaStream_t stream(int device);
cublasHandle_t cublas_handle(int device);
///@}
/// Waits for the device's stream.
void synchronize(int device);

/// A counter word of the device, zero between kernels, for a kernel whose
/// blocks elect the last one to finish (each block __threadfence()s its
/// results, then atomicAdd(counter, 1) == gridDim.x - 1 marks the last): that
/// block must set it back to 0. Made and zeroed with the device's stream,
/// so a kernel captured into a CUDA graph uses it as an eager one does; one
/// stream per device runs such kernels one at a time, so one word suffices.
unsigned int* grid_counter(int device);
/// Two words of the device, (~0, 0) between kernels: the index check's
/// first bad position and count, accumulated with integer atomics (exact in
/// any order); its last block copies them out and sets them back.
unsigned long long* index_check_words(int device);

/// TF32 tensor-core products for float32 matmul: off by default (full
/// float32, like PyTorch's torch.backends.cuda.matmul.allow_tf32 = False).
///@{
void set_allow_tf32(bool on);
bool allow_tf32();
///@}

/// CUDA's type for an element type of Ember's: __nv_bfloat16 for
/// ember::bfloat16, __half for ember::float16 (the same 16 bits; for
/// kernels written with CUDA's types, cast the data pointer), T otherwise.
///@{
template <class T>
struct cuda_type {
  using type = T;
};
template <>
struct cuda_type<bfloat16> {
  using type = __nv_bfloat16;
};
template <>
struct cuda_type<float16> {
  using type = __half;
};
template <class T>
using cuda_type_t = typename cuda_type<T>::type;
///@}

/// Blocks for n items at threads per block, capped (kernels use grid-stride
/// loops, so any cap is correct).
inline unsigned blocks_for(int64_t n, int threads, int64_t cap = 65535) {
  int64_t b = (n + threads - 1) / threads;
  if (b < 1) b = 1;
  return static_cast<unsigned>(b < cap ? b : cap);
}

/// The launch helper: `kernel<<<grid, block, smem, stream>>>(args...)` under
/// nvcc, the emulator otherwise; the launch error is checked either way.
template <class... P, class... A>
void launch(const char* file, int line, const char* name, void (*kernel)(P...), dim3 grid, dim3 block, size_t smem,
            cudaStream_t st, A&&... args) {
  profiler::add_device_launch();
#if defined(EMBER_CUDA_EMULATE)
  // The arguments are copied, as a launch copies them: a captured launch
  // runs later, at each replay of its graph.
  const cudaError_t e = ::ember::emu::enqueue(st, [=] {
    ::ember::emu::launch({grid, block, smem, name}, [&] { kernel(args...); });
  });
  if (e != cudaSuccess) throw_cuda_error(name, file, line, e);
#else
  // clang-format treats a .h as C++ and would split the launch brackets into "> > >".
  // clang-format off
  kernel<<<grid, block, smem, st>>>(std::forward<A>(args)...);
  // clang-format on
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) throw_cuda_error(name, file, line, e);
#endif
}

/// EMBER_CUDA_LAUNCH(kernel, grid, block, shared_bytes, device, args...);
/// wrap a template kernel in parentheses: EMBER_CUDA_LAUNCH((k<T, F>), ...).
#define EMBER_CUDA_LAUNCH(kernel, grid, block, smem, device, ...)                                              \
  ::ember::cuda::launch(__FILE__, __LINE__, #kernel, kernel, grid, block, smem, ::ember::cuda::stream(device), \
                        __VA_ARGS__)

}  // namespace ember::cuda

/// EMBER_DYNAMIC_SHARED(T, name) in a kernel declares `T* name` pointing at
/// the launch's dynamic shared memory (the bytes passed to
/// EMBER_CUDA_LAUNCH), 16-byte aligned; the one way to use dynamic shared
/// memory in kernels that also run on the emulator.
#if defined(EMBER_CUDA_EMULATE)
#define EMBER_DYNAMIC_SHARED(T, name) T* name = static_cast<T*>(::ember::emu::dynamic_shared())
#else
#define EMBER_DYNAMIC_SHARED(T, name)                              \
  extern __shared__ __align__(16) unsigned char ember_dyn_smem_[]; \
  T* name = reinterpret_cast<T*>(ember_dyn_smem_)
#endif
