// Transformer layers against PyTorch (tools/reference_transformer.py), the
// sinusoidal encoding formula, and the ViT's shapes, names and training.
#include <doctest/doctest.h>

#include <cmath>

#include <ember/ember.h>

#include "test_util.h"

using namespace ember;
using test::check_close;

namespace {
void fill(nn::Module& m) { test::fill_parameters(m); }
Tensor inp(const Shape& s, double off) { return test::pattern_input(s, off); }

void check_layer(bool norm_first, const std::vector<double>& y00, const std::vector<double>& y12,
                 const std::vector<double>& grads) {
  nn::TransformerEncoderLayer layer({8, 2, 16, 0.1, norm_first ? "gelu" : "relu", 1e-5, true, norm_first});
  layer.eval();
  fill(layer);
  const Tensor x = inp({2, 3, 8}, 0.0).requires_grad_();
  const Tensor kpm = from_vector(std::vector<bool>{false, false, true, false, false, false}, {2, 3});
  const Tensor y = layer.forward(x, Tensor(), kpm);
  check_close(y[0][0], y00, 5e-6);
  check_close(y[1][2], y12, 5e-6);
  sum(mul(y, inp({2, 3, 8}, 1.0))).backward();
  size_t k = 0;
  for (auto& entry : layer.named_parameters()) {
    auto& n = entry.first;
    auto& p = entry.second;
    const Tensor c = cos(arange(0, static_cast<double>(p.numel()), 1, kFloat32)).reshape(p.shape());
    CHECK_MESSAGE(std::fabs(sum(mul(p.grad(), c)).item<double>() - grads[k]) < 2e-5, n);
    ++k;
  }
}
}  // namespace

TEST_CASE("TransformerEncoderLayer post-norm (relu) matches PyTorch") {
  check_layer(
      false,
      {0.0145942933, 0.5725987524, 0.1447173829, 0.2128036371, 0.2413500339, 0.0992978249, 0.2835618215, 0.4239442803},
      {0.1120405855, 0.6139704447, 0.1287621573, 0.1907197043, 0.2531248496, 0.1258946357, 0.260476417, 0.3849059383},
      {-0.0021511782, -0.1408802349, -0.2900665506, -0.0952360725, -0.1503308509, 0.1744447554, 0.0261077589,
       -0.0776856222, 0.8732147309, -0.1874045489, -2.6111033373, -0.1972311981});
}

TEST_CASE("TransformerEncoderLayer pre-norm (gelu) matches PyTorch") {
  check_layer(
      true,
      {0.2283641142, -0.3470001407, 0.6774139322, 1.1433977822, 0.0831118563, 0.5891982755, 0.836832484, -0.1307867369},
      {0.1495299182, -0.3642960329, 0.7875868193, 1.3067899259, 0.2829210236, 0.8672083554, 1.1167107246, 0.1342546089},
      {-0.028147397, -0.2160963647, 0.101540218, -0.2053959746, 0.1726188432, -0.1432407842, 0.0571116921,
       -0.1972311981, -0.0131979676, 0.0151558473, 0.0055201736, 0.0422057331});
}

TEST_CASE("TransformerEncoderLayer: the activation as an enum or as PyTorch's string") {
  CHECK(nn::Activation("gelu") == nn::Activation::GELU);
  CHECK(nn::Activation("relu") == nn::Activation::ReLU);
  CHECK(std::string(nn::Activation(nn::Activation::GELU).name()) == "gelu");
  CHECK_THROWS_WITH_AS(nn::Activation("swish"), doctest::Contains("\"relu\" or \"gelu\""), ValueError);
  // Designated initialisers, with the enum and with the string.
  nn::TransformerEncoderLayer by_enum(
      {.d_model = 8, .nhead = 2, .dim_feedforward = 16, .activation = nn::Activation::GELU});
  nn::TransformerEncoderLayer by_name({.d_model = 8, .nhead = 2, .dim_feedforward = 16, .activation = "gelu"});
  CHECK(by_enum.opts.activation == by_name.opts.activation);
  CHECK(by_name.opts.activation == "gelu");
  const Tensor h = tensor({-1.0, 0.5, 2.0});
  check_close(by_name.opts.activation(h), gelu(h).to_vector<double>(), 0);
}

