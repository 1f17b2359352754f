// The CUDA backend's device layer: device discovery, the stream and cuBLAS
// handle of each device, the caching device allocator, copies between the
// host and devices, and the error messages of failed calls.
//
// Nothing here runs at static initialisation except registering the
// allocator and the copy kernel (two pointer stores): a CPU-only program
// never calls into CUDA. The first CUDA tensor asks cudaGetDeviceCount.
#include <ember/cuda/common.h>

#include <atomic>
#include <mutex>
#include <string>
#include <vector>

#include <ember/core/caching_allocator.h>
#include <ember/core/error.h>
#include <ember/core/tensor.h>
#include <ember/ops/copy.h>

namespace ember::cuda {

void throw_cuda_error(const char* call, const char* file, int line, cudaError_t e) {
  throw DeviceError(std::string(call) + " failed at " + file + ":" + std::to_string(line) + ": " + cudaGetErrorName(e) +
                    ": " + cudaGetErrorString(e));
}

void throw_cublas_error(const char* call, const char* file, int line, cublasStatus_t s) {
  throw DeviceError(std::string(call) + " failed at " + file + ":" + std::to_string(line) + ": " +
                    cublasGetStatusString(s));
}

namespace {

constexpr int kMaxDevices = 64;

struct DeviceState {
  std::once_flag once;
  cudaStream_t stream = nullptr;
  cublasHandle_t cublas = nullptr;
};
DeviceState& state(int d) {
  static DeviceState* states = new DeviceState[kMaxDevices];  // never destroyed: used until exit
  return states[d];
}

std::atomic<bool> g_allow_tf32{false};

}  // namespace

int device_count() {
  static const int n = [] {
    int count = 0;  // cudaGetDeviceCount leaves it unwritten on error
    const cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();  // clear the sticky-free error state
      throw DeviceError(std::string("no CUDA device available: cudaGetDeviceCount failed: ") + cudaGetErrorName(e) +
                        ": " + cudaGetErrorString(e));
    }
    return count;
  }();
  EMBER_CHECK(n > 0, DeviceError, "no CUDA device available: cudaGetDeviceCount found 0 devices");
  return n;
}

void set_device(int device) {
  const int n = device_count();
  EMBER_CHECK(device >= 0 && device < n && device < kMaxDevices, DeviceError, "cuda:", device,
              " requested, but there are ", n, " CUDA device(s)");
  thread_local int current = -1;
  if (current != device) {
    EMBER_CUDA_CHECK(cudaSetDevice(device));
    current = device;
  }
}

namespace {
DeviceState& init(int device) {
  set_device(device);
  DeviceState& s = state(device);
  std::call_once(s.once, [&] {
    EMBER_CUDA_CHECK(cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking));
    EMBER_CUBLAS_CHECK(cublasCreate(&s.cublas));
    EMBER_CUBLAS_CHECK(cublasSetStream(s.cublas, s.stream));
    EMBER_CUBLAS_CHECK(
        cublasSetMathMode(s.cublas, g_allow_tf32.load() ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
  });
  return s;
}
}  // namespace

cudaStream_t stream(int device) { return init(device).stream; }

cublasHandle_t cublas_handle(int device) {
  DeviceState& s = init(device);
  EMBER_CUBLAS_CHECK(
      cublasSetMathMode(s.cublas, g_allow_tf32.load() ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
  return s.cublas;
}

void synchronize(int device) { EMBER_CUDA_CHECK(cudaStreamSynchronize(stream(device))); }

void set_allow_tf32(bool on) { g_allow_tf32.store(on); }
bool allow_tf32() { return g_allow_tf32.load(); }

namespace {

// cudaMalloc/cudaFree behind the shared caching allocator (size classes,
// reuse, statistics, empty_cache). With one stream per device, a block freed
// by a tensor can be handed to the next kernel at once: stream order keeps
// the old kernels' accesses before the new ones.
class CudaAllocator final : public CachingAllocator {
 public:
  void* allocate(size_t nbytes, int device) override {
    set_device(device);  // throws "no CUDA device available" without one
    return CachingAllocator::allocate(nbytes, device);
  }

 protected:
  void* raw_allocate(size_t nbytes, int device) override {
    set_device(device);
    void* p = nullptr;
    const cudaError_t e = cudaMalloc(&p, nbytes);
    if (e == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      return nullptr;  // the caller empties the cache and retries once
    }
    EMBER_CUDA_CHECK(e);
    return p;
  }
  void raw_free(void* p, size_t, int device) override {
    set_device(device);
    synchronize(device);  // the memory goes back to the driver: no kernel may still use it
    EMBER_CUDA_CHECK(cudaFree(p));
  }
};

// Both sides contiguous, one dtype; at least one on a CUDA device.
void cuda_cross_device_copy(const Tensor& src, Tensor& dst) {
  const size_t n = static_cast<size_t>(src.numel()) * src.element_size();
  if (n == 0) return;
  const Device sd = src.device(), dd = dst.device();
  if (sd.is_cuda() && dd.is_cuda()) {
    // Device to device: order after src's stream, copy on dst's.
    synchronize(sd.index);
    EMBER_CUDA_CHECK(cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), n, cudaMemcpyDefault, stream(dd.index)));
    return;
  }
  if (dd.is_cuda()) {
    // Pageable host memory: the call returns once the source has been read.
    EMBER_CUDA_CHECK(cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), n, cudaMemcpyHostToDevice, stream(dd.index)));
    return;
  }
  EMBER_CUDA_CHECK(cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), n, cudaMemcpyDeviceToHost, stream(sd.index)));
  synchronize(sd.index);  // the host reads it next
}

struct RegisterBackend {
  RegisterBackend() { register_allocator(DeviceType::CUDA, new CudaAllocator); }
} g_register_backend;

}  // namespace

EMBER_REGISTER_KERNEL(cross_device_copy_kernel, CUDA, cuda_cross_device_copy);

}  // namespace ember::cuda
