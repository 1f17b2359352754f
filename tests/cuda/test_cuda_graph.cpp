// CUDA graphs (core/cuda_graph.h): a training step captured once and
// replayed gives, replay by replay, the same bits as the same steps run
// eagerly (loss, gradients after clipping, parameters after AdamW with a
// learning rate changed between steps), GPT blocks' step likewise; what a graph cannot hold fails the
// capture with a DeviceError and leaves the device usable; the graph's
// tensors keep their memory. Linked into the emulated test binary (the
// emulator records and replays, and refuses what a GPU refuses) and into
// ember_gpu_tests (a real GPU; skipped without one).
#include <doctest/doctest.h>

#include <memory>
#include <string>
#include <vector>

#include <ember/ember.h>

#include "test_util.h"

using namespace ember;

namespace {

// A transformer encoder block between two Linears, without dropout.
struct Net : nn::Module {
  std::shared_ptr<nn::Linear> in, out;
  std::shared_ptr<nn::TransformerEncoderLayer> block;
  Net() {
    in = register_module("in", std::make_shared<nn::Linear>(3, 32));
    block = register_module("block", std::make_shared<nn::TransformerEncoderLayer>(
                                         nn::TransformerEncoderLayerOptions{.d_model = 32,
                                                                            .nhead = 4,
                                                                            .dim_feedforward = 64,
                                                                            .dropout = 0.0,
                                                                            .activation = nn::Activation::GELU,
                                                                            .batch_first = true,
                                                                            .norm_first = true}));
    out = register_module("out", std::make_shared<nn::Linear>(32, 1));
  }
  Tensor forward(const Tensor& x) override { return (*out)((*block)((*in)(x))); }
};

struct Run {
  std::unique_ptr<Net> net = std::make_unique<Net>();
  std::unique_ptr<optim::AdamW> opt;
  Tensor x, y;  // the step's inputs: static tensors the graph reads

  Run(const StateDict& init, Device dev) {
    net->load_state_dict(init);
    net->to(dev);
    net->train();
    opt = std::make_unique<optim::AdamW>(optim::weight_decay_groups(net->named_parameters(), 0.1),
                                         optim::AdamWOptions{.lr = 1e-2});
    x = zeros({4, 6, 3}, TensorOptions(dev));
    y = zeros({4, 6, 1}, TensorOptions(dev));
  }
  // zero_grad, forward, backward, clipping (tight enough to clip), AdamW.
  Tensor step() {
    opt->zero_grad();
    Tensor loss = mse_loss((*net)(x), y);
    loss.backward();
    optim::clip_grad_norm_(net->parameters(), 0.05);
    opt->step();
    return loss;
  }
};

bool same_bits(const Tensor& a, const Tensor& b) {
  const std::vector<float> va = a.cpu().contiguous().to_vector<float>(), vb = b.cpu().contiguous().to_vector<float>();
  return va == vb;
}

}  // namespace

TEST_CASE("cuda graph: a replayed training step gives the eager step's bits") {
  if (!test::cuda_usable()) return;
  const Device dev("cuda");
  manual_seed(3);
  const StateDict init = Net().state_dict();
  Run eager(init, dev), graphed(init, dev);
  Generator g(11);
  std::vector<std::pair<Tensor, Tensor>> batches;
  for (int i = 0; i < 5; ++i) batches.emplace_back(randn({4, 6, 3}, {}, &g), randn({4, 6, 1}, {}, &g));
  const double lrs[] = {1e-2, 1e-2, 5e-3, 2e-3, 1e-3};  // a schedule: each step's lr set before it

  // Step 0 eagerly on both (the warm-up that creates AdamW's moments).
  for (Run* r : {&eager, &graphed}) {
    r->x.copy_(batches[0].first), r->y.copy_(batches[0].second);
    r->step();
  }
  CudaGraph graph;
  Tensor loss;
  graph.capture(dev, [&] { loss = graphed.step(); });
  REQUIRE(graph.captured());
  CHECK(graph.captured_launches() > 50);  // the whole step is in it
  CHECK(graphed.opt->steps() == 1);       // capturing runs nothing

  for (int i = 1; i < 5; ++i) {
    for (Run* r : {&eager, &graphed}) {
      r->x.copy_(batches[i].first), r->y.copy_(batches[i].second);
      for (auto& group : r->opt->param_groups()) group.lr = lrs[i];
    }
    const Tensor eager_loss = eager.step();
    const uint64_t launches = profiler::device_launches();
    graph.replay();
    // The graph, and AdamW's hook copying this step's scalars to the device.
    CHECK(profiler::device_launches() - launches == 2);
    INFO("step " << i);
    CHECK(same_bits(loss, eager_loss));
    CHECK(graphed.opt->steps() == eager.opt->steps());
    const StateDict pe = eager.net->named_parameters(), pg = graphed.net->named_parameters();
    for (size_t k = 0; k < pe.size(); ++k) {
      INFO(pe[k].first);
      CHECK(same_bits(pg[k].second, pe[k].second));
      CHECK(same_bits(pg[k].second.grad(), pe[k].second.grad()));
    }
  }
  // The optimizer state a checkpoint saves is the eager run's.
  const StateDict se = eager.opt->state_dict(), sg = graphed.opt->state_dict();
  REQUIRE(se.size() == sg.size());
  for (size_t k = 0; k < se.size(); ++k) CHECK(same_bits(sg[k].second.to(kFloat32), se[k].second.to(kFloat32)));
}