TEST_CASE("positional encodings") {
  nn::SinusoidalPositionalEncoding pe(6, 50);
  // P[i, 2j] = sin(i / 10000^(2j/d)), P[i, 2j+1] = cos(same)
  CHECK(pe.P.at<float>({0, 7, 2}) == doctest::Approx(std::sin(7 / std::pow(10000.0, 2.0 / 6))).epsilon(1e-5));
  CHECK(pe.P.at<float>({0, 7, 5}) == doctest::Approx(std::cos(7 / std::pow(10000.0, 4.0 / 6))).epsilon(1e-5));
  CHECK(pe(zeros({2, 10, 6})).shape() == Shape{2, 10, 6});
  CHECK(pe.state_dict().empty());
  nn::LearnedPositionalEncoding lpe(4, 9);
  CHECK(lpe.state_dict().size() == 1);
  CHECK_THROWS_AS(pe(zeros({2, 60, 6})), ShapeError);
}

TEST_CASE("VisionTransformer: names, shapes, parameter count, and it learns") {
  nn::VisionTransformerOptions o;  // 28x28, patch 7, width 64, depth 4, 4 heads, MLP 128
  nn::VisionTransformer vit(o);
  CHECK(vit.patch_embed->num_patches == 16);
  CHECK(vit.pos_embed.shape() == Shape{1, 17, 64});
  const auto sd = vit.state_dict();
  // A module's own parameters come before its children's, as in PyTorch.
  CHECK(sd[0].first == "cls_token");
  CHECK(sd[1].first == "pos_embed");
  CHECK(sd[2].first == "patch_embed.proj.weight");
  bool has_block = false;
  for (auto& [n, t] : sd) has_block = has_block || n == "blocks.3.self_attn.in_proj_weight";
  CHECK(has_block);
  // The configuration: about 139k parameters.
  CHECK(vit.num_parameters() > 130000);
  CHECK(vit.num_parameters() < 145000);
  CHECK(vit(randn({3, 1, 28, 28})).shape() == Shape{3, 10});
  // Non-square images and patches.
  nn::VisionTransformerOptions o2;
  o2.img_size = {8, 12};
  o2.patch_size = {4, 3};
  o2.in_channels = 3;
  o2.depth = 1;
  o2.embed_dim = 16;
  o2.num_heads = 2;
  o2.mlp_dim = 32;
  nn::VisionTransformer small(o2);
  CHECK(small(randn({2, 3, 8, 12})).shape() == Shape{2, 10});
  // Overfits a tiny batch: loss falls.
  manual_seed(3);
  const Tensor imgs = randn({8, 3, 8, 12});
  const Tensor labels = randint(0, 10, {8});
  optim::AdamW opt(small.parameters(), optim::AdamWOptions{3e-3, 0.9, 0.999, 1e-8, 0.0});
  double first = 0, last = 0;
  for (int s = 0; s < 60; ++s) {
    opt.zero_grad();
    Tensor loss = cross_entropy(small(imgs), labels);
    loss.backward();
    opt.step();
    if (s == 0) first = loss.item();
    last = loss.item();
  }
  CHECK(last < first / 3);
}

