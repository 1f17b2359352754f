// GPT decoding one token per step on fixed shapes (nn/gpt_decode.h): the
// step's logits against GPT::forward_cached's over several positions, on the
// CPU (the step eagerly) and on CUDA (the step as a replayed CUDA graph), in
// float32 and in a bfloat16 autocast region, greedy generation giving the
// same tokens with and without it, the decoder rebuilt when the region or
// the weights change, the context limit, and the eager cached forward
// captured at its one position (the cache length is a host number). Linked
// into the emulated test binary and
// into ember_gpu_tests.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include <ember/ember.h>

#include "test_util.h"

using namespace ember;

namespace {

nn::GPTConfig tiny() {
  nn::GPTConfig c;
  c.vocab_size = 13;
  c.block_size = 8;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 8;
  return c;
}

std::vector<Device> devices() {
  std::vector<Device> d{Device("cpu")};
  if (test::cuda_usable()) d.emplace_back("cuda");
  return d;
}

// The largest |a - b| over two tensors of logits.
double max_diff(const Tensor& a, const Tensor& b) {
  const std::vector<float> va = a.cpu().contiguous().to_vector<float>(), vb = b.cpu().contiguous().to_vector<float>();
  REQUIRE(va.size() == vb.size());
  double m = 0;
  for (size_t i = 0; i < va.size(); ++i) m = std::max(m, std::abs(static_cast<double>(va[i]) - vb[i]));
  return m;
}

}  // namespace

TEST_CASE("gpt decode: the fixed-shape step gives forward_cached's logits at every position") {
  for (const Device& dev : devices()) {
    INFO(dev.str());
    Generator g(5);
    nn::GPT model(tiny(), &g);
    model.to(dev);
    model.eval();
    const int64_t B = 2;
    nn::GraphedDecoder dec(model, B);
    CHECK(dec.graphed() == !dev.is_cpu());
    if (dec.graphed()) CHECK(dec.captured_launches() > 0);
    nn::KVCache cache = model.make_cache(B);
    const Tensor prompt = from_vector(std::vector<int64_t>{1, 4, 7, 2, 9, 3}, {B, 3}).to(dev);
    CHECK(max_diff(dec.prefill(prompt), model.forward_cached(prompt, cache)) == 0.0);  // the same eager path
    // Positions 3 .. 7: the cache filled to the last position of the context.
    const std::vector<std::vector<int64_t>> next{{5, 0}, {12, 6}, {3, 3}, {8, 11}, {1, 2}};
    for (const auto& t : next) {
      INFO("position ", dec.len());
      const Tensor got = dec.step(t).clone();
      const Tensor want = model.forward_cached(from_vector(t, {B, 1}).to(dev), cache);
      CHECK(got.shape() == want.shape());
      CHECK(max_diff(got, want) < 1e-5);
      CHECK(dec.len() == cache.len);
    }
    // The context is full: a clear error, and the decoder is left as it was.
    CHECK(dec.len() == 8);
    CHECK_THROWS_AS(dec.step({1, 1}), ShapeError);
    CHECK_THROWS_AS(dec.step({1}), ValueError);      // one token for two rows
    CHECK_THROWS_AS(dec.step({1, 13}), ValueError);  // outside the vocabulary
    {
      const AutocastGuard region(dev.type, DType::BFloat16);  // built outside a region: its dtypes are fixed
      CHECK_FALSE(dec.matches_autocast());
      CHECK_THROWS_AS(dec.step({1, 1}), ValueError);
    }
    // Starting over: keys past the position are never read, the step matches a fresh cache.
    dec.reset();
    nn::KVCache fresh = model.make_cache(B);
    const Tensor got = dec.step({4, 10}).clone();
    CHECK(max_diff(got, model.forward_cached(from_vector(std::vector<int64_t>{4, 10}, {B, 1}).to(dev), fresh)) < 1e-5);
  }
}

TEST_CASE("gpt decode: greedy generation gives the same tokens with and without the graphed step") {
  for (const Device& dev : devices()) {
    INFO(dev.str());
    Generator g(9);
    nn::GPT model(tiny(), &g);
    model.to(dev);
    nn::SampleOptions o;
    o.temperature = 0.0;
    const std::vector<int64_t> eager = model.generate({3, 1, 4}, 9, o);  // past the context of 8
    o.cuda_graph = true;
    const std::vector<int64_t> graphed = model.generate({3, 1, 4}, 9, o);
    CHECK(graphed == eager);
    CHECK(eager.size() == 12);
  }
}