TEST_CASE("cuda graph: what a graph cannot hold fails the capture and leaves the device usable") {
  if (!test::cuda_usable()) return;
  const Device dev("cuda");
  const Tensor x = full({8}, 2.0, TensorOptions(dev));
  auto refused = [&](const std::function<void()>& body, const std::string& words) {
    CudaGraph graph;
    std::string what;
    try {
      graph.capture(dev, body);
    } catch (const DeviceError& e) {
      what = e.what();
    }
    INFO(what);
    CHECK(what.find("CudaGraph::capture") != std::string::npos);
    CHECK(what.find(words) != std::string::npos);
    CHECK_FALSE(graph.captured());
    // Eager work goes on: nothing is left capturing.
    CHECK(mul(x, 3.0).cpu().to_vector<float>() == std::vector<float>(8, 6.0f));
  };
  refused([&] { (void)sum(x).item<double>(); }, "capturing");  // a host read
  refused([&] { (void)x.cpu(); }, "capturing");                // likewise
  {
    Tensor p = zeros({3}, TensorOptions(dev)).requires_grad_();
    p.mutable_grad() = ones_like(p);
    optim::SGD sgd({p}, optim::SGDOptions{.lr = 0.1});
    refused([&] { sgd.step(); }, "SGD");
    optim::AdamW adamw({p});
    refused([&] { adamw.step(); }, "warm-up");  // its moments would be zeroed by every replay
  }
  CHECK_FALSE(is_capturing(dev));
  CudaGraph graph;
  CHECK_THROWS_AS(graph.replay(), DeviceError);
  CHECK_THROWS_AS(graph.capture(kCPU, [] {}), DeviceError);
  CHECK_THROWS_AS(on_replay(dev, [] {}), ValueError);
}

TEST_CASE("cuda graph: the graph's tensors keep their memory between replays") {
  if (!test::cuda_usable()) return;
  const Device dev("cuda");
  Tensor x = full({1024}, 1.0, TensorOptions(dev));
  Tensor y;
  CudaGraph graph;
  graph.capture(dev, [&] {
    Tensor t = mul(x, 2.0);  // freed inside the capture: its block serves the next allocation
    y = add(t, 1.0);
  });
  // Eager allocations after the capture never get the graph's blocks.
  std::vector<Tensor> others;
  for (int i = 0; i < 16; ++i) others.push_back(full({1024}, 7.0, TensorOptions(dev)));
  for (const Tensor& o : others) CHECK(o.data_ptr() != y.data_ptr());
  graph.replay();
  CHECK(y.cpu().to_vector<float>() == std::vector<float>(1024, 3.0f));
  x.copy_(full({1024}, 5.0));  // new input, same tensor
  graph.replay();
  CHECK(y.cpu().to_vector<float>() == std::vector<float>(1024, 11.0f));
  for (const Tensor& o : others) CHECK(o.cpu().to_vector<float>() == std::vector<float>(1024, 7.0f));
}

TEST_CASE("cuda graph: random numbers in a replay are the eager step's, and advance the generator") {
  if (!test::cuda_usable()) return;
  const Device dev("cuda");
  const Tensor x = randn({1000}, TensorOptions(dev));
  Generator eager_gen(5), graph_gen(5);
  (void)randn({7}, TensorOptions(dev), &eager_gen);  // the generators need not start at counter 0
  (void)randn({7}, TensorOptions(dev), &graph_gen);
  Tensor y, r;
  CudaGraph graph;
  graph.capture(dev, [&] {
    y = dropout(x, 0.3, true, &graph_gen);
    r = randn({33}, TensorOptions(dev), &graph_gen);
  });
  CHECK(graph_gen.offset() == eager_gen.offset());  // capturing draws nothing
  for (int i = 0; i < 3; ++i) {
    const Tensor ye = dropout(x, 0.3, true, &eager_gen), re = randn({33}, TensorOptions(dev), &eager_gen);
    graph.replay();
    INFO("replay " << i);
    CHECK(same_bits(y, ye));
    CHECK(same_bits(r, re));
    CHECK(graph_gen.offset() == eager_gen.offset());
  }
}