TEST_CASE("VisionTransformer: weights from a PyTorch-made safetensors file give PyTorch's outputs and gradients") {
  // tests/fixtures/vit_small.safetensors comes from tools/make_vit_fixture.py.
  nn::VisionTransformerOptions o;
  o.img_size = {8, 12};
  o.patch_size = {4, 3};
  o.in_channels = 3;
  o.num_classes = 5;
  o.embed_dim = 16;
  o.depth = 2;
  o.num_heads = 2;
  o.mlp_dim = 32;
  o.dropout = 0.0;
  nn::VisionTransformer vit(o);
  const std::string path = std::string(EMBER_FIXTURE_DIR) + "/vit_small.safetensors";
  const nn::LoadResult r = nn::load(vit, path, /*strict=*/false);
  CHECK(r.missing_keys.empty());  // every parameter came from the file
  StateDict ref = load_safetensors(path);
  auto get = [&](const std::string& n) { return test::fixture_tensor(ref, n); };
  const Tensor x = get("input").requires_grad_();
  const Tensor y = vit(x);
  CHECK(allclose(y, get("output"), 1e-5, 1e-6));
  sum(mul(y, get("output_weight"))).backward();
  CHECK(allclose(x.grad(), get("input.grad"), 1e-5, 1e-7));
  // float32 in a different summation order than PyTorch's: entries near zero
  // differ by a few ulp of the gradients' scale (about 1), hence atol 1e-6.
  for (auto& entry : vit.named_parameters()) {
    const std::string& n = entry.first;
    CHECK_MESSAGE(allclose(entry.second.grad(), get("grad." + n), 1e-5, 1e-6), n);
  }
}

TEST_CASE("TransformerEncoderLayer keeps head-averaged attention weights on request") {
  manual_seed(0);
  nn::VisionTransformerOptions vo;
  vo.img_size = {8, 8};
  vo.patch_size = {4, 4};
  vo.embed_dim = 16;
  vo.depth = 2;
  vo.num_heads = 2;
  vo.mlp_dim = 32;
  vo.dropout = 0;
  nn::VisionTransformer vit(vo);
  auto& layer = vit.blocks->at<nn::TransformerEncoderLayer>(1);
  NoGradGuard ng;
  const Tensor x = randn({3, 1, 8, 8});
  const Tensor before = vit(x);
  CHECK_FALSE(layer.attention_weights.defined());
  layer.keep_attention_weights = true;
  const Tensor after = vit(x);
  CHECK(after.to_vector<float>() == before.to_vector<float>());  // same output
  REQUIRE(layer.attention_weights.defined());
  CHECK(layer.attention_weights.shape() == Shape({3, 5, 5}));
  check_close(sum(layer.attention_weights, {2}), std::vector<double>(15, 1.0), 1e-5);

  // The hybrid variant: a conv stem before the patch embedding.
  vo.stem_channels = 4;
  nn::VisionTransformer hybrid(vo);
  CHECK(hybrid(x).shape() == Shape({3, 10}));
  CHECK(hybrid.state_dict().front().first == "cls_token");
  bool has_stem = false;
  for (auto& [n, t] : hybrid.named_parameters()) has_stem |= n == "stem.weight";
  CHECK(has_stem);
}

namespace {
nn::VisionTransformerOptions tiny_vit() {
  nn::VisionTransformerOptions o;
  o.img_size = {8, 8};
  o.patch_size = {4, 4};
  o.num_classes = 3;
  o.embed_dim = 8;
  o.depth = 3;
  o.num_heads = 2;
  o.mlp_dim = 16;
  o.dropout = 0;
  return o;
}
}  // namespace

TEST_CASE("VisionTransformer: DropPath rates rise linearly over the blocks, identity in eval, no new parameters") {
  manual_seed(1);
  nn::VisionTransformerOptions o = tiny_vit();
  nn::VisionTransformer plain(o);
  o.drop_path_rate = 0.3;
  nn::VisionTransformer vit(o);
  // timm: linspace(0, 0.3, 3) = 0, 0.15, 0.3; a rate of 0 adds no module.
  CHECK_FALSE(vit.blocks->at<nn::TransformerEncoderLayer>(0).drop_path1);
  REQUIRE(vit.blocks->at<nn::TransformerEncoderLayer>(1).drop_path1);
  CHECK(vit.blocks->at<nn::TransformerEncoderLayer>(1).drop_path1->p == doctest::Approx(0.15));
  CHECK(vit.blocks->at<nn::TransformerEncoderLayer>(2).drop_path2->p == doctest::Approx(0.3));
  // The same state-dict names as without stochastic depth.
  const auto a = plain.state_dict(), b = vit.state_dict();
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) CHECK(a[i].first == b[i].first);
  vit.load_state_dict(plain.state_dict());
  const Tensor x = randn({4, 1, 8, 8});
  NoGradGuard ng;
  plain.eval();
  vit.eval();
  CHECK(vit(x).to_vector<float>() == plain(x).to_vector<float>());  // eval: identity
  vit.train();
  plain.train();
  // Training: some samples' branches are dropped, so outputs differ from the plain model's.
  CHECK_FALSE(vit(x).to_vector<float>() == plain(x).to_vector<float>());
  o.drop_path_rate = 1.0;
  CHECK_THROWS_AS(nn::VisionTransformer{o}, ValueError);
}