TEST_CASE("gpt decode: in a 16-bit autocast region the step gives the region's cached logits") {
  for (const Device& dev : devices())
    for (const DType low : {DType::BFloat16, DType::Float16}) {
      INFO(dev.str(), " ", dtype_name(low));
      Generator g(5);
      nn::GPT model(tiny(), &g);
      model.to(dev);
      model.eval();
      const int64_t B = 2;
      const AutocastGuard region(dev.type, low);
      nn::GraphedDecoder dec(model, B);
      CHECK(dec.dtype() == low);
      CHECK(dec.graphed() == !dev.is_cpu());
      nn::KVCache cache = model.make_cache(B);
      const Tensor prompt = from_vector(std::vector<int64_t>{1, 4, 7, 2, 9, 3}, {B, 3}).to(dev);
      CHECK(max_diff(dec.prefill(prompt), model.forward_cached(prompt, cache)) == 0.0);  // the same eager path
      const std::vector<std::vector<int64_t>> next{{5, 0}, {12, 6}, {3, 3}, {8, 11}, {1, 2}};
      for (const auto& t : next) {
        INFO("position ", dec.len());
        const Tensor got = dec.step(t).clone();
        const Tensor want = model.forward_cached(from_vector(t, {B, 1}).to(dev), cache);
        CHECK(got.dtype() == want.dtype());  // 16-bit logits, as autocast's head gives
        // The attention's float32 sums in another order can move a 16-bit
        // rounding (2^-8 relative in bfloat16) on the way; a few such steps at most.
        const double scale = max(abs(want.to(DType::Float32))).item<double>();
        CHECK(max_diff(got, want) <= 0.03 * scale);
      }
    }
}

TEST_CASE(
    "gpt decode: generate in a bfloat16 region gives the eager region's greedy tokens, and rebuilds its "
    "decoder for another region or new weights") {
  for (const Device& dev : devices()) {
    INFO(dev.str());
    Generator g(9);
    nn::GPT model(tiny(), &g);
    model.to(dev);
    nn::SampleOptions o;
    o.temperature = 0.0;
    std::vector<int64_t> eager, graphed;
    {
      const AutocastGuard region(dev.type, DType::BFloat16);
      eager = model.generate({3, 1, 4}, 9, o);
      o.cuda_graph = true;
      graphed = model.generate({3, 1, 4}, 9, o);
    }
    CHECK(graphed == eager);
    // Outside the region the kept bfloat16 decoder does not fit: a float32 one is built.
    const std::vector<int64_t> graphed32 = model.generate({3, 1, 4}, 9, o);
    o.cuda_graph = false;
    CHECK(graphed32 == model.generate({3, 1, 4}, 9, o));
    // A float32 decoder reads the parameters themselves, a bfloat16 one copies
    // of them: an in-place write leaves the first current, not the second.
    nn::GraphedDecoder d32(model, 1);
    std::unique_ptr<nn::GraphedDecoder> d16;
    {
      const AutocastGuard region(dev.type, DType::BFloat16);
      d16 = std::make_unique<nn::GraphedDecoder>(model, 1);
    }
    CHECK(d32.current());
    CHECK(d16->current());
    {
      NoGradGuard ng;
      mul_(model.ln_f->weight, 1.0);
    }
    CHECK(d32.current());
    CHECK_FALSE(d16->current());
  }
}

TEST_CASE("cuda graph: the eager cached GPT forward captures at its one position, the fixed-shape decoder moves on") {
  if (!test::cuda_usable()) return;
  const Device dev("cuda");
  Generator g(2);
  nn::GPT model(tiny(), &g);
  model.to(dev);
  model.eval();
  nn::KVCache cache = model.make_cache(1);
  const Tensor idx = from_vector(std::vector<int64_t>{5}, {1, 1}).to(dev);
  (void)model.forward_cached(idx, cache);  // warm-up
  cache.len = 0;
  const std::vector<float> eager = model.forward_cached(idx, cache).cpu().to_vector<float>();
  cache.len = 0;
  // Its positions are a range made on the device, so it captures; but the
  // cache's length is a host number, fixed at the capture's: every replay
  // decodes position 0 again, which is why decoding has GraphedDecoder.
  CudaGraph graph;
  Tensor logits;
  graph.capture(dev, [&] { logits = model.forward_cached(idx, cache); });
  REQUIRE(graph.captured());
  CHECK(cache.len == 1);
  for (int i = 0; i < 2; ++i) {
    graph.replay();
    CHECK(logits.cpu().to_vector<float>() == eager);
  }
  // The fixed-shape decoder captures on the same model afterwards.
  nn::GraphedDecoder dec(model, 1);
  CHECK(dec.graphed());
  CHECK(dec.step({5}).size(2) == 13);
}

TEST_CASE("cuda graph: a graphed GPT decode step is a few launches, the eager one a launch per op") {
  if (!test::cuda_usable()) return;
  const Device dev("cuda");
  Generator g(4);
  nn::GPTConfig cfg = tiny();
  cfg.n_layer = 4;  // the bench's generation model's depth
  nn::GPT model(cfg, &g);
  model.to(dev);
  nn::GraphedDecoder dec(model, 1);
  nn::KVCache cache = model.make_cache(1);
  (void)model.forward_cached(from_vector(std::vector<int64_t>{1}, {1, 1}).to(dev), cache);
  (void)dec.step({1});
  uint64_t l0 = profiler::device_launches();
  (void)model.forward_cached(from_vector(std::vector<int64_t>{2}, {1, 1}).to(dev), cache).cpu();
  const uint64_t eager = profiler::device_launches() - l0;
  l0 = profiler::device_launches();
  (void)dec.step({2}).cpu();
  const uint64_t graphed = profiler::device_launches() - l0;
  MESSAGE("launches per token, 4 layers: eager ", eager, ", graphed ", graphed, " (the graph holds ",
          dec.captured_launches(), ")");
  // The input copy, the graph, the read-back of its index-check record
  // (the embeddings' lookups), the logits' read-back: whatever the depth.
  CHECK(graphed == 4);
  CHECK(eager > 10 * graphed);
}