TEST_CASE("cuda graph: indices are checked at every replay, on the device") {
  if (!test::cuda_usable()) return;
  const Device dev("cuda");
  const Tensor logits = randn({6, 5}, TensorOptions(dev));
  Tensor target = from_vector(std::vector<int64_t>{0, 1, 4, -100, 2, 3}).to(dev);
  Tensor loss;
  CudaGraph graph;
  graph.capture(dev, [&] { loss = cross_entropy(logits, target); });
  graph.replay();
  // The mean over the targets that are not ignore_index, as eagerly.
  CHECK(same_bits(loss, cross_entropy(logits, target)));
  target.copy_(from_vector(std::vector<int64_t>{0, -100, -100, -100, 2, 3}));  // fewer counted targets
  graph.replay();
  CHECK(same_bits(loss, cross_entropy(logits, target)));
  target.copy_(from_vector(std::vector<int64_t>{0, 1, 7, 1, 2, 3}));  // 7: out of range for 5 classes
  std::string what;
  try {
    graph.replay();
  } catch (const IndexError& e) {
    what = e.what();
  }
  INFO(what);
  CHECK(what.find("index 7 is out of range for size 5") != std::string::npos);
  target.copy_(from_vector(std::vector<int64_t>{4, 3, 2, 1, 0, 0}));
  graph.replay();  // the error record starts clean at each replay
  CHECK(same_bits(loss, cross_entropy(logits, target)));
}

// GPT's blocks alone, on float inputs (the whole model's step, embeddings and
// dropout included: test_cuda_graph_gpt.cpp).
struct GptBlocks : nn::Module {
  std::shared_ptr<nn::GPTBlock> b0, b1;
  explicit GptBlocks(const nn::GPTConfig& c) {
    b0 = register_module("b0", std::make_shared<nn::GPTBlock>(c));
    b1 = register_module("b1", std::make_shared<nn::GPTBlock>(c));
  }
  Tensor forward(const Tensor& x) override { return b1->forward(b0->forward(x)); }
};

TEST_CASE("cuda graph: GPT blocks' training step (linear_gelu's fused kernels in the MLPs) replays the eager bits") {
  if (!test::cuda_usable()) return;
  const Device dev("cuda");
  const nn::GPTConfig cfg{
      .vocab_size = 11, .block_size = 8, .n_layer = 2, .n_head = 2, .n_embd = 16, .gelu = GeluApproximation::Tanh};
  manual_seed(5);
  const StateDict init = GptBlocks(cfg).state_dict();
  struct GptRun {
    GptBlocks model;
    std::unique_ptr<optim::AdamW> opt;
    Tensor x = zeros({2, 8, 16}, TensorOptions(Device("cuda"))), y = zeros({2, 8, 16}, TensorOptions(Device("cuda")));
    GptRun(const nn::GPTConfig& c, const StateDict& init, Device dev) : model(c) {
      model.load_state_dict(init);
      model.to(dev);
      opt = std::make_unique<optim::AdamW>(model.parameters(), optim::AdamWOptions{.lr = 1e-2});
    }
    Tensor step() {
      opt->zero_grad();
      Tensor loss = mse_loss(model.forward(x), y);
      loss.backward();
      opt->step();
      return loss;
    }
  };
  GptRun eager(cfg, init, dev), graphed(cfg, init, dev);
  auto feed = [](GptRun& r, int i) {
    Generator gi(100 + i);
    r.x.copy_(randn({2, 8, 16}, {}, &gi));
    r.y.copy_(randn({2, 8, 16}, {}, &gi));
  };
  for (GptRun* r : {&eager, &graphed}) {
    feed(*r, 0);
    r->step();
  }
  CudaGraph graph;
  Tensor loss;
  graph.capture(dev, [&] { loss = graphed.step(); });
  REQUIRE(graph.captured());
  for (int i = 1; i < 4; ++i) {
    feed(eager, i);
    feed(graphed, i);
    const Tensor eager_loss = eager.step();
    graph.replay();
    INFO("step " << i);
    CHECK(same_bits(loss, eager_loss));
    const StateDict pe = eager.model.named_parameters(), pg = graphed.model.named_parameters();
    for (size_t k = 0; k < pe.size(); ++k) {
      INFO(pe[k].first);
      CHECK(same_bits(pg[k].second, pe[k].second));
      CHECK(same_bits(pg[k].second.grad(), pe[k].second.grad()));
    }
  }
}
