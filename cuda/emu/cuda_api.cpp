// The emulated CUDA runtime and cuBLAS (see cuda_api.h).
#include <ember/cuda/emu/cuda_api.h>

#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <thread>
#include <vector>

#include <ember/core/half.h>
#include <ember/core/parallel.h>

namespace {

thread_local int t_device = 0;
std::atomic<int64_t> g_gemm_calls{0};
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

// A stream runs its work at once (the emulator is synchronous) unless it is
// being captured: then the work is appended to `recording`.
struct CUstream_st {
  bool capturing = false;
  bool invalidated = false;  // an illegal call during the capture
  cudaStreamCaptureMode mode = cudaStreamCaptureModeGlobal;
  std::thread::id thread;  // the thread that began the capture
  std::vector<std::function<void()>> recording;
};
struct CUgraph_st {
  std::vector<std::function<void()>> work;
};
struct CUgraphExec_st {
  std::vector<std::function<void()>> work;
};

namespace {

std::mutex g_capture_mu;
std::vector<CUstream_st*> g_capturing;  // streams being captured now
thread_local cudaStreamCaptureMode t_mode = cudaStreamCaptureModeGlobal;

// A call CUDA calls unsafe during capture (it could synchronise, or it is
// not recorded, such as cudaMalloc): refused, and the captures it would
// break are invalidated, unless the calling thread's mode is relaxed. A
// global-mode capture is broken by such a call from any thread, a
// thread-local one only by its own thread.
bool unsafe_during_capture() {
  if (t_mode == cudaStreamCaptureModeRelaxed) return false;
  std::lock_guard<std::mutex> lock(g_capture_mu);
  bool refused = false;
  for (CUstream_st* s : g_capturing)
    if (s->mode == cudaStreamCaptureModeGlobal ||
        (s->mode == cudaStreamCaptureModeThreadLocal && s->thread == std::this_thread::get_id())) {
      s->invalidated = true;
      refused = true;
    }
  return refused;
}

// An illegal operation on a stream being captured: the capture is invalidated.
cudaError_t invalidate(cudaStream_t s) {
  std::lock_guard<std::mutex> lock(g_capture_mu);
  s->invalidated = true;
  return fail(cudaErrorStreamCaptureUnsupported);
}

}  // namespace

cudaError_t ember::emu::enqueue(cudaStream_t stream, std::function<void()> work) {
  if (stream && stream->capturing) {
    if (stream->invalidated) return fail(cudaErrorStreamCaptureInvalidated);
    stream->recording.push_back(std::move(work));
    return cudaSuccess;
  }
  work();
  return cudaSuccess;
}
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
    case cudaErrorStreamCaptureUnsupported:
      return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated:
      return "operation failed due to a previous error during capture";
    case cudaErrorStreamCaptureWrongThread:
      return "attempt to terminate a thread-local capture sequence from another thread";
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
    case cudaErrorStreamCaptureUnsupported:
      return "cudaErrorStreamCaptureUnsupported";
    case cudaErrorStreamCaptureInvalidated:
      return "cudaErrorStreamCaptureInvalidated";
    case cudaErrorStreamCaptureWrongThread:
      return "cudaErrorStreamCaptureWrongThread";
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
  if (unsafe_during_capture()) return fail(cudaErrorStreamCaptureUnsupported);
  // 256 bytes: cudaMalloc's alignment, so the kernels' vectorised paths see
  // the same alignment as on a GPU.
  *ptr = std::aligned_alloc(256, (nbytes + 255) / 256 * 256);
  return *ptr ? cudaSuccess : fail(cudaErrorMemoryAllocation);
}

cudaError_t cudaFree(void* ptr) {
  if (unsafe_during_capture()) return fail(cudaErrorStreamCaptureUnsupported);
  std::free(ptr);
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t nbytes, cudaMemcpyKind) {
  if (unsafe_during_capture()) return fail(cudaErrorStreamCaptureUnsupported);
  if (nbytes) std::memmove(dst, src, nbytes);
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t nbytes, cudaMemcpyKind kind, cudaStream_t stream) {
  // Host memory (Ember's is pageable) cannot take part in a graph: its copies
  // are synchronous with the host.
  if (stream && stream->capturing && (kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToHost))
    return invalidate(stream);
  return ember::emu::enqueue(stream, [=] {
    if (nbytes) std::memmove(dst, src, nbytes);
  });
}

