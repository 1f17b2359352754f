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
#include <unordered_map>
#include <vector>

#include <ember/core/caching_allocator.h>
#include <ember/core/error.h>
#include <ember/core/tensor.h>
#include <ember/cuda/graph_pool.h>
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
constexpr size_t kCublasWorkspace = size_t{32} << 20;

struct DeviceState {
  std::once_flag once;
  cudaStream_t stream = nullptr;
  cublasHandle_t cublas = nullptr;
  void* cublas_workspace = nullptr;           // held for the handle's life (the process's)
  unsigned int* grid_counter = nullptr;       // grid_counter(): the process's, like the workspace
  unsigned long long* index_words = nullptr;  // index_check_words(): likewise
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
    // cuBLAS's workspace given once (32 MiB, what Hopper asks for), so that no
    // GEMM allocates one while a graph is captured.
    EMBER_CUDA_CHECK(cudaMalloc(&s.cublas_workspace, kCublasWorkspace));
    EMBER_CUBLAS_CHECK(cublasSetWorkspace(s.cublas, s.cublas_workspace, kCublasWorkspace));
    EMBER_CUBLAS_CHECK(
        cublasSetMathMode(s.cublas, g_allow_tf32.load() ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
    // Zeroed here, before anything can capture the stream; the kernels that
    // use it leave it zero.
    void* counter = nullptr;
    EMBER_CUDA_CHECK(cudaMalloc(&counter, sizeof(unsigned int)));
    s.grid_counter = static_cast<unsigned int*>(counter);
    EMBER_CUDA_CHECK(cudaMemsetAsync(s.grid_counter, 0, sizeof(unsigned int), s.stream));
    void* words = nullptr;
    EMBER_CUDA_CHECK(cudaMalloc(&words, 2 * sizeof(unsigned long long)));
    s.index_words = static_cast<unsigned long long*>(words);
    EMBER_CUDA_CHECK(cudaMemsetAsync(s.index_words, 0xff, sizeof(unsigned long long), s.stream));
    EMBER_CUDA_CHECK(cudaMemsetAsync(s.index_words + 1, 0, sizeof(unsigned long long), s.stream));
    EMBER_CUDA_CHECK(cudaStreamSynchronize(s.stream));
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

unsigned int* grid_counter(int device) { return init(device).grid_counter; }
unsigned long long* index_check_words(int device) { return init(device).index_words; }

void set_allow_tf32(bool on) { g_allow_tf32.store(on); }
bool allow_tf32() { return g_allow_tf32.load(); }

namespace {

// A CUDA graph's memory (CudaGraph, core/cuda_graph.h): what the captured
// work allocates comes from here, and its blocks stay the graph's while it
// lives, so every replay finds its tensors where the capture put them and no
// other work is handed that memory. A block freed during the capture is
// handed out again within it (one stream: the graph runs in capture order).
struct GraphPool {
  int device = 0;
  std::unordered_map<size_t, std::vector<void*>> free_blocks;  // size class -> blocks
  size_t in_use = 0;                                           // blocks held by tensors
  bool released = false;                                       // its graph is gone
};

thread_local GraphPool* t_graph_pool = nullptr;
// Blocks from outside the pool freed during this thread's capture: handed
// back when the capture ends. Handing them back at once could free them to
// the driver (the cache off, or emptied), which synchronises: not allowed
// while capturing.
struct Deferred {
  void* ptr;
  size_t nbytes;
  int device;
};
thread_local std::vector<Deferred> t_deferred_frees;
thread_local bool t_fresh_blocks = false;  // replay_buffer: a new block, not a reused one

// cudaMalloc/cudaFree behind the shared caching allocator (size classes,
// reuse, statistics, empty_cache). With one stream per device, a block freed
// by a tensor can be handed to the next kernel at once: stream order keeps
// the old kernels' accesses before the new ones. During a graph capture on
// this thread, blocks come from the graph's pool instead (not counted in
// memory_stats).
class CudaAllocator final : public CachingAllocator {
 public:
  void* allocate(size_t nbytes, int device) override {
    set_device(device);  // throws "no CUDA device available" without one
    GraphPool* pool = t_graph_pool;
    if (pool && pool->device == device && nbytes > 0) return pool_allocate(*pool, nbytes);
    return CachingAllocator::allocate(nbytes, device);
  }
  void deallocate(void* ptr, size_t nbytes, int device) override {
    if (ptr) {
      std::unique_lock<std::mutex> lock(pool_mu_);
      const auto it = pool_blocks_.find(ptr);
      if (it != pool_blocks_.end()) {
        auto [pool, size] = it->second;
        --pool->in_use;
        if (!pool->released) {
          pool->free_blocks[size].push_back(ptr);
          return;
        }
        pool_blocks_.erase(it);
        const bool last = pool->in_use == 0;
        lock.unlock();
        raw_free(ptr, size, device);
        if (last) delete pool;
        return;
      }
      if (t_graph_pool) {
        t_deferred_frees.push_back({ptr, nbytes, device});
        return;
      }
    }
    CachingAllocator::deallocate(ptr, nbytes, device);
  }

  GraphPool* new_pool(int device) {
    auto* pool = new GraphPool;
    pool->device = device;
    return pool;
  }
  // The graph is gone: free blocks go back to the driver, blocks still held
  // by tensors when those are freed.
  void release(GraphPool* pool) {
    std::vector<std::pair<void*, size_t>> blocks;
    bool last;
    {
      std::lock_guard<std::mutex> lock(pool_mu_);
      pool->released = true;
      for (auto& [size, list] : pool->free_blocks)
        for (void* b : list) {
          blocks.emplace_back(b, size);
          pool_blocks_.erase(b);
        }
      pool->free_blocks.clear();
      last = pool->in_use == 0;
    }
    for (auto [b, size] : blocks) raw_free(b, size, pool->device);
    if (last) delete pool;
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

 private:
  void* pool_allocate(GraphPool& pool, size_t nbytes) {
    const size_t size = size_class(nbytes);
    std::lock_guard<std::mutex> lock(pool_mu_);
    auto it = pool.free_blocks.find(size);
    void* p = nullptr;
    if (!t_fresh_blocks && it != pool.free_blocks.end() && !it->second.empty()) {
      p = it->second.back();
      it->second.pop_back();
    } else {
      // cudaMalloc is not recorded by the capture and may synchronise, so
      // CUDA refuses it during a capture unless this thread relaxes the rule:
      // the block is the graph's from now on, which is what makes it safe.
      cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
      EMBER_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
      const cudaError_t e = cudaMalloc(&p, size);
      cudaThreadExchangeStreamCaptureMode(&mode);
      if (e == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError();
        throw DeviceError("CudaGraph: out of device memory for the graph's pool (" + std::to_string(size) +
                          " bytes on cuda:" + std::to_string(pool.device) + ")");
      }
      EMBER_CUDA_CHECK(e);
      pool_blocks_.emplace(p, std::make_pair(&pool, size));
    }
    ++pool.in_use;
    return p;
  }

  std::mutex pool_mu_;
  std::unordered_map<void*, std::pair<GraphPool*, size_t>> pool_blocks_;  // block -> its pool, size class
};

CudaAllocator& allocator() {
  static CudaAllocator* a = new CudaAllocator;  // never destroyed: tensors may outlive static destruction
  return *a;
}

// Both sides contiguous, one dtype; at least one on a CUDA device.
void cuda_cross_device_copy(const Tensor& src, Tensor& dst) {
  const size_t n = static_cast<size_t>(src.numel()) * src.element_size();
  if (n == 0) return;
  const Device sd = src.device(), dd = dst.device();
  profiler::add_device_launch();
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
  RegisterBackend() {
    register_allocator(DeviceType::CUDA, &allocator());
    profiler::detail::register_synchronize(DeviceType::CUDA, [](int device) { synchronize(device); });
  }
} g_register_backend;

}  // namespace

void* detail::begin_graph_pool(int device) {
  EMBER_CHECK(t_graph_pool == nullptr, DeviceError, "CudaGraph: a capture is already under way on this thread");
  t_graph_pool = allocator().new_pool(device);
  return t_graph_pool;
}

void detail::end_graph_pool() {
  t_graph_pool = nullptr;
  std::vector<Deferred> frees = std::move(t_deferred_frees);
  t_deferred_frees.clear();
  for (const Deferred& f : frees) allocator().deallocate(f.ptr, f.nbytes, f.device);
}

void detail::fresh_pool_blocks(bool on) { t_fresh_blocks = on; }

void detail::release_graph_pool(void* pool) {
  if (pool) allocator().release(static_cast<GraphPool*>(pool));
}

bool detail::capturing_pool(int device) { return t_graph_pool != nullptr && t_graph_pool->device == device; }

EMBER_REGISTER_KERNEL(cross_device_copy_kernel, CUDA, cuda_cross_device_copy);

}  // namespace ember::cuda
