// CUDA graphs (core/cuda_graph.h) over a whole GPT training step: arange and
// linspace computed on the device (ops/range_kernels.h), the CPU's bits for
// every dtype, and so capturable; then nn::GPT's step (embeddings with their
// position range, dropout, causal attention with dropout, cross-entropy,
// backward, clipping, AdamW), in float32 and under bfloat16 autocast,
// captured after eager warm-up steps and replayed on new batches, giving the
// eager steps' bits. Linked into the emulated test binary and into
// ember_gpu_tests (skipped without a GPU).
#include <doctest/doctest.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <ember/ember.h>

#include "test_util.h"

using namespace ember;

namespace {

// Exact for every dtype used here (int64 values below 2^53).
std::vector<double> values(const Tensor& t) { return t.cpu().to(kFloat64).to_vector<double>(); }

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.cpu().contiguous().to(kFloat32).to_vector<float>() == b.cpu().contiguous().to(kFloat32).to_vector<float>();
}

}  // namespace

TEST_CASE("cuda graph: arange and linspace on cuda give the CPU's bits, and are captured") {
  if (!test::cuda_usable()) return;
  const Device dev("cuda");
  struct Range {
    double start, end, step;
  };
  const Range ranges[] = {{0, 10, 1}, {-3.5, 7.25, 0.37}, {5, -5, -0.7}, {1e6, 1e6 + 3, 0.1}, {0.1, 0.9, 0.1}};
  struct Lin {
    double start, end;
    int64_t steps;
  };
  const Lin lins[] = {{0, 5, 50}, {-1, 1, 7}, {3, 7, 1}, {2, 9, 0}, {0.3, -0.7, 2}, {-1e3, 1e3, 1001}};
  for (DType dt : {kFloat32, kFloat64, kInt64, kBFloat16, kFloat16}) {
    INFO(dtype_name(dt));
    for (const Range& r : ranges) {
      INFO(r.start << " " << r.end << " " << r.step);
      const Tensor c = arange(r.start, r.end, r.step, TensorOptions(dt)), g = arange(r.start, r.end, r.step, {dt, dev});
      CHECK(g.device() == dev);
      CHECK(g.dtype() == dt);
      CHECK(values(g) == values(c));
    }
    if (!is_floating(dt)) continue;
    for (const Lin& l : lins) {
      INFO(l.start << " " << l.end << " " << l.steps);
      CHECK(values(linspace(l.start, l.end, l.steps, {dt, dev})) == values(linspace(l.start, l.end, l.steps, dt)));
    }
  }
  // Known values: float64 steps, linspace's exact end, and one step gives start (PyTorch's answers).
  CHECK(values(arange(0, 1, 0.25, {kFloat64, dev})) == std::vector<double>{0, 0.25, 0.5, 0.75});
  CHECK(values(linspace(0, 0.3, 4, {kFloat64, dev})).back() == 0.3);
  CHECK(values(linspace(3, 7, 1, {kFloat32, dev})) == std::vector<double>{3});

  // Inside a capture (a copy from the host would fail it): each replay writes the range again.
  Tensor pos, lin;
  const Tensor offset = full({6}, 10.0, {kInt64, dev});
  CudaGraph graph;
  graph.capture(dev, [&] {
    pos = add(arange(2, 8, 1, {kInt64, dev}), offset);
    lin = linspace(-1, 1, 5, {kFloat32, dev});
  });
  REQUIRE(graph.captured());
  graph.replay();
  CHECK(values(pos) == std::vector<double>{12, 13, 14, 15, 16, 17});
  CHECK(values(lin) == std::vector<double>{-1, -0.5, 0, 0.5, 1});
}