cudaError_t cudaMemsetAsync(void* dst, int value, size_t nbytes, cudaStream_t stream) {
  return ember::emu::enqueue(stream, [=] {
    if (nbytes) std::memset(dst, value, nbytes);
  });
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned) {
  *stream = new CUstream_st;
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  if (stream && stream->capturing) return invalidate(stream);
  if (unsafe_during_capture()) return fail(cudaErrorStreamCaptureUnsupported);
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize() {
  if (unsafe_during_capture()) return fail(cudaErrorStreamCaptureUnsupported);
  return cudaSuccess;
}

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode) {
  if (!stream) return fail(cudaErrorStreamCaptureUnsupported);  // the legacy default stream cannot be captured
  std::lock_guard<std::mutex> lock(g_capture_mu);
  if (stream->capturing) return fail(cudaErrorInvalidValue);
  stream->capturing = true;
  stream->invalidated = false;
  stream->mode = mode;
  stream->thread = std::this_thread::get_id();
  stream->recording.clear();
  g_capturing.push_back(stream);
  return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph) {
  std::lock_guard<std::mutex> lock(g_capture_mu);
  if (!stream || !stream->capturing) return fail(cudaErrorInvalidValue);
  if (stream->mode != cudaStreamCaptureModeRelaxed && stream->thread != std::this_thread::get_id())
    return fail(cudaErrorStreamCaptureWrongThread);
  stream->capturing = false;
  g_capturing.erase(std::find(g_capturing.begin(), g_capturing.end(), stream));
  std::vector<std::function<void()>> work = std::move(stream->recording);
  stream->recording.clear();
  if (stream->invalidated) {
    *graph = nullptr;
    return fail(cudaErrorStreamCaptureInvalidated);
  }
  *graph = new CUgraph_st{std::move(work)};
  return cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus* status) {
  std::lock_guard<std::mutex> lock(g_capture_mu);
  *status = !stream || !stream->capturing ? cudaStreamCaptureStatusNone
            : stream->invalidated         ? cudaStreamCaptureStatusInvalidated
                                          : cudaStreamCaptureStatusActive;
  return cudaSuccess;
}

cudaError_t cudaThreadExchangeStreamCaptureMode(cudaStreamCaptureMode* mode) {
  std::swap(t_mode, *mode);
  return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long) {
  if (!graph) return fail(cudaErrorInvalidValue);
  *exec = new CUgraphExec_st{graph->work};
  return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
  if (!exec) return fail(cudaErrorInvalidValue);
  if (stream && stream->capturing) return invalidate(stream);  // graphs inside graphs: not emulated
  for (const std::function<void()>& work : exec->work) work();
  return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  delete exec;
  return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  delete graph;
  return cudaSuccess;
}

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
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "CUBLAS_STATUS_NOT_SUPPORTED";
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

cublasStatus_t cublasSetWorkspace(cublasHandle_t handle, void*, size_t) {
  return handle ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_INITIALIZED;
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
  g_gemm_calls.fetch_add(1, std::memory_order_relaxed);
  const T a = *alpha, b = *beta;  // host pointer mode: read at the call, as cuBLAS does
  const cudaError_t e = ember::emu::enqueue(h->stream, [=] {
    ember::parallel_for(0, batch, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i)
        gemm(CblasColMajor, op(ta), op(tb), m, n, k, a, A + i * sa, lda, B + i * sb, ldb, b, C + i * sc, ldc);
    });
  });
  if (e != cudaSuccess) return CUBLAS_STATUS_EXECUTION_FAILED;
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

// ---- cublasGemmEx: 16-bit operands, float32 compute -----------------------------------

namespace {

size_t type_size(cudaDataType t) { return t == CUDA_R_32F ? 4 : 2; }

float load(const void* p, cudaDataType t, int64_t i) {
  switch (t) {
    case CUDA_R_16BF:
      return static_cast<float>(static_cast<const ember::bfloat16*>(p)[i]);
    case CUDA_R_16F:
      return static_cast<float>(static_cast<const ember::float16*>(p)[i]);
    default:
      return static_cast<const float*>(p)[i];
  }
}

// Rounded to nearest even, NaN to CUDA's canonical 0x7FFF.
void store(void* p, cudaDataType t, int64_t i, float v) {
  const bool nan = v != v;
  if (t == CUDA_R_16BF)
    static_cast<ember::bfloat16*>(p)[i] = nan ? ember::bfloat16::from_bits(0x7FFF) : ember::bfloat16(v);
  else
    static_cast<ember::float16*>(p)[i] = nan ? ember::float16::from_bits(0x7FFF) : ember::float16(v);
}

// A stored column-major rows x cols matrix with leading dimension ld, as a
// dense float32 one (leading dimension rows).
std::vector<float> to_float(const void* p, cudaDataType t, int rows, int cols, int ld) {
  std::vector<float> out(static_cast<size_t>(rows) * cols);
  for (int j = 0; j < cols; ++j)
    for (int i = 0; i < rows; ++i) out[static_cast<size_t>(j) * rows + i] = load(p, t, int64_t(j) * ld + i);
  return out;
}

}  // namespace

cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                          int k, const void* alpha, const void* A, cudaDataType Atype, int lda,
                                          long long strideA, const void* B, cudaDataType Btype, int ldb,
                                          long long strideB, const void* beta, void* C, cudaDataType Ctype, int ldc,
                                          long long strideC, int batch, cublasComputeType_t compute, cublasGemmAlgo_t) {
  if (!valid(h, ta, tb, m, n, k, lda, ldb, ldc) || batch < 0) return CUBLAS_STATUS_INVALID_VALUE;
  // cuBLAS's float32-compute combinations: A and B of one type, C of that
  // type or float32 (float32 in and out: as cublasSgemm).
  const bool half_in = Atype == CUDA_R_16BF || Atype == CUDA_R_16F;
  if ((compute != CUBLAS_COMPUTE_32F && compute != CUBLAS_COMPUTE_32F_FAST_TF32) || Atype != Btype ||
      !(Atype == CUDA_R_32F || half_in) || !(Ctype == Atype || (half_in && Ctype == CUDA_R_32F)))
    return CUBLAS_STATUS_NOT_SUPPORTED;
  g_gemm_calls.fetch_add(1, std::memory_order_relaxed);
  const float a = *static_cast<const float*>(alpha), b = *static_cast<const float*>(beta);
  const int ar = ta == CUBLAS_OP_N ? m : k, ac = ta == CUBLAS_OP_N ? k : m;
  const int br = tb == CUBLAS_OP_N ? k : n, bc = tb == CUBLAS_OP_N ? n : k;
  const size_t as = type_size(Atype), bs = type_size(Btype), cs = type_size(Ctype);
  const cudaError_t e = ember::emu::enqueue(h->stream, [=] {
    ember::parallel_for(0, batch, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) {
        const void* Ai = static_cast<const char*>(A) + i * strideA * static_cast<long long>(as);
        const void* Bi = static_cast<const char*>(B) + i * strideB * static_cast<long long>(bs);
        void* Ci = static_cast<char*>(C) + i * strideC * static_cast<long long>(cs);
        const std::vector<float> fa = to_float(Ai, Atype, ar, ac, lda), fb = to_float(Bi, Btype, br, bc, ldb);
        if (Ctype == CUDA_R_32F) {
          cblas_sgemm(CblasColMajor, op(ta), op(tb), m, n, k, a, fa.data(), std::max(1, ar), fb.data(), std::max(1, br),
                      b, static_cast<float*>(Ci), ldc);
          continue;
        }
        // beta == 0: C's old contents are not read (they may be NaN), as in cuBLAS.
        std::vector<float> fc = b != 0.0f ? to_float(Ci, Ctype, m, n, ldc) : std::vector<float>(size_t(m) * n, 0.0f);
        cblas_sgemm(CblasColMajor, op(ta), op(tb), m, n, k, a, fa.data(), std::max(1, ar), fb.data(), std::max(1, br),
                    b, fc.data(), std::max(1, m));
        for (int j = 0; j < n; ++j)
          for (int r = 0; r < m; ++r) store(Ci, Ctype, int64_t(j) * ldc + r, fc[size_t(j) * m + r]);
      }
    });
  });
  if (e != cudaSuccess) return CUBLAS_STATUS_EXECUTION_FAILED;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                            const void* alpha, const void* A, cudaDataType Atype, int lda, const void* B,
                            cudaDataType Btype, int ldb, const void* beta, void* C, cudaDataType Ctype, int ldc,
                            cublasComputeType_t compute, cublasGemmAlgo_t algo) {
  return cublasGemmStridedBatchedEx(h, ta, tb, m, n, k, alpha, A, Atype, lda, 0, B, Btype, ldb, 0, beta, C, Ctype, ldc,
                                    0, 1, compute, algo);
}

int64_t ember::emu::cublas_gemm_calls() { return g_gemm_calls.load(std::memory_order_relaxed); }
