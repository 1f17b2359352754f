// --cuda-graph for the demos' training: a whole training step (zero_grad,
// forward, loss, backward, clipping, optimizer step) captured once as a CUDA
// graph (core/cuda_graph.h) and replayed for every following batch of the
// same shapes, so a step costs one launch of host time instead of hundreds.
//
// GraphStep owns the static input tensors the graph reads, shaped as the
// first call's inputs (a full batch). The first `warmup` calls of those
// shapes run the step eagerly on the batch (they load the kernels and create
// the optimizer's state, which a capture cannot); the next one copies its
// inputs into the statics, captures the step on them and replays it; every
// later call of those shapes copies and replays. A batch of other shapes (an
// epoch's last, partial batch) runs eagerly. A replayed step gives the eager step's bits
// (loss, parameters, optimizer state): the optimizer's step count and
// learning rate and the generators' counters are written before each replay
// by the library's hooks. Read the returned loss after the call (item()).
//
// What the step may hold is what a capture holds: no host reads, no
// synchronisation, no SGD step, no GradScaler (fp16), so check_cuda_graph
// refuses --cuda-graph on the CPU and with --precision fp16.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <ember/ember.h>

namespace ember::app {

/// Adds --cuda-graph (off by default) bound to on, with the app's words on what it captures.
CLI::Option* add_cuda_graph(CLI::App& cli, bool& on, const std::string& what);

/// UsageError when --cuda-graph is on and the run cannot be captured: a
/// device other than cuda, or --precision fp16 (its GradScaler reads the
/// loss scale's overflow flag on the host every step).
void check_cuda_graph(bool on, const std::string& device, const std::string& precision);

class GraphStep {
 public:
  /// step(inputs): one training step on inputs (device tensors), returning
  /// its loss. With enabled false every call runs step eagerly on the batch.
  using Step = std::function<Tensor(const std::vector<Tensor>& inputs)>;
  GraphStep(bool enabled, Step step, int warmup = 2);
  ~GraphStep();
  GraphStep(const GraphStep&) = delete;
  GraphStep& operator=(const GraphStep&) = delete;

  /// One step on inputs (same order and devices every call): eagerly or
  /// replayed, as above. Returns the loss (a tensor of the graph's memory
  /// after a replay: read it before the next call).
  Tensor operator()(const std::vector<Tensor>& inputs);

  /// Whether the step has been captured.
  bool captured() const;
  /// Launches the captured step holds (0 before the capture).
  int64_t captured_launches() const;
  /// Steps run so far by replaying the graph, and eagerly.
  int64_t replays() const { return replays_; }
  int64_t eager_steps() const { return eager_; }

 private:
  bool matches(const std::vector<Tensor>& inputs) const;

  bool enabled_;
  Step step_;
  int warmup_;
  std::vector<Tensor> statics_;  // the inputs the graph reads, new batches copied in
  std::unique_ptr<CudaGraph> graph_;
  Tensor loss_;  // the captured step's loss: each replay writes it
  int64_t replays_ = 0, eager_ = 0;
  int warm_ = 0;  // eager steps on the statics' shapes
};

}  // namespace ember::app
