// cuBLAS loaded at its first call rather than at program start.
//
// Linking libcublas makes every program that links the CUDA backend load
// libcublas and libcublasLt at start-up, and cuBLASLt's static initialisers
// take about half a second of CPU there, on a machine with no GPU as on one
// with a GPU: each `vit --help` paid it. Instead the backend calls the
// functions defined here, which open libcublas (beside the libcudart the
// program runs with, else by the loader's search path) when the first of
// them is called, look up the real entry point once, and forward to it.
// If the library cannot be opened, each returns CUBLAS_STATUS_NOT_INITIALIZED
// and cublasGetStatusString says why, so EMBER_CUBLAS_CHECK's error names
// the library and dlerror's reason.
//
// The definitions keep cublas_v2.h's declarations (which map cublasCreate to
// cublasCreate_v2 and so on), so the compiler checks every signature and the
// symbol looked up is the one the header names.
#include <ember/cuda/cublas_loader.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <mutex>
#include <string>

namespace {

#define EMBER_CUBLAS_NAME_(f) #f
#define EMBER_CUBLAS_NAME(f) EMBER_CUBLAS_NAME_(f)  // after cublas_v2.h's renaming: "cublasCreate_v2"

std::string g_error;  // why the library did not open; set once, under the once_flag

void* library() {
  static std::once_flag once;
  static void* handle = nullptr;
  std::call_once(once, [] {
    const std::string name = "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR);
    // The toolkit's lib directory, where the libcudart in use came from.
    Dl_info info{};
    if (dladdr(reinterpret_cast<void*>(&cudaGetDeviceCount), &info) != 0 && info.dli_fname) {
      const std::string self = info.dli_fname;
      const size_t slash = self.rfind('/');
      if (slash != std::string::npos)
        handle = dlopen((self.substr(0, slash + 1) + name).c_str(), RTLD_NOW | RTLD_LOCAL);
    }
    if (!handle) handle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
      const char* why = dlerror();
      g_error = "cuBLAS (" + name + ") could not be loaded: " + (why ? why : "unknown reason");
    }
  });
  return handle;
}

void* lookup(const char* symbol) {
  void* h = library();
  return h ? dlsym(h, symbol) : nullptr;
}

// `real`: the library's entry point of f, of pointer type Fn, looked up at
// the first call (null when the library or the symbol is missing).
#define EMBER_CUBLAS_REAL(f, Fn)                                               \
  static const auto real = reinterpret_cast<Fn>(lookup(EMBER_CUBLAS_NAME(f))); \
  if (!real) return CUBLAS_STATUS_NOT_INITIALIZED

const char* const kSymbols[] = {EMBER_CUBLAS_NAME(cublasCreate),
                                EMBER_CUBLAS_NAME(cublasSetStream),
                                EMBER_CUBLAS_NAME(cublasSetWorkspace),
                                EMBER_CUBLAS_NAME(cublasSetMathMode),
                                EMBER_CUBLAS_NAME(cublasGetStatusString),
                                EMBER_CUBLAS_NAME(cublasSgemmStridedBatched),
                                EMBER_CUBLAS_NAME(cublasDgemmStridedBatched),
                                EMBER_CUBLAS_NAME(cublasGemmStridedBatchedEx)};

}  // namespace

namespace ember::cuda {

std::vector<std::string> cublas_unresolved() {
  std::vector<std::string> missing;
  if (!library()) return {g_error};
  for (const char* s : kSymbols)
    if (!dlsym(library(), s)) missing.emplace_back(s);
  return missing;
}

}  // namespace ember::cuda

cublasStatus_t CUBLASWINAPI cublasCreate(cublasHandle_t* handle) {
  EMBER_CUBLAS_REAL(cublasCreate, decltype(&cublasCreate));
  return real(handle);
}

cublasStatus_t CUBLASWINAPI cublasSetStream(cublasHandle_t handle, cudaStream_t stream) {
  EMBER_CUBLAS_REAL(cublasSetStream, decltype(&cublasSetStream));
  return real(handle, stream);
}

cublasStatus_t CUBLASWINAPI cublasSetWorkspace(cublasHandle_t handle, void* workspace, size_t bytes) {
  EMBER_CUBLAS_REAL(cublasSetWorkspace, decltype(&cublasSetWorkspace));
  return real(handle, workspace, bytes);
}

cublasStatus_t CUBLASWINAPI cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
  EMBER_CUBLAS_REAL(cublasSetMathMode, decltype(&cublasSetMathMode));
  return real(handle, mode);
}

const char* CUBLASWINAPI cublasGetStatusString(cublasStatus_t status) {
  static const auto real =
      reinterpret_cast<decltype(&cublasGetStatusString)>(lookup(EMBER_CUBLAS_NAME(cublasGetStatusString)));
  if (real) return real(status);
  return g_error.empty() ? "cuBLAS: cublasGetStatusString is missing from the library" : g_error.c_str();
}

cublasStatus_t CUBLASWINAPI cublasSgemmStridedBatched(cublasHandle_t handle, cublasOperation_t transa,
                                                      cublasOperation_t transb, int m, int n, int k, const float* alpha,
                                                      const float* A, int lda, long long int strideA, const float* B,
                                                      int ldb, long long int strideB, const float* beta, float* C,
                                                      int ldc, long long int strideC, int batchCount) {
  EMBER_CUBLAS_REAL(cublasSgemmStridedBatched, decltype(&cublasSgemmStridedBatched));
  return real(handle, transa, transb, m, n, k, alpha, A, lda, strideA, B, ldb, strideB, beta, C, ldc, strideC,
              batchCount);
}

cublasStatus_t CUBLASWINAPI cublasDgemmStridedBatched(cublasHandle_t handle, cublasOperation_t transa,
                                                      cublasOperation_t transb, int m, int n, int k,
                                                      const double* alpha, const double* A, int lda,
                                                      long long int strideA, const double* B, int ldb,
                                                      long long int strideB, const double* beta, double* C, int ldc,
                                                      long long int strideC, int batchCount) {
  EMBER_CUBLAS_REAL(cublasDgemmStridedBatched, decltype(&cublasDgemmStridedBatched));
  return real(handle, transa, transb, m, n, k, alpha, A, lda, strideA, B, ldb, strideB, beta, C, ldc, strideC,
              batchCount);
}

cublasStatus_t CUBLASWINAPI cublasGemmStridedBatchedEx(
    cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k, const void* alpha,
    const void* A, cudaDataType Atype, int lda, long long int strideA, const void* B, cudaDataType Btype, int ldb,
    long long int strideB, const void* beta, void* C, cudaDataType Ctype, int ldc, long long int strideC,
    int batchCount, cublasComputeType_t computeType, cublasGemmAlgo_t algo) {
  // cublas_api.h overloads it (a cudaDataType compute type, inline): the library's is this one.
  using Fn = cublasStatus_t(CUBLASWINAPI*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                                           const void*, const void*, cudaDataType, int, long long int, const void*,
                                           cudaDataType, int, long long int, const void*, void*, cudaDataType, int,
                                           long long int, int, cublasComputeType_t, cublasGemmAlgo_t);
  EMBER_CUBLAS_REAL(cublasGemmStridedBatchedEx, Fn);
  return real(handle, transa, transb, m, n, k, alpha, A, Atype, lda, strideA, B, Btype, ldb, strideB, beta, C, Ctype,
              ldc, strideC, batchCount, computeType, algo);
}