TEST_CASE("VisionTransformer: distillation token, its head, names, shapes and the two-head average") {
  manual_seed(2);
  nn::VisionTransformerOptions o = tiny_vit();
  o.distillation = true;
  nn::VisionTransformer vit(o);
  CHECK(vit.prefix_tokens() == 2);
  CHECK(vit.dist_token.shape() == Shape{1, 1, 8});
  CHECK(vit.pos_embed.shape() == Shape{1, 4 + 2, 8});  // [CLS], dist, 4 patches
  const auto sd = vit.state_dict();
  CHECK(sd[0].first == "cls_token");
  CHECK(sd[1].first == "dist_token");
  CHECK(sd[2].first == "pos_embed");
  CHECK(sd[sd.size() - 2].first == "head_dist.weight");
  CHECK(sd.back().first == "head_dist.bias");
  nn::VisionTransformerOptions po = tiny_vit();
  nn::VisionTransformer plain(po);
  // Extra parameters: dist_token (8), one more position (8), head_dist (8 * 3 + 3).
  CHECK(vit.num_parameters() - plain.num_parameters() == 8 + 8 + 27);
  CHECK_THROWS_AS(plain.forward_heads(randn({1, 1, 8, 8})), ValueError);

  const Tensor x = randn({5, 1, 8, 8});
  const nn::ViTHeads h = vit.forward_heads(x);
  CHECK(h.cls.shape() == Shape{5, 3});
  CHECK(h.dist.shape() == Shape{5, 3});
  CHECK_FALSE(h.cls.to_vector<float>() == h.dist.to_vector<float>());  // two different tokens
  vit.eval();
  const Tensor y = vit(x);  // DeiT's inference: the mean of the heads
  const std::vector<float> c = h.cls.to_vector<float>(), d = h.dist.to_vector<float>();
  std::vector<double> mean(c.size());
  for (size_t i = 0; i < c.size(); ++i) mean[i] = 0.5 * (static_cast<double>(c[i]) + d[i]);
  check_close(y, mean, 1e-6);
  // Each head is the Linear of its own token after the final norm.
  const Tensor feats = vit.forward_features(x);
  CHECK(feats.shape() == Shape{5, 6, 8});
  check_close((*vit.head_dist)(feats.select(1, 1)), std::vector<double>(d.begin(), d.end()), 1e-6);
}

TEST_CASE("VisionTransformer: gradcheck through the distillation head and token (float64)") {
  manual_seed(4);
  nn::VisionTransformerOptions o = tiny_vit();
  o.depth = 1;
  o.embed_dim = 4;
  o.mlp_dim = 4;
  o.distillation = true;
  nn::VisionTransformer vit(o);
  vit.to_double();
  const Tensor x = randn({2, 1, 8, 8}, TensorOptions(DType::Float64));
  // The images, and the dist token (forward reads the member handle, so the
  // checked input stands in for the parameter), through the distillation head
  // and through the two-head average.
  const Tensor token = vit.dist_token.detach().clone().requires_grad_();
  for (bool average : {false, true}) {
    const GradcheckResult g = gradcheck(
        [&](const std::vector<Tensor>& in) {
          vit.dist_token = in[1];
          return average ? vit.forward(in[0]) : vit.forward_heads(in[0]).dist;
        },
        {x.clone().requires_grad_(), token});
    CHECK_MESSAGE(g.ok, g.message);
  }
}