namespace {

// A small GPT, dropout on, trained by AdamW (weight decay on matrices) with
// clipping tight enough to clip; its step's inputs are static tensors.
struct GptRun {
  std::unique_ptr<nn::GPT> model;
  std::unique_ptr<optim::AdamW> opt;
  bool bf16;
  Tensor idx, targets;
  GptRun(const nn::GPTConfig& cfg, bool bf16_autocast, Device dev) : bf16(bf16_autocast) {
    Generator init(21);  // the same weights in every run
    model = std::make_unique<nn::GPT>(cfg, &init);
    model->to(dev);
    model->train();
    opt = std::make_unique<optim::AdamW>(optim::weight_decay_groups(model->named_parameters(), 0.1),
                                         optim::AdamWOptions{.lr = 3e-3});
    idx = zeros({2, cfg.block_size}, {kInt64, dev});
    targets = zeros({2, cfg.block_size}, {kInt64, dev});
  }
  Tensor step() {
    opt->zero_grad();
    Tensor loss;
    {
      std::optional<AutocastGuard> region;
      if (bf16) region.emplace(DeviceType::CUDA, kBFloat16);
      loss = model->loss(idx, targets);
    }
    loss.backward();
    optim::clip_grad_norm_(model->parameters(), 0.05);
    opt->step();
    return loss;
  }
  void feed(int i, int64_t vocab) {
    Generator g(300 + i);
    idx.copy_(randint(0, vocab, idx.shape(), kInt64, &g));
    targets.copy_(randint(0, vocab, idx.shape(), kInt64, &g));
  }
};

}  // namespace

TEST_CASE("cuda graph: a GPT training step with dropout, captured whole, replays the eager bits (fp32, bf16)") {
  if (!test::cuda_usable()) return;
  const Device dev("cuda");
  const nn::GPTConfig cfg{.vocab_size = 13,
                          .block_size = 8,
                          .n_layer = 2,
                          .n_head = 2,
                          .n_embd = 16,
                          .dropout = 0.2,
                          .gelu = GeluApproximation::Tanh};
  for (bool bf16 : {false, true}) {
    INFO(std::string(bf16 ? "bf16 autocast" : "fp32"));
    manual_seed(9);  // dropout draws from the default generator
    GptRun eager(cfg, bf16, dev), graphed(cfg, bf16, dev);
    // Each eager step and its replay draw the same dropout masks: the
    // generator is put back to where both steps start.
    auto both = [&](const std::function<void()>& first, const std::function<void()>& second) {
      const uint64_t at = default_generator().offset();
      first();
      const uint64_t after = default_generator().offset();
      default_generator().set_offset(at);
      second();
      CHECK(default_generator().offset() == after);  // the replay advanced it as the eager step did
    };
    for (int i = 0; i < 2; ++i) {  // warm-up: AdamW's moments, the kernels
      eager.feed(i, cfg.vocab_size), graphed.feed(i, cfg.vocab_size);
      both([&] { eager.step(); }, [&] { graphed.step(); });
    }
    CudaGraph graph;
    Tensor loss;
    graph.capture(dev, [&] { loss = graphed.step(); });
    REQUIRE(graph.captured());
    CHECK(graph.captured_launches() > 50);  // the whole step is in it
    for (int i = 2; i < 5; ++i) {
      INFO("step " << i);
      eager.feed(i, cfg.vocab_size), graphed.feed(i, cfg.vocab_size);
      Tensor eager_loss;
      both([&] { eager_loss = eager.step(); }, [&] { graph.replay(); });
      CHECK(same_bits(loss, eager_loss));
      CHECK(graphed.opt->steps() == eager.opt->steps());
      const StateDict pe = eager.model->named_parameters(), pg = graphed.model->named_parameters();
      for (size_t k = 0; k < pe.size(); ++k) {
        INFO(pe[k].first);
        CHECK(same_bits(pg[k].second, pe[k].second));
      }
    }
    const StateDict se = eager.opt->state_dict(), sg = graphed.opt->state_dict();
    REQUIRE(se.size() == sg.size());
    for (size_t k = 0; k < se.size(); ++k) {
      INFO(se[k].first);
      CHECK(same_bits(sg[k].second, se[k].second));
    }
  }
}
