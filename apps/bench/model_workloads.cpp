// The bench's model workloads: training steps of the demo models (the
// attention-regression transformer, the ViT, the CNN teacher with its
// convolutions alone), a GPT-2 124M training step, GPT's generation speed
// (the small model's and GPT-2 124M's decoding against its bandwidth bound),
// and one AdamW step over the ViT's parameters.
#include <algorithm>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "attention_models.h"  // apps/common: the attention-regression demo's transformer
#include "bench.h"
#include "precision.h"  // apps/common: --precision's autocast region and scaled step

namespace ember::bench {

// A training step's forward + loss in precision prec, backward, unscaling
// (fp16), clipping at 1 and the optimizer step (app::MixedPrecision), on
// the batches in turn. The workload's name gets " bf16" / " fp16" appended
// for the 16-bit steps. On a GPU (with graphs on) each precision is also
// timed as a CUDA graph (core/cuda_graph.h), " graph" appended: two eager
// warm-up steps, the step captured on static input tensors, then each timed
// step copies the next batch into them and replays the graph (fp16's
// GradScaler reads the host, so fp16 steps stay eager).
void Bench::train_steps(const std::string& name, int64_t batch, optim::Optimizer& opt,
                        const std::vector<Tensor>& params, const std::vector<std::vector<Tensor>>& batches,
                        const std::function<Tensor(const std::vector<Tensor>&)>& forward_loss) {
  for (const std::string& prec : precisions) {
    app::MixedPrecision mp(prec, g_dev.type);  // apps/common/precision.h
    const std::string label = mp.low() ? name + " " + prec : name;
    auto train_step = [&](const std::vector<Tensor>& inputs) {
      opt.zero_grad();
      Tensor loss;
      {
        const AutocastGuard region = mp.region();
        loss = forward_loss(inputs);
      }
      mp.backward_step(loss, opt, params, 1.0);
    };
    size_t it = 0;
    step(label, batch, [&] { train_step(batches[it++ % batches.size()]); });
    if (profile) profile_step(label, [&] { train_step(batches[0]); });
    if (!graphs || g_dev.is_cpu() || prec == "fp16") continue;
    std::vector<Tensor> inputs;
    for (const Tensor& t : batches[0]) inputs.push_back(t.clone());
    for (int i = 0; i < 2; ++i) train_step(inputs);
    CudaGraph graph;
    graph.capture(g_dev, [&] { train_step(inputs); });
    step(label + " graph", batch, [&] {
      const std::vector<Tensor>& next = batches[it++ % batches.size()];
      for (size_t j = 0; j < inputs.size(); ++j) inputs[j].copy_(next[j]);
      graph.replay();
    });
  }
}

void Bench::attention_regression() {
  for (int64_t batch : {32, 256}) {
    if (only_batch && batch != only_batch) continue;
    ar::TokenTransformer model;
    model.to(g_dev);
    model.train();
    optim::Adam opt(model.parameters(), optim::AdamOptions{.lr = 1e-3, .weight_decay = 1e-6});
    Generator g(1);
    std::vector<std::vector<Tensor>> xs;  // 8 batches in turn, so the model keeps learning
    for (int i = 0; i < 8; ++i) xs.push_back({uniform({batch, 50}, 0, 5, on_dev(), &g)});
    train_steps("attention_regression train step", batch, opt, model.parameters(), xs,
                [&](const std::vector<Tensor>& in) {
                  const Tensor& x = in[0];
                  const Tensor y = add(mul(sin(x), 2.0), pow(x, 0.8));
                  return mse_loss(model(x), y);
                });
  }
}

void Bench::vit() {
  const int64_t batch = 128;
  nn::VisionTransformerOptions o;  // 28x28, patch 7, width 64, depth 4, 4 heads, MLP 128
  nn::VisionTransformer model(o);
  model.to(g_dev);
  model.train();
  optim::AdamW opt(optim::weight_decay_groups(model.named_parameters(), 0.05), optim::AdamW::defaults());
  Generator g(2);
  std::vector<std::vector<Tensor>> data;  // 8 batches in turn
  for (int i = 0; i < 8; ++i)
    data.push_back({randn({batch, 1, 28, 28}, on_dev(), &g), randint(0, 10, {batch}, on_dev(kInt64), &g)});
  train_steps("vit train step", batch, opt, model.parameters(), data, [&](const std::vector<Tensor>& in) {
    return cross_entropy(model(in[0]), in[1], Reduction::Mean, -100, 0.1);
  });
}

// The character-level GPT's training step at nanoGPT's CPU configuration
// (the gpt demo's --preset nanogpt-cpu: 4 layers, 4 heads, width 128,
// vocabulary 65, context 64, batch 12, no dropout; AdamW lr 1e-3, weight
// decay 0.1 on the matrices, clipping at 1), on random tokens; on a GPU also
// as a CUDA graph, as every training step here.
void Bench::gpt_train() {
  const int64_t B = 12;
  nn::GPTConfig cfg;  // its defaults are that configuration
  Generator gen(6);
  nn::GPT model(cfg, &gen);
  model.to(g_dev);
  model.train();
  optim::AdamW opt(optim::weight_decay_groups(model.named_parameters(), 0.1), optim::AdamWOptions{.lr = 1e-3});
  std::vector<std::vector<Tensor>> data;  // 4 batches in turn
  for (int i = 0; i < 4; ++i)
    data.push_back({randint(0, cfg.vocab_size, {B, cfg.block_size}, on_dev(kInt64), &gen),
                    randint(0, cfg.vocab_size, {B, cfg.block_size}, on_dev(kInt64), &gen)});
  train_steps("gpt train step", B, opt, model.parameters(), data,
              [&](const std::vector<Tensor>& in) { return model.loss(in[0], in[1]); });
}

// The CNN teacher's convolutions (3x3, padding 1, batch 128) forward and
// backward (input, weight and bias gradients), then a whole training step of
// the teacher (nn::ResNet with its defaults: 1 -> 32 -> 64 -> 128 channels on
// 28x28, 14x14, 7x7; SGD with momentum). tools/bench_torch.py times the same.
void Bench::conv() {
  const int64_t batch = 128;
  struct S {
    int64_t cin, cout, hw, stride;
  };
  for (const S& s : std::vector<S>{
           {1, 32, 28, 1}, {32, 32, 28, 1}, {32, 64, 28, 2}, {64, 64, 14, 1}, {64, 128, 14, 2}, {128, 128, 7, 1}}) {
    const Tensor x = randn({batch, s.cin, s.hw, s.hw}, on_dev()).requires_grad_();
    const Tensor w = mul(randn({s.cout, s.cin, 3, 3}, on_dev()), 0.1).requires_grad_();
    const Tensor b = zeros({s.cout}, on_dev()).requires_grad_();
    const int64_t ho = (s.hw + 2 - 3) / s.stride + 1;
    const double gflop = 3 * 2.0 * batch * s.cout * ho * ho * s.cin * 9 * 1e-9;  // forward + two backward GEMMs
    char name[96];
    std::snprintf(name, sizeof name, "conv2d fwd+bwd %lld->%lld %lldx%lld s%lld", static_cast<long long>(s.cin),
                  static_cast<long long>(s.cout), static_cast<long long>(s.hw), static_cast<long long>(s.hw),
                  static_cast<long long>(s.stride));
    record(name, batch,
           time_steps(std::min(warmup, 5), steps,
                      [&] {
                        sum(conv2d(x, w, b, {s.stride, s.stride}, {1, 1})).backward();
                      }),
           gflop, 0);
  }
  nn::ResNet model;
  model.to(g_dev);
  model.train();
  optim::SGD opt(model.parameters(),
                 optim::SGDOptions{.lr = 0.05, .momentum = 0.9, .weight_decay = 5e-4, .nesterov = true});
  Generator g(3);
  std::vector<std::pair<Tensor, Tensor>> data;  // 4 batches in turn
  for (int i = 0; i < 4; ++i)
    data.emplace_back(randn({batch, 1, 28, 28}, on_dev(), &g), randint(0, 10, {batch}, on_dev(kInt64), &g));
  int it = 0;
  step("resnet teacher train step", batch, [&] {
    const auto& [x, t] = data[it++ % 4];
    opt.zero_grad();
    cross_entropy(model(x), t).backward();
    opt.step();
  });
}

// GPT-2 124M (12 layers, 12 heads, width 768, vocabulary 50257, context
// 1024, tanh GELU) decoding one token at a time with the KV cache, batch 1,
// at contexts 64, 256 and 1024: the cache is filled with random keys and
// values up to context - 16 positions (what a prefill would leave; the
// speed does not depend on the values), then each timed step is one token's
// forward, its logits read back and one draw (temperature 0.8, the gpt app's
// default), at positions context - 16 .. context - 1 in turn. fp32 runs the
// float32 model; bf16 runs it in a bfloat16 autocast region held across the
// steps, as `gpt --generate --precision bf16` does. The bound: each token
// reads every weight once (the position embedding one row), so at most
// triad bandwidth / weight bytes tokens per second (float32: 4 bytes a
// weight; bf16: 2); the KV cache's bytes are printed beside it.
namespace {
void gpt2_generate(Bench& b) {
  nn::GPTConfig cfg;
  cfg.vocab_size = 50257, cfg.block_size = 1024, cfg.n_layer = 12, cfg.n_head = 12, cfg.n_embd = 768;
  cfg.gelu = GeluApproximation::Tanh;
  Generator gen(5);
  nn::GPT m(cfg, &gen);
  m.to(g_dev);
  m.eval();
  const int64_t weights = m.num_parameters() - m.wpe->weight.numel();
  std::printf(
      "\nGPT-2 124M generation, batch 1, KV cache (%.1fM weights read per token; bound: triad %.1f GB/s / "
      "weight bytes)\n",
      static_cast<double>(weights) * 1e-6, b.triad_gbs);
  std::printf("%-28s %8s %9s %9s %9s %7s %9s\n", "workload", "context", "ms/token", "tokens/s", "bound", "% bound",
              "KV MB");
  const int64_t N = 16;  // timed positions per context
  for (const std::string& prec : b.precisions) {
    if (prec != "fp32" && prec != "bf16") continue;
    app::MixedPrecision mp(prec, g_dev.type);
    const AutocastGuard region = mp.region();  // one region for every step, as the gpt app holds it
    const double weight_bytes = static_cast<double>(weights) * (prec == "bf16" ? 2.0 : 4.0);
    const double bound = b.triad_gbs * 1e9 / weight_bytes;
    for (int64_t C : {64, 256, 1024}) {
      nn::KVCache cache = m.make_cache(1);
      {
        NoGradGuard ng;
        for (Tensor& t : cache.k) t.copy_(randn(t.shape(), on_dev(), &gen));
        for (Tensor& t : cache.v) t.copy_(randn(t.shape(), on_dev(), &gen));
      }
      cache.len = C - N;
      nn::SampleOptions so;
      so.temperature = 0.8;
      std::mt19937_64 rng(1);
      int64_t token = 0;
      auto one = [&] {
        if (cache.len == C) cache.len = C - N;
        const Tensor logits = m.forward_cached(from_vector(std::vector<int64_t>{token}, {1, 1}).to(g_dev), cache);
        const std::vector<double> row = logits.cpu().to_vector<double>();
        token = nn::sample_token(row, so, static_cast<double>(rng() >> 11) * 0x1.0p-53);
      };
      const Timing t = time_steps(std::min(b.warmup, 5), std::max(b.steps, 2 * static_cast<int>(N)), one);
      const double tps = 1e3 / t.median_ms;
      const double kv_mb = 2.0 * static_cast<double>(cfg.n_layer * C * cfg.n_embd) *
                           static_cast<double>(cache.k[0].element_size()) * 1e-6;
      const std::string name = "gpt2 124M generate " + prec;
      std::printf("%-28s %8lld %9.2f %9.1f %9.1f %6.0f%% %9.1f\n", name.c_str(), static_cast<long long>(C), t.median_ms,
                  tps, bound, 100 * tps / bound, kv_mb);
      b.records.push_back({{"workload", name},
                           {"precision", prec},
                           {"context", C},
                           {"median_ms", t.median_ms},
                           {"min_ms", t.min_ms},
                           {"max_ms", t.max_ms},
                           {"cpu_ms", t.cpu_ms},
                           {"tokens_per_second", tps},
                           {"bound_tokens_per_second", bound},
                           {"fraction_of_bound", tps / bound},
                           {"kv_cache_mb", kv_mb},
                           {"threads", num_threads()}});
      if (b.profile && C == 1024) b.profile_step(name + " context 1024", one);
    }
  }
}
}  // namespace

// Generation speed of the nanogpt-cpu model size (4 layers, 4 heads,
// width 128, vocabulary 65) from a one-token prompt to the full context:
// with the KV cache each token is one position's work; without it every
// token re-encodes the whole sequence so far. Then GPT-2 124M's decoding at
// batch 1 (gpt2_generate). On a GPU with graphs on, the cached generation
// again with each token's step a CUDA graph (SampleOptions::cuda_graph), "
// graph" appended; launches per token count everything one generate issues,
// the capture included. Untrained weights: the speed does not depend on them.
void Bench::gpt_generate() {
  std::printf("\nGPT generation, tokens per second (4 layers, 4 heads, width 128), context - 1 new tokens\n");
  std::printf("%-34s %9s %9s %9s\n", "workload", "context", "ms", "tokens/s");
  for (int64_t T : {64, 256}) {
    nn::GPTConfig cfg;
    cfg.vocab_size = 65, cfg.block_size = T;
    Generator gen(1);
    nn::GPT m(cfg, &gen);
    m.to(g_dev);
    m.eval();
    for (int mode : {0, 1, 2}) {  // KV cache, KV cache in a CUDA graph, no cache
      if (mode == 1 && (!graphs || g_dev.is_cpu())) continue;
      nn::SampleOptions o;
      o.use_cache = mode != 2;
      o.cuda_graph = mode == 1;
      const uint64_t l0 = profiler::device_launches();
      m.generate({0}, T - 1, o);
      const double launches = static_cast<double>(profiler::device_launches() - l0) / static_cast<double>(T - 1);
      const Timing t = time_steps(1, std::max(3, steps / 4), [&] { m.generate({0}, T - 1, o); });
      const double tps = static_cast<double>(T - 1) / (t.median_ms * 1e-3);
      const std::string name = mode == 0   ? "gpt generate, KV cache"
                               : mode == 1 ? "gpt generate, KV cache graph"
                                           : "gpt generate, no cache";
      std::printf("%-34s %9lld %9.2f %9.0f\n", name.c_str(), static_cast<long long>(T), t.median_ms, tps);
      records.push_back({{"workload", name},
                         {"context", T},
                         {"median_ms", t.median_ms},
                         {"min_ms", t.min_ms},
                         {"max_ms", t.max_ms},
                         {"cpu_ms", t.cpu_ms},
                         {"tokens_per_second", tps},
                         {"threads", num_threads()}});
      if (!g_dev.is_cpu()) {
        // With a graph: the capture's one-off launches are spread over the tokens.
        records.back()["launches_per_token"] = launches;
        std::printf("%-34s %9s launches per token: %.1f\n", "", "", launches);
      }
    }
  }
  gpt2_generate(*this);
}

// A GPT-2 124M training step (12 layers, 12 heads, width 768, vocabulary
// 50257, context gpt2_seq, batch gpt2_batch; no dropout; AdamW at lr 3e-4
// without weight decay and clipping at 1, as llm.c's CUDA trainer
// train_gpt2.cu runs by default, with PyTorch's betas where it takes 0.9 /
// 0.95: --gpt2-recipe llmc-cuda in gpt2_files.cpp has those; its CPU trainer
// train_gpt2.c runs lr 1e-4 without clipping, --gpt2-recipe llmc), on random tokens: the
// speed does not depend on them. Tokens per second as
// llm.c prints them; FLOPs from the matmul counter (6 N per token for the
// weights, plus attention's products).
void Bench::gpt2_train() {
  const int64_t B = gpt2_batch, T = gpt2_seq;
  nn::GPTConfig cfg;
  cfg.vocab_size = 50257, cfg.block_size = 1024, cfg.n_layer = 12, cfg.n_head = 12, cfg.n_embd = 768;
  Generator gen(4);
  nn::GPT model(cfg, &gen);
  model.to(g_dev);
  model.train();
  optim::AdamW opt(model.parameters(), optim::AdamWOptions{.lr = 3e-4, .weight_decay = 0.0});
  std::vector<std::vector<Tensor>> data;  // 4 batches in turn
  for (int i = 0; i < 4; ++i)
    data.push_back({randint(0, cfg.vocab_size, {B, T}, on_dev(kInt64), &gen),
                    randint(0, cfg.vocab_size, {B, T}, on_dev(kInt64), &gen)});
  const int saved_warmup = warmup, saved_steps = steps;
  warmup = std::min(warmup, 3), steps = std::min(steps, 10);  // seconds per step on a CPU
  const size_t first = records.size();
  train_steps("gpt2 124M train step T=" + std::to_string(T), B, opt, model.parameters(), data,
              [&](const std::vector<Tensor>& in) { return model.loss(in[0], in[1]); });
  warmup = saved_warmup, steps = saved_steps;
  for (size_t r = first; r < records.size(); ++r) {
    const double tps = static_cast<double>(B * T) / (records[r]["median_ms"].get<double>() * 1e-3);
    records[r]["tokens_per_second"] = tps;
    std::printf("%-34s %6s tokens/s: %.0f\n", "", "", tps);
  }
}

void Bench::adamw() {
  nn::VisionTransformer model(nn::VisionTransformerOptions{});
  model.to(g_dev);
  optim::AdamW opt(optim::weight_decay_groups(model.named_parameters(), 0.05), optim::AdamW::defaults());
  for (Tensor& p : model.parameters()) p.mutable_grad() = ones_like(p);
  table_header("optimizer");
  record("adamw step over ViT parameters (" + std::to_string(model.num_parameters()) + ")", 0,
         time_steps(warmup, steps * 10, [&] { opt.step(); }), 0, 0);
}

}  // namespace ember::bench
