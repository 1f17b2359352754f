/// \file
/// CUDA graphs (torch.cuda.CUDAGraph): the work a piece of code issues to a
/// GPU, captured once and replayed as a single launch, so that a training
/// step of hundreds of small kernels costs one launch of host time.
///
/// \code
///   for (int i = 0; i < 3; ++i) train_step(static_x, static_y);   // warm-up, eager
///   ember::CudaGraph graph;
///   graph.capture(Device("cuda"), [&] { train_step(static_x, static_y); });
///   for (auto& [x, y] : batches) {
///     static_x.copy_(x), static_y.copy_(y);   // new inputs into the captured tensors
///     graph.replay();                          // forward, backward, clipping, optimizer step
///   }
/// \endcode
///
/// What capture means (as in PyTorch): the body runs on the host once, but
/// its device work is recorded, not executed; every replay executes it on the
/// tensors the body used. So
/// - tensors the body reads that were made before the capture (inputs,
///   parameters, optimizer state) must stay alive while the graph is
///   replayed, and new inputs are copied into them;
/// - tensors made during the capture come from the graph's own memory pool
///   and keep their addresses: after a replay they hold that replay's values
///   (the loss, the gradients);
/// - host values that change from step to step are not frozen into the
///   graph: the code that reads them registers an on_replay hook that writes
///   each replay's values into device memory (Adam's and AdamW's step count
///   and learning rates, the random generators' counters for dropout and
///   random tensors), so a replayed step gives the same bits as the eager
///   step would, and advances the generators and step counts as it would;
/// - what a graph cannot hold fails the capture with a DeviceError naming
///   it, and leaves nothing half-captured: reading a device value on the
///   host (`item()`, `cpu()`), synchronising, copying from host memory,
///   SGD's step.
///
/// Warm up with a few eager steps before capturing: they create the
/// optimizer's state and load the kernels.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include <ember/core/device.h>
#include <ember/core/random.h>
#include <ember/core/tensor.h>

namespace ember {

/// Philox counters inside a capture: the device words [seed, first counter]
/// that each replay fills, and an offset from them.
struct CapturedCounters {
  const uint64_t* words = nullptr;  ///< device memory, [seed, first counter] of this replay
  uint64_t offset = 0;              ///< this draw's counters start at words[1] + offset
};
class CudaGraph {
 public:
  CudaGraph() = default;
  ~CudaGraph();
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;

  /// Records the device work that body issues for device (a CUDA device) on
  /// this thread. Throws DeviceError without a CUDA backend, when the graph
  /// was already captured, or when the body does something a graph cannot
  /// hold (the error names it); the graph is then left empty.
  void capture(Device device, const std::function<void()>& body);
  /// Runs the replay hooks, then the captured work as one launch (ordered
  /// after earlier work on the device's stream, as any op).
  void replay();
  /// Whether capture() succeeded.
  bool captured() const { return exec_ != nullptr; }
  /// The device it was captured for.
  Device device() const { return device_; }
  /// Launches (kernels, library calls, copies) the captured work holds.
  int64_t captured_launches() const { return launches_; }

 private:
  Device device_;
  void* exec_ = nullptr;  // the backend's instantiated graph and memory pool
  int64_t launches_ = 0;
  std::vector<std::function<void()>> hooks_;
  struct Counters;  // a generator's draws in this graph
  std::vector<std::shared_ptr<Counters>> counters_;
  friend void on_replay(Device device, std::function<void()> hook);
  friend CapturedCounters reserve_counters_in_capture(Device device, Generator& gen, uint64_t n);
};

/// Whether this thread is capturing device work for device now. Code that
/// would read a host value into a launch checks it (and registers an
/// on_replay hook instead).
bool is_capturing(Device device);

/// During a capture for device on this thread: an uninitialised tensor for
/// an on_replay hook to write. Its memory is new and the graph's alone: a
/// block the captured work freed and reused would be overwritten by the
/// graph after the hook wrote it.
Tensor replay_buffer(const Shape& shape, TensorOptions opts);

/// During a capture for device on this thread: hook runs before each replay
/// (in registration order), to write that replay's host values into the
/// device memory the captured work reads. Throws ValueError outside a capture.
void on_replay(Device device, std::function<void()> hook);

/// During a capture for device: n counters of gen. Each replay (before the
/// launch) reserves all the counters the graph draws from gen, in one
/// piece, and writes gen's seed and the first of them to the words, so the
/// replay's draws are the ones an eager step would make. gen must outlive
/// the graph.
CapturedCounters reserve_counters_in_capture(Device device, Generator& gen, uint64_t n);

namespace detail {
/// What a backend supplies to capture and replay graphs; registered once by
/// the CUDA backend (cuda/graph.cu).
struct GraphBackend {
  void (*begin)(int device) = nullptr;                ///< graph pool on, stream capture begun
  void* (*end)(int device) = nullptr;                 ///< capture ended, graph instantiated (with its pool)
  void (*abort)(int device) = nullptr;                ///< capture ended and discarded, pool released
  void (*launch)(int device, void* exec) = nullptr;   ///< one replay; throws on a failed device-side check
  void (*destroy)(int device, void* exec) = nullptr;  ///< graph and pool released
  void (*fresh_blocks)(bool on) = nullptr;            ///< while on, the pool hands out only new blocks
};
void register_graph_backend(const GraphBackend& backend);
}  // namespace detail

}  // namespace ember
