// The CUDA backend of CudaGraph (core/cuda_graph.h): stream capture on the
// device's one stream in thread-local mode (a host synchronisation or an
// unrecorded allocation on the capturing thread fails the capture, as CUDA
// defines it), the graph's memory pool (cuda/context.cu) while capturing,
// instantiation, replay, and release. On the emulator the same calls record
// and replay the work (cuda/emu/cuda_api.h).
#include <string>

#include <ember/core/cuda_graph.h>
#include <ember/core/error.h>
#include <ember/core/tensor.h>
#include <ember/cuda/common.h>
#include <ember/cuda/graph_pool.h>

namespace ember::cuda {
namespace {

struct Captured {
  cudaGraphExec_t exec = nullptr;
  void* pool = nullptr;
  Tensor error;         // [found, value, size]: an index out of range in the replay (graph_error_record)
  bool checks = false;  // whether any captured op checks indices
};

// The capture under way on this thread: its pool and error record.
thread_local void* t_pool = nullptr;
thread_local Tensor t_error;
thread_local bool t_checks = false;
thread_local int t_device = -1;

void clear_capture() {
  detail::end_graph_pool();
  t_error = Tensor();
  t_checks = false;
  t_device = -1;
}

void fail(const char* what, cudaError_t e) {
  (void)cudaGetLastError();
  throw DeviceError(std::string("CudaGraph::capture: ") + what + " failed: " + cudaGetErrorName(e) + ": " +
                    cudaGetErrorString(e));
}

void begin(int device) {
  set_device(device);
  synchronize(device);  // creates the stream and cuBLAS handle if needed; earlier work done
  t_pool = detail::begin_graph_pool(device);
  t_device = device;
  t_error = empty({4}, TensorOptions(DType::Int64, Device(DeviceType::CUDA, device)));  // from the pool
  cudaError_t e = cudaStreamBeginCapture(stream(device), cudaStreamCaptureModeThreadLocal);
  // The graph's first node: every replay starts with a clean error record.
  if (e == cudaSuccess) e = cudaMemsetAsync(t_error.data_ptr(), 0, 4 * sizeof(int64_t), stream(device));
  if (e != cudaSuccess) {
    cudaGraph_t graph = nullptr;
    (void)cudaStreamEndCapture(stream(device), &graph);
    if (graph) cudaGraphDestroy(graph);
    clear_capture();
    detail::release_graph_pool(t_pool);
    t_pool = nullptr;
    fail("cudaStreamBeginCapture", e);
  }
}

void* end(int device) {
  cudaGraph_t graph = nullptr;
  const cudaError_t e = cudaStreamEndCapture(stream(device), &graph);
  Tensor error = t_error;
  const bool checks = t_checks;
  clear_capture();
  void* pool = t_pool;
  t_pool = nullptr;
  if (e != cudaSuccess) {
    detail::release_graph_pool(pool);
    fail("cudaStreamEndCapture", e);
  }
  cudaGraphExec_t exec = nullptr;
  const cudaError_t ei = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  if (ei != cudaSuccess) {
    detail::release_graph_pool(pool);
    fail("cudaGraphInstantiate", ei);
  }
  return new Captured{exec, pool, error, checks};
}

void abort(int device) {
  cudaGraph_t graph = nullptr;
  (void)cudaStreamEndCapture(stream(device), &graph);
  (void)cudaGetLastError();
  if (graph) cudaGraphDestroy(graph);
  clear_capture();
  detail::release_graph_pool(t_pool);
  t_pool = nullptr;
}

void launch(int device, void* handle) {
  auto* c = static_cast<Captured*>(handle);
  set_device(device);
  EMBER_CUDA_CHECK(cudaGraphLaunch(c->exec, stream(device)));
  if (!c->checks) return;
  // The replay's index checks, read back (this waits for the replay).
  const std::vector<int64_t> e = c->error.cpu().to_vector<int64_t>();
  EMBER_CHECK(e[0] == 0, IndexError, "CudaGraph::replay: index ", e[1], " is out of range for size ", e[2],
              " in an op of the replayed graph (an embedding, cross_entropy, nll_loss, gather, scatter, index_copy_ "
              "or kv_cache_attention's position); the replay's results are not valid");
}

void destroy(int device, void* handle) {
  auto* c = static_cast<Captured*>(handle);
  set_device(device);
  synchronize(device);  // replays still running use the pool
  cudaGraphExecDestroy(c->exec);
  c->error = Tensor();
  detail::release_graph_pool(c->pool);
  delete c;
}

}  // namespace

unsigned long long* detail::graph_error_record(int device) {
  if (t_device != device || !t_error.defined()) return nullptr;
  t_checks = true;
  return static_cast<unsigned long long*>(t_error.data_ptr());
}

namespace {

struct Register {
  Register() {
    ember::detail::register_graph_backend({.begin = begin,
                                           .end = end,
                                           .abort = abort,
                                           .launch = launch,
                                           .destroy = destroy,
                                           .fresh_blocks = detail::fresh_pool_blocks});
  }
} g_register;

}  // namespace
}  // namespace ember::cuda
