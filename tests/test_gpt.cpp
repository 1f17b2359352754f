// The GPT of nn/gpt.h: names and init, forward and every parameter gradient
// against PyTorch (tests/fixtures/gpt_small.safetensors from
// tools/gpt_torch.py --fixture), KV-cache generation against full
// recomputation, and the sampler.
#include <doctest/doctest.h>
#include <ember/ember.h>

#include "test_util.h"

#include <cmath>
#include <limits>
#include <numeric>
#include <random>

using namespace ember;

namespace {
nn::GPTConfig small_config() {
  nn::GPTConfig c;
  c.vocab_size = 11;
  c.block_size = 8;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 16;
  return c;
}
}  // namespace

TEST_CASE("GPT: GPT-2 parameter names, one tied head, nanoGPT's init") {
  nn::GPTConfig c = small_config();
  c.n_embd = 64;
  c.vocab_size = 50;
  Generator gen(1);
  nn::GPT m(c, &gen);
  std::vector<std::string> names;
  for (auto& [n, p] : m.named_parameters()) names.push_back(n);
  CHECK(names.front() == "wte.weight");
  CHECK(names[1] == "wpe.weight");
  CHECK(std::find(names.begin(), names.end(), "h.1.attn.c_attn.weight") != names.end());
  CHECK(std::find(names.begin(), names.end(), "h.0.mlp.c_proj.bias") != names.end());
  CHECK(names.back() == "ln_f.bias");
  CHECK(names.size() == 2 + 2 * 12 + 2);  // no lm_head: the head is wte.weight
  auto std_of = [](const Tensor& t) { return std::sqrt(mean(mul(t, t)).item<double>()); };
  CHECK(std_of(m.h->at<nn::GPTBlock>(0).attn->c_attn->weight) == doctest::Approx(0.02).epsilon(0.05));
  CHECK(std_of(m.h->at<nn::GPTBlock>(1).mlp->c_proj->weight) == doctest::Approx(0.02 / 2.0).epsilon(0.05));
  CHECK(max(abs(m.h->at<nn::GPTBlock>(0).attn->c_attn->bias)).item<double>() == 0.0);
  nn::GPTConfig nb = c;
  nb.bias = false;
  nn::GPT m2(nb);
  for (auto& entry : m2.named_parameters()) {
    const std::string& n = entry.first;
    CHECK_MESSAGE(n.find("bias") == std::string::npos, n);
  }
  CHECK_THROWS_AS(nn::GPT(nn::GPTConfig{11, 8, 2, 3, 16}), ValueError);
}

TEST_CASE("GPT: num_parameters() counts every parameter, as on any Module, the non-embedding count has its own name") {
  nn::GPT m(small_config());
  // wte 11*16 + wpe 8*16 + 2 blocks * (2 norms 2*32 + c_attn 16*48+48 + c_proj 16*16+16 + c_fc 16*64+64
  // + c_proj 64*16+16) + ln_f 32; the tied head adds nothing.
  const int64_t all = 176 + 128 + 2 * (64 + 816 + 272 + 1088 + 1040) + 32;
  CHECK(m.num_parameters() == all);
  const nn::Module& as_module = m;
  CHECK(as_module.num_parameters() == all);
  CHECK(m.num_parameters_non_embedding() == all - 128);  // nanoGPT's count: without wpe
  CHECK(m.num_parameters(/*non_embedding=*/true) == all - 128);
  CHECK(m.num_parameters(/*non_embedding=*/false) == all);
}

TEST_CASE("GPT: logits, loss and every parameter gradient match PyTorch") {
  nn::GPT m(small_config());
  const std::string path = std::string(EMBER_FIXTURE_DIR) + "/gpt_small.safetensors";
  const nn::LoadResult r = nn::load(m, path, /*strict=*/false);
  CHECK(r.missing_keys.empty());
  StateDict ref = load_safetensors(path);
  auto get = [&](const std::string& n) { return test::fixture_tensor(ref, n); };
  const Tensor idx = get("idx").to(DType::Int64), tgt = get("targets").to(DType::Int64);
  const Tensor logits = m.forward(idx);
  CHECK(allclose(logits, get("logits"), 1e-5, 1e-6));
  const Tensor loss = cross_entropy(logits.reshape({-1, 11}), tgt.reshape({-1}));
  CHECK(loss.item<double>() == doctest::Approx(get("loss").item<double>()).epsilon(1e-6));
  loss.backward();
  int checked = 0;
  for (auto& entry : m.named_parameters()) {
    auto& n = entry.first;
    auto& p = entry.second;
    CHECK_MESSAGE(allclose(p.grad(), get("grad." + n), 1e-4, 1e-7), n);
    ++checked;
  }
  CHECK(checked == 28);
}

