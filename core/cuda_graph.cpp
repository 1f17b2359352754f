// CudaGraph's device-independent half: which graph this thread is capturing,
// the replay hooks, and the calls into the backend that cuda/graph.cu
// registers (stream capture, the graph's memory pool, replays).
#include <ember/core/cuda_graph.h>

#include <ember/core/error.h>
#include <ember/core/profiler.h>

namespace ember {

namespace {

detail::GraphBackend& backend() {
  static detail::GraphBackend b;
  return b;
}

thread_local CudaGraph* t_capturing = nullptr;

}  // namespace

void detail::register_graph_backend(const GraphBackend& b) { backend() = b; }

CudaGraph::~CudaGraph() {
  if (exec_) backend().destroy(device_.index, exec_);
}

void CudaGraph::capture(Device device, const std::function<void()>& body) {
  EMBER_CHECK(device.is_cuda(), DeviceError, "CudaGraph::capture: graphs capture CUDA work, got device ", device.str());
  EMBER_CHECK(backend().begin != nullptr, DeviceError,
              "CudaGraph::capture: this program has no CUDA backend (link Ember::ember_cuda)");
  EMBER_CHECK(exec_ == nullptr, DeviceError, "CudaGraph::capture: this graph was already captured");
  EMBER_CHECK(t_capturing == nullptr, DeviceError,
              "CudaGraph::capture: this thread is already capturing a graph (captures do not nest)");
  device_ = device;
  hooks_.clear();
  counters_.clear();
  backend().begin(device.index);
  t_capturing = this;
  const uint64_t launches0 = profiler::device_launches();
  try {
    body();
  } catch (const std::exception& e) {
    t_capturing = nullptr;
    hooks_.clear();
    counters_.clear();
    backend().abort(device.index);
    throw DeviceError(std::string("CudaGraph::capture: the captured code failed; a graph cannot hold host reads of "
                                  "device values (item(), cpu()), synchronisation or copies from host memory: ") +
                      e.what());
  }
  t_capturing = nullptr;
  launches_ = static_cast<int64_t>(profiler::device_launches() - launches0);
  try {
    exec_ = backend().end(device.index);
  } catch (...) {
    hooks_.clear();
    throw;
  }
}

void CudaGraph::replay() {
  EMBER_CHECK(exec_ != nullptr, DeviceError, "CudaGraph::replay: nothing captured");
  EMBER_CHECK(t_capturing == nullptr, DeviceError, "CudaGraph::replay: not inside a capture");
  for (const std::function<void()>& hook : hooks_) hook();
  profiler::add_device_launch();
  backend().launch(device_.index, exec_);
}

bool is_capturing(Device device) { return t_capturing != nullptr && t_capturing->device() == device; }

Tensor replay_buffer(const Shape& shape, TensorOptions opts) {
  EMBER_CHECK(is_capturing(opts.device), ValueError, "replay_buffer: no graph is being captured for ",
              opts.device.str(), " on this thread");
  backend().fresh_blocks(true);
  Tensor t;
  try {
    t = empty(shape, opts);
  } catch (...) {
    backend().fresh_blocks(false);
    throw;
  }
  backend().fresh_blocks(false);
  return t;
}

struct CudaGraph::Counters {
  Generator* gen = nullptr;
  Tensor words;        // int64 [seed, first counter] on the device
  uint64_t total = 0;  // counters the graph draws from gen
};

CapturedCounters reserve_counters_in_capture(Device device, Generator& gen, uint64_t n) {
  EMBER_CHECK(is_capturing(device), ValueError, "reserve_counters_in_capture: no graph is being captured for ",
              device.str(), " on this thread");
  CudaGraph& graph = *t_capturing;
  std::shared_ptr<CudaGraph::Counters> c;
  for (const auto& k : graph.counters_)
    if (k->gen == &gen) c = k;
  if (!c) {
    c = std::make_shared<CudaGraph::Counters>();
    c->gen = &gen;
    c->words = replay_buffer({2}, TensorOptions(DType::Int64, device));
    graph.counters_.push_back(c);
    graph.hooks_.push_back([c] {
      const uint64_t first = c->gen->reserve(c->total);
      c->words.copy_(
          from_vector(std::vector<int64_t>{static_cast<int64_t>(c->gen->seed()), static_cast<int64_t>(first)}));
    });
  }
  const CapturedCounters r{static_cast<const uint64_t*>(c->words.data_ptr()), c->total};
  c->total += n;
  return r;
}

void on_replay(Device device, std::function<void()> hook) {
  EMBER_CHECK(is_capturing(device), ValueError, "on_replay: no graph is being captured for ", device.str(),
              " on this thread");
  t_capturing->hooks_.push_back(std::move(hook));
}

}  // namespace ember
