// The emulated CUDA runtime and cuBLAS (see cuda_api.h).
#include <ember/cuda/emu/cuda_api.h>

#include <cblas.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>

#include <ember/core/parallel.h>

namespace {

thread_local int t_device = 0;
thread_local cudaError_t t_last_error = cudaSuccess;

int emulated_devices() {
  static const int n = [] {
    const char* e = std::getenv("EMBER_EMU_DEVICES");
    return e && *e ? std::atoi(e) : 1;
  }();
  return n;
}

cudaError_t fail(cudaError_t e) {
  t_last_error = e;
  return e;
}

}  // namespace

struct CUstream_st {};
struct cublasContext {
  cudaStream_t stream = nullptr;
  cublasMath_t mode = CUBLAS_DEFAULT_MATH;
};

const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess:
      return "no error";
    case cudaErrorInvalidValue:
      return "invalid argument";
    case cudaErrorMemoryAllocation:
      return "out of memory";
    case cudaErrorInvalidConfiguration:
      return "invalid configuration argument";
    case cudaErrorInvalidDevice:
      return "invalid device ordinal";
    case cudaErrorNoDevice:
      return "no CUDA-capable device is detected";
  }
  return "unknown error";
}

const char* cudaGetErrorName(cudaError_t e) {
  switch (e) {
    case cudaSuccess:
      return "cudaSuccess";
    case cudaErrorInvalidValue:
      return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation:
      return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration:
      return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevice:
      return "cudaErrorInvalidDevice";
    case cudaErrorNoDevice:
      return "cudaErrorNoDevice";
  }
  return "cudaErrorUnknown";
}

cudaError_t cudaGetDeviceCount(int* count) {
  const int n = emulated_devices();
  if (n <= 0) return fail(cudaErrorNoDevice);  // like the real one: count left unwritten
  *count = n;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  if (device < 0 || device >= emulated_devices()) return fail(cudaErrorInvalidDevice);
  t_device = device;
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  *device = t_device;
  return cudaSuccess;
}

cudaError_t cudaMalloc(void** ptr, size_t nbytes) {
  // 256 bytes: cudaMalloc's alignment, so the kernels' vectorised paths see
  // the same alignment as on a GPU.
  *ptr = std::aligned_alloc(256, (nbytes + 255) / 256 * 256);
  return *ptr ? cudaSuccess : fail(cudaErrorMemoryAllocation);
}

cudaError_t cudaFree(void* ptr) {
  std::free(ptr);
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t nbytes, cudaMemcpyKind) {
  if (nbytes) std::memmove(dst, src, nbytes);
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t nbytes, cudaMemcpyKind kind, cudaStream_t) {
  return cudaMemcpy(dst, src, nbytes, kind);
}

cudaError_t cudaMemsetAsync(void* dst, int value, size_t nbytes, cudaStream_t) {
  if (nbytes) std::memset(dst, value, nbytes);
  return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned) {
  *stream = new CUstream_st;
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaDeviceSynchronize() { return cudaSuccess; }

cudaError_t cudaGetLastError() {
  const cudaError_t e = t_last_error;
  t_last_error = cudaSuccess;
  return e;
}

cudaError_t cudaPeekAtLastError() { return t_last_error; }

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (device < 0 || device >= emulated_devices()) return fail(cudaErrorInvalidDevice);
  std::memset(prop, 0, sizeof(*prop));
  std::strcpy(prop->name, "Ember SIMT emulator");
  prop->multiProcessorCount = ember::num_threads();
  prop->major = 9;
  prop->minor = 0;
  prop->totalGlobalMem = size_t{1} << 34;
  return cudaSuccess;
}

// ---- cuBLAS ------------------------------------------------------------------------

const char* cublasGetStatusString(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS:
      return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "CUBLAS_STATUS_INVALID_VALUE";
  }
  return "CUBLAS_STATUS_UNKNOWN";
}

cublasStatus_t cublasCreate(cublasHandle_t* handle) {
  *handle = new cublasContext;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream(cublasHandle_t handle, cudaStream_t stream) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->stream = stream;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->mode = mode;  // TF32 is not emulated: products stay in full float32
  return CUBLAS_STATUS_SUCCESS;
}

namespace {

CBLAS_TRANSPOSE op(cublasOperation_t t) { return t == CUBLAS_OP_T ? CblasTrans : CblasNoTrans; }

// The checks cuBLAS makes on leading dimensions (column-major).
bool valid(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, int lda, int ldb,
           int ldc) {
  if (!h || m < 0 || n < 0 || k < 0) return false;
  if (lda < std::max(1, ta == CUBLAS_OP_N ? m : k)) return false;
  if (ldb < std::max(1, tb == CUBLAS_OP_N ? k : n)) return false;
  return ldc >= std::max(1, m);
}

// Batches are independent products, so they spread over Ember's pool as
// the GPU spreads them over its SMs (OpenBLAS itself runs one thread).
template <class T, class Gemm>
cublasStatus_t batched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                       const T* alpha, const T* A, int lda, long long sa, const T* B, int ldb, long long sb,
                       const T* beta, T* C, int ldc, long long sc, int batch, Gemm gemm) {
  if (!valid(h, ta, tb, m, n, k, lda, ldb, ldc) || batch < 0) return CUBLAS_STATUS_INVALID_VALUE;
  const T a = *alpha, b = *beta;
  ember::parallel_for(0, batch, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i)
      gemm(CblasColMajor, op(ta), op(tb), m, n, k, a, A + i * sa, lda, B + i * sb, ldb, b, C + i * sc, ldc);
  });
  return CUBLAS_STATUS_SUCCESS;
}

}  // namespace

cublasStatus_t cublasSgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                           const float* alpha, const float* A, int lda, const float* B, int ldb, const float* beta,
                           float* C, int ldc) {
  return batched<float>(h, ta, tb, m, n, k, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc, 0, 1, cblas_sgemm);
}

cublasStatus_t cublasDgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                           const double* alpha, const double* A, int lda, const double* B, int ldb, const double* beta,
                           double* C, int ldc) {
  return batched<double>(h, ta, tb, m, n, k, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc, 0, 1, cblas_dgemm);
}

cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                         int k, const float* alpha, const float* A, int lda, long long strideA,
                                         const float* B, int ldb, long long strideB, const float* beta, float* C,
                                         int ldc, long long strideC, int batch) {
  return batched<float>(h, ta, tb, m, n, k, alpha, A, lda, strideA, B, ldb, strideB, beta, C, ldc, strideC, batch,
                        cblas_sgemm);
}

cublasStatus_t cublasDgemmStridedBatched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                         int k, const double* alpha, const double* A, int lda, long long strideA,
                                         const double* B, int ldb, long long strideB, const double* beta, double* C,
                                         int ldc, long long strideC, int batch) {
  return batched<double>(h, ta, tb, m, n, k, alpha, A, lda, strideA, B, ldb, strideB, beta, C, ldc, strideC, batch,
                         cblas_dgemm);
}