TEST_CASE("GPT: generation with the KV cache gives the tokens of full recomputation") {
  Generator gen(3);
  nn::GPTConfig c = small_config();
  c.block_size = 70;  // past one 64-key block of the fused attention
  c.vocab_size = 13;
  nn::GPT m(c, &gen);
  {
    // Larger weights than the 0.02 init, so the distribution is far from uniform.
    NoGradGuard ng;
    for (auto& [n, p] : m.named_parameters())
      if (p.dim() == 2) mul_(p, 20.0);
  }
  const std::vector<int64_t> prompt{1, 5, 2};
  for (const nn::SampleOptions base : {nn::SampleOptions{0.0, 0, 1.0, 7}, nn::SampleOptions{1.0, 0, 1.0, 7},
                                       nn::SampleOptions{0.8, 5, 1.0, 9}, nn::SampleOptions{1.2, 0, 0.9, 11}}) {
    nn::SampleOptions a = base, b = base;
    a.use_cache = true;
    b.use_cache = false;
    // 90 tokens: through the context's end (70), where every step re-encodes the window.
    const std::vector<int64_t> with = m.generate(prompt, 90, a), without = m.generate(prompt, 90, b);
    CHECK(with.size() == 93);
    CHECK(with == without);
    CHECK(std::vector<int64_t>(with.begin(), with.begin() + 3) == prompt);
    CHECK(m.generate(prompt, 90, a) == with);  // the seed fixes the draws
  }
  // The cached logits equal the uncached ones position by position.
  const Tensor ids = from_vector(std::vector<int64_t>{3, 1, 4, 1, 5, 9, 2, 6}, {1, 8});
  nn::KVCache cache = m.make_cache(1);
  m.eval();
  const Tensor full = m.forward(ids);
  const Tensor first = m.forward_cached(ids.narrow(1, 0, 5), cache);
  const Tensor next = m.forward_cached(ids.narrow(1, 5, 3), cache);
  CHECK(cache.len == 8);
  CHECK(allclose(cat({first, next}, 1), full, 1e-5, 1e-5));
  CHECK_THROWS_AS(m.generate({}, 3), ValueError);
  CHECK_THROWS_AS(m.generate({13}, 3), ValueError);
}

TEST_CASE("GPT: the KV cache under bfloat16 autocast: the logits of the uncached forward") {
  // Autocast gives c_attn's output in bfloat16 while the cache keeps the
  // weights' float32; the new keys and values are exact in either, so the
  // cached and uncached logits differ by the attention's rounding only.
  Generator gen(5);
  nn::GPT m(small_config(), &gen);
  m.eval();
  const Tensor ids = from_vector(std::vector<int64_t>{3, 1, 4, 1, 5, 9, 2, 6}, {1, 8});
  const AutocastGuard region(DeviceType::CPU, kBFloat16);
  const Tensor full = m.forward(ids).to(kFloat32);
  nn::KVCache cache = m.make_cache(1);
  const Tensor first = m.forward_cached(ids.narrow(1, 0, 5), cache);
  const Tensor next = m.forward_cached(ids.narrow(1, 5, 3), cache);
  CHECK(allclose(cat({first.to(kFloat32), next.to(kFloat32)}, 1), full, 2e-2, 2e-2));
  const std::vector<int64_t> out = m.generate({1, 2}, 6, nn::SampleOptions{0.0, 0, 1.0, 7});
  CHECK(out.size() == 8);
}

TEST_CASE("GPT: sample_token: greedy, top-k, top-p") {
  const std::vector<double> l{0.0, 2.0, 1.0, 2.0, -1.0};
  CHECK(nn::sample_token(l, nn::SampleOptions{0.0}, 0.99) == 1);  // first of the tied maxima
  // top-k 1 is greedy whatever u.
  CHECK(nn::sample_token(l, nn::SampleOptions{1.0, 1}, 0.99) == 1);
  // Probabilities by decreasing logit: e^2, e^2, e^1, e^0, e^-1 over their sum.
  const double z = 2 * std::exp(2.0) + std::exp(1.0) + 1 + std::exp(-1.0);
  const double p1 = std::exp(2.0) / z;
  CHECK(nn::sample_token(l, nn::SampleOptions{1.0}, p1 - 1e-9) == 1);
  CHECK(nn::sample_token(l, nn::SampleOptions{1.0}, p1 + 1e-9) == 3);
  CHECK(nn::sample_token(l, nn::SampleOptions{1.0}, 1 - 1e-12) == 4);
  // top-p 0.5: the two leading tokens (0.73 of the mass) share it evenly.
  CHECK(nn::sample_token(l, nn::SampleOptions{1.0, 0, 0.5}, 0.49) == 1);
  CHECK(nn::sample_token(l, nn::SampleOptions{1.0, 0, 0.5}, 0.51) == 3);
  CHECK(nn::sample_token(l, nn::SampleOptions{1.0, 0, 0.5}, 0.999) == 3);
}

