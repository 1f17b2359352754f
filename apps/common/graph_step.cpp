// A training step replayed as a CUDA graph (graph_step.h).
#include "graph_step.h"

#include "app.h"

namespace ember::app {

CLI::Option* add_cuda_graph(CLI::App& cli, bool& on, const std::string& what) {
  return cli.add_flag("--cuda-graph", on,
                      "train with each step (" + what +
                          ") captured once as a CUDA graph and replayed for every batch of the same shape (after 2 "
                          "eager warm-up steps; a batch of another shape runs eagerly); the same bits as without it. "
                          "--device cuda only, not with --precision fp16");
}

void check_cuda_graph(bool on, const std::string& device, const std::string& precision) {
  if (!on) return;
  if (Device(device).type != DeviceType::CUDA)
    throw UsageError("--cuda-graph: a CUDA graph needs --device cuda, not '" + device + "'");
  if (precision == "fp16")
    throw UsageError(
        "--cuda-graph: not with --precision fp16 (its loss scaler reads the gradients' overflow flag on the host "
        "every step, which a graph cannot hold); use bf16 or fp32");
}

GraphStep::GraphStep(bool enabled, Step step, int warmup)
    : enabled_(enabled), step_(std::move(step)), warmup_(warmup) {}

GraphStep::~GraphStep() = default;

bool GraphStep::captured() const { return graph_ && graph_->captured(); }

int64_t GraphStep::captured_launches() const { return captured() ? graph_->captured_launches() : 0; }

bool GraphStep::matches(const std::vector<Tensor>& inputs) const {
  if (inputs.size() != statics_.size()) return false;
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i].shape() != statics_[i].shape() || inputs[i].dtype() != statics_[i].dtype() ||
        inputs[i].device() != statics_[i].device())
      return false;
  return true;
}

Tensor GraphStep::operator()(const std::vector<Tensor>& inputs) {
  if (!enabled_) {
    ++eager_;
    return step_(inputs);
  }
  // The graph takes the first batch's shapes (a data set's full batch; the
  // last one of an epoch may be shorter).
  if (statics_.empty())
    for (const Tensor& t : inputs) statics_.push_back(t.detach().clone());
  if (!matches(inputs) || warm_ < warmup_) {
    warm_ += matches(inputs);
    ++eager_;
    return step_(inputs);
  }
  {
    NoGradGuard no_grad;
    for (size_t i = 0; i < inputs.size(); ++i) statics_[i].copy_(inputs[i]);
  }
  if (!graph_) {
    // The capture records the step on the statics and runs nothing: the
    // replay below is this batch's step.
    auto graph = std::make_unique<CudaGraph>();
    graph->capture(statics_.at(0).device(), [&] { loss_ = step_(statics_); });
    graph_ = std::move(graph);
  }
  graph_->replay();
  ++replays_;
  return loss_;
}

}  // namespace ember::app