TEST_CASE("GPT: sample_token with NaN and infinite logits: NaN never drawn while a number is left") {
  const double nan = std::nan(""), inf = std::numeric_limits<double>::infinity();
  // Greedy: the first of the largest numbers; all NaN gives token 0.
  CHECK(nn::sample_token({nan, 1.0, 3.0, nan, 3.0}, nn::SampleOptions{0.0}, 0.5) == 2);
  CHECK(nn::sample_token({nan, nan, nan}, nn::SampleOptions{0.0}, 0.5) == 0);
  CHECK(nn::sample_token({1.0, inf, inf}, nn::SampleOptions{0.0}, 0.5) == 1);
  // Sampling: the two zeros share the mass, NaN tokens get none, whatever u.
  const std::vector<double> l{nan, 0.0, nan, 0.0};
  for (const nn::SampleOptions& o :
       {nn::SampleOptions{1.0}, nn::SampleOptions{0.7, 3}, nn::SampleOptions{1.0, 0, 0.9}}) {
    CHECK(nn::sample_token(l, o, 0.0) == 1);
    CHECK(nn::sample_token(l, o, 0.49) == 1);
    CHECK(nn::sample_token(l, o, 0.51) == 3);
    CHECK(nn::sample_token(l, o, 1 - 1e-16) == 3);
  }
  // +inf logits share all the mass (exp(inf - inf) would be NaN).
  const std::vector<double> li{0.0, inf, 5.0, inf};
  CHECK(nn::sample_token(li, nn::SampleOptions{1.0}, 0.3) == 1);
  CHECK(nn::sample_token(li, nn::SampleOptions{1.0}, 0.7) == 3);
  CHECK(nn::sample_token(li, nn::SampleOptions{1.0}, 1 - 1e-16) == 3);
  // -inf logits get no mass; all -inf or all NaN: the first token.
  CHECK(nn::sample_token({-inf, 0.0, -inf}, nn::SampleOptions{1.0}, 1 - 1e-16) == 1);
  CHECK(nn::sample_token({-inf, -inf, -inf}, nn::SampleOptions{1.0, 2, 0.5}, 0.9) == 0);
  CHECK(nn::sample_token({nan, nan}, nn::SampleOptions{1.0}, 0.9) == 0);
  // A temperature small enough to overflow every logit to +inf: still a token in range.
  const int64_t t = nn::sample_token({1e300, 2e300}, nn::SampleOptions{1e-10}, 0.5);
  CHECK((t == 0 || t == 1));
}

namespace {
// sample_token as a sort of the whole vocabulary and a walk over it: the
// reference the selection-based sampler must agree with.
int64_t sample_token_by_sorting(const std::vector<double>& logits, const nn::SampleOptions& o, double u) {
  const int64_t V = static_cast<int64_t>(logits.size());
  const auto ranks_before = [&](int64_t a, int64_t b) {
    return !std::isnan(logits[a]) && (std::isnan(logits[b]) || logits[a] > logits[b]);
  };
  std::vector<int64_t> order(V);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), ranks_before);
  if (o.temperature == 0.0) return order[0];
  int64_t k = o.top_k > 0 ? std::min(o.top_k, V) : V;
  const double mx = logits[order[0]] / o.temperature;
  if (std::isnan(mx) || mx == -std::numeric_limits<double>::infinity()) return order[0];
  while (std::isnan(logits[order[k - 1]])) --k;
  std::vector<double> p(k);
  double sum = 0;
  for (int64_t i = 0; i < k; ++i) {
    const double x = logits[order[i]] / o.temperature;
    sum += p[i] = std::isinf(mx) ? (x == mx ? 1.0 : 0.0) : std::exp(x - mx);
  }
  int64_t keep = k;
  if (o.top_p < 1.0) {
    double c = 0;
    for (int64_t i = 0; i < k; ++i) {
      c += p[i] / sum;
      if (c >= o.top_p) {
        keep = i + 1;
        break;
      }
    }
    sum = std::accumulate(p.begin(), p.begin() + keep, 0.0);
  }
  while (keep > 1 && p[keep - 1] == 0.0) --keep;
  double c = 0;
  for (int64_t i = 0; i < keep; ++i) {
    c += p[i] / sum;
    if (u < c) return order[i];
  }
  return order[keep - 1];
}
}  // namespace

TEST_CASE("GPT: sample_token draws what sorting the whole vocabulary draws") {
  // Random rows (ties, NaN, infinities, signed zeros, a GPT-2-sized one) and
  // options; u kept away from the cumulative boundaries by a margin far
  // above the rounding of the sums, which the two add in different orders.
  std::mt19937 rng(11);
  std::normal_distribution<double> normal(0.0, 2.0);
  const double nan = std::nan(""), inf = std::numeric_limits<double>::infinity();
  int compared = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const int64_t V = trial == 0 ? 50257 : 1 + static_cast<int64_t>(rng() % 300);
    std::vector<double> l(static_cast<size_t>(V));
    for (double& x : l) {
      const unsigned r = rng() % 40;
      x = r == 0   ? nan
          : r == 1 ? -inf
          : r == 2 ? (trial % 7 == 0 ? inf : -0.0)
          : r == 3 ? 0.0
                   : std::round(normal(rng) * 4) / 4;
    }
    const nn::SampleOptions o{trial % 5 == 0 ? 0.0 : 0.5 + (rng() % 4) * 0.25,
                              static_cast<int64_t>(rng() % 3 == 0 ? 1 + rng() % 50 : 0),
                              // top_p off k/n: infinite logits share the mass equally, and at
                              // such a boundary the reference's running sum of rounded fractions
                              // and the sampler's sums may round either way (0.3 + 3 * 0.1).
                              rng() % 3 == 0 ? 0.313 + (rng() % 7) * 0.1 : 1.0};
    for (int d = 0; d < 20; ++d) {
      const double u = std::uniform_real_distribution<double>(0.0, 1.0)(rng);
      const int64_t want = sample_token_by_sorting(l, o, u);
      // Skip a u within 1e-9 of a boundary: both samplers may round either way there.
      if (sample_token_by_sorting(l, o, std::max(0.0, u - 1e-9)) != want ||
          sample_token_by_sorting(l, o, std::min(1 - 1e-16, u + 1e-9)) != want)
        continue;
      INFO("trial ", trial, " V ", V, " u ", u);
      CHECK(nn::sample_token(l, o, u) == want);
      ++compared;
    }
  }
  CHECK(compared > 7000);
}

TEST_CASE("GPT: sample_token without top-k or top-p: narrow and wide spreads, all drawn as by sorting") {
  // The draw without top_k or top_p buckets the tokens by their distance
  // from the largest logit, spread over the finite logits' range (at most
  // 64 nats): all logits within 1e-6, a range of 2,000 nats (tokens past the
  // 64th nat share the last bucket, some with positive probability), and a
  // row where one token holds nearly all the mass.
  std::mt19937 rng(17);
  std::uniform_real_distribution<double> uni(0.0, 1.0);
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> rows(3, std::vector<double>(5000));
  for (size_t i = 0; i < 5000; ++i) {
    rows[0][i] = 3.0 + 1e-6 * uni(rng);
    rows[1][i] = -2000.0 * uni(rng);
    rows[2][i] = i == 1234 ? 40.0 : (i % 97 == 0 ? -inf : uni(rng));
  }
  int compared = 0;
  for (const std::vector<double>& l : rows)
    for (double temperature : {0.05, 1.0, 3.0})
      for (int d = 0; d < 200; ++d) {
        const nn::SampleOptions o{temperature};
        const double u = uni(rng);
        const int64_t want = sample_token_by_sorting(l, o, u);
        if (sample_token_by_sorting(l, o, std::max(0.0, u - 1e-9)) != want ||
            sample_token_by_sorting(l, o, std::min(1 - 1e-16, u + 1e-9)) != want)
          continue;
        CHECK(nn::sample_token(l, o, u) == want);
        ++compared;
      }
  CHECK(compared > 1500);
}

TEST_CASE("GPT: a bfloat16 autocast region keeps the KV cache in bfloat16, with the float32 cache's logits") {
  nn::GPTConfig cfg;
  cfg.vocab_size = 50, cfg.block_size = 32, cfg.n_layer = 2, cfg.n_head = 2, cfg.n_embd = 32;
  Generator gen(5);
  nn::GPT m(cfg, &gen);
  m.eval();
  nn::KVCache f32 = m.make_cache(1);  // outside a region: the weights' dtype
  CHECK(f32.k[0].dtype() == kFloat32);
  const AutocastGuard region(DeviceType::CPU, kBFloat16);
  nn::KVCache b16 = m.make_cache(1);
  CHECK(b16.k[0].dtype() == kBFloat16);
  CHECK(b16.v[1].dtype() == kBFloat16);
  // The keys and values are bfloat16 either way (c_attn's output), and one
  // token's attention runs the same float32 loops over either cache: the
  // same logits, bit for bit; a prompt of several tokens too.
  const std::vector<std::vector<int64_t>> steps{{3, 1, 4}, {1}, {5}, {9}, {2}};
  for (const auto& ids : steps) {
    const Tensor x = from_vector(ids, {1, static_cast<int64_t>(ids.size())});
    const Tensor a = m.forward_cached(x, f32), b = m.forward_cached(x, b16);
    CHECK(allclose(a.to(kFloat32), b.to(kFloat32), 0, 0));
  }
  CHECK(b16.len == 7);
}
