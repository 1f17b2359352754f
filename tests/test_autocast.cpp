// Autocast regions (core/autocast.h): every op declared with an autocast
// category (core/op.h) tested for it (lower-precision ops return the region's dtype from float32
// inputs, float32 ops return float32 from 16-bit inputs), results close to
// float32, float32 master weights with float32 gradients, nesting and
// disabling, and no effect outside a region or on float64; the cast cache
// (core/autocast_cache.h) that decoding in a region reads.
#include <functional>
#include <map>

#include <ember/core/autocast_cache.h>

#include "test_util.h"

using namespace ember;

namespace {
// One call of each op in the table on inputs of dtype dt.
std::map<std::string, std::function<Tensor(DType)>> op_cases() {
  auto r = [](Shape s, DType dt) { return randn(s, TensorOptions(kFloat32)).to(dt); };
  return {
      {"matmul",
       [=](DType dt) {
         return matmul(r({2, 3, 4}, dt), r({4, 5}, dt));
       }},
      {"mm",
       [=](DType dt) {
         return mm(r({3, 4}, dt), r({4, 5}, dt));
       }},
      {"bmm",
       [=](DType dt) {
         return bmm(r({2, 3, 4}, dt), r({2, 4, 5}, dt));
       }},
      {"linear",
       [=](DType dt) {
         return linear(r({3, 4}, dt), r({5, 4}, dt), r({5}, dt));
       }},
      {"linear_gelu",
       [=](DType dt) {
         return linear_gelu(r({3, 4}, dt), r({5, 4}, dt), r({5}, dt));
       }},
      {"linear_dropout_add",
       [=](DType dt) {
         // The residual in the product's dtype: a float32 one would make the
         // sum float32, as add does.
         const Tensor x = r({3, 4}, dt), w = r({5, 4}, dt), b = r({5}, dt);
         return linear_dropout_add(x, w, b, r({3, 5}, linear(x, w, b).dtype()), 0.0);
       }},
      {"conv2d",
       [=](DType dt) {
         return conv2d(r({1, 2, 5, 5}, dt), r({3, 2, 3, 3}, dt), r({3}, dt));
       }},
      {"multi_head_attention",
       [=](DType dt) {
         return multi_head_attention(r({2, 3, 8}, dt), r({2, 4, 8}, dt), r({2, 4, 8}, dt), 2);
       }},
      {"multi_head_self_attention",
       [=](DType dt) {
         return multi_head_self_attention(r({2, 3, 24}, dt), 2);
       }},
      {"softmax",
       [=](DType dt) {
         return softmax(r({3, 4}, dt), -1);
       }},
      {"log_softmax",
       [=](DType dt) {
         return log_softmax(r({3, 4}, dt), -1);
       }},
      {"layer_norm",
       [=](DType dt) {
         return layer_norm(r({3, 4}, dt), Shape{4}, r({4}, dt), r({4}, dt));
       }},
      {"mse_loss",
       [=](DType dt) {
         return mse_loss(r({3, 4}, dt), r({3, 4}, dt));
       }},
      {"cross_entropy",
       [=](DType dt) {
         return cross_entropy(r({3, 4}, dt), tensor({0, 3, 1}, kInt64));
       }},
      {"nll_loss",
       [=](DType dt) {
         return nll_loss(r({3, 4}, dt), tensor({0, 3, 1}, kInt64));
       }},
      {"binary_cross_entropy_with_logits",
       [=](DType dt) {
         return binary_cross_entropy_with_logits(r({3, 4}, dt), rand({3, 4}).to(dt));
       }},
      {"sum",
       [=](DType dt) {
         return sum(r({3, 4}, dt));
       }},
      {"mean",
       [=](DType dt) {
         return mean(r({3, 4}, dt));
       }},
      {"exp",
       [=](DType dt) {
         return exp(r({3, 4}, dt));
       }},
      {"log",
       [=](DType dt) {
         return log(abs(r({3, 4}, dt)));
       }},
  };
}
}  // namespace

// PyTorch 1.13's autocast lists (torch/csrc/autocast_mode.cpp, CPU and
// CUDA), restricted to the ops Ember has: what the declarations must say.
const std::map<std::string, Autocast>& pytorch_categories() {
  static const std::map<std::string, Autocast> m = {
      {"matmul", Autocast::LowerPrecision},
      {"mm", Autocast::LowerPrecision},
      {"bmm", Autocast::LowerPrecision},
      {"linear", Autocast::LowerPrecision},
      {"linear_gelu", Autocast::LowerPrecision},         // linear's: gelu(linear(...)) as one op
      {"linear_dropout_add", Autocast::LowerPrecision},  // linear's: the add takes the residual as it is
      {"conv2d", Autocast::LowerPrecision},
      {"multi_head_attention", Autocast::LowerPrecision},  // nn.MultiheadAttention's products
      {"multi_head_self_attention", Autocast::LowerPrecision},
      {"softmax", Autocast::Float32},
      {"log_softmax", Autocast::Float32},
      {"layer_norm", Autocast::Float32},
      {"mse_loss", Autocast::Float32},
      {"cross_entropy", Autocast::Float32},
      {"nll_loss", Autocast::Float32},
      {"binary_cross_entropy_with_logits", Autocast::Float32},
      {"sum", Autocast::Float32},
      {"mean", Autocast::Float32},
      {"exp", Autocast::Float32},
      {"log", Autocast::Float32},
  };
  return m;
}

// The ops tests/test_op.cpp declares to test op::call itself.
bool declared_by_a_test(const OpDef& d) { return std::string(d.name).rfind("test_op_", 0) == 0; }

TEST_CASE("autocast: the declared categories are PyTorch's, and every declared op is registered once") {
  std::map<std::string, Autocast> declared;
  for (const OpDef* d : op::registry()) {
    CAPTURE(std::string(d->name));
    CHECK(op::find(d->name) == d);
    if (d->autocast != Autocast::None && !declared_by_a_test(*d)) declared[d->name] = d->autocast;
  }
  CHECK(declared == pytorch_categories());
  // Ops off both lists are declared too (their 16-bit policy lives there).
  for (const char* name : {"causal_attention", "batch_norm", "dropout", "masked_softmax", "max_pool2d", "var"})
    CHECK_MESSAGE(op::find(name) != nullptr, name);
}

TEST_CASE("autocast: every op with a category follows it, for bfloat16 and float16") {
  const auto cases = op_cases();
  int tested = 0;
  for (const OpDef* d : op::registry()) {
    if (d->autocast == Autocast::None || declared_by_a_test(*d)) continue;
    const std::string name = d->name;
    CAPTURE(name);
    REQUIRE_MESSAGE(cases.count(name), "no test for the autocast op ", name);
    ++tested;
    const auto& f = cases.at(name);
    for (const DType low : {kBFloat16, kFloat16}) {
      AutocastGuard guard(DeviceType::CPU, low);
      if (d->autocast == Autocast::LowerPrecision) {
        CHECK(f(kFloat32).dtype() == low);  // float32 inputs run in the low dtype
      } else {
        CHECK(f(low).dtype() == kFloat32);  // 16-bit inputs run in float32
        CHECK(f(kFloat32).dtype() == kFloat32);
      }
      CHECK(f(kFloat64).dtype() == kFloat64);  // float64 is never cast
    }
    // Outside a region nothing is cast.
    CHECK(f(kFloat32).dtype() == kFloat32);
    CHECK(f(kBFloat16).dtype() == kBFloat16);
  }
  CHECK(static_cast<size_t>(tested) == cases.size());
}

TEST_CASE("autocast: a linear layer keeps float32 weights and gets float32 gradients, results near float32") {
  nn::Linear lin(8, 4);
  const Tensor x = randn({5, 8});
  const Tensor ref = lin.forward(x);
  Tensor y, loss;
  {
    AutocastGuard guard(DeviceType::CPU, kBFloat16);
    y = lin.forward(x);
    loss = mse_loss(y, zeros({5, 4}));  // float32 list: bf16 y in, float32 out
  }
  CHECK(y.dtype() == kBFloat16);
  CHECK(loss.dtype() == kFloat32);
  CHECK(lin.weight.dtype() == kFloat32);
  CHECK(allclose(y.to(kFloat32), ref, 1.0 / 64, 2e-2));
  loss.backward();  // outside the region, as PyTorch recommends
  CHECK(lin.weight.grad().dtype() == kFloat32);
  CHECK(lin.bias.grad().dtype() == kFloat32);
}

TEST_CASE("autocast: nesting, enabled = false, other device types, and bad dtypes") {
  CHECK_FALSE(autocast_enabled(DeviceType::CPU));
  {
    AutocastGuard a(DeviceType::CPU, kBFloat16);
    CHECK(autocast_enabled(DeviceType::CPU));
    CHECK_FALSE(autocast_enabled(DeviceType::CUDA));  // a CUDA region is separate
    {
      AutocastGuard off(DeviceType::CPU, kBFloat16, false);
      CHECK(mm(randn({2, 2}), randn({2, 2})).dtype() == kFloat32);
    }
    {
      AutocastGuard inner(DeviceType::CPU, kFloat16);
      CHECK(mm(randn({2, 2}), randn({2, 2})).dtype() == kFloat16);
    }
    CHECK(mm(randn({2, 2}), randn({2, 2})).dtype() == kBFloat16);
  }
  CHECK_FALSE(autocast_enabled(DeviceType::CPU));
  CHECK(test::contains(test::error_of<DTypeError>([] { AutocastGuard g(DeviceType::CPU, kFloat32); }),
                       "bfloat16 or float16"));
}

TEST_CASE("autocast: with gradients off a region casts each parameter once, and an update casts it again") {
  Generator gen(4);
  nn::Linear lin(64, 32);
  const Tensor x = randn({1, 64}, TensorOptions(), &gen);
  const Tensor want =
      linear(x.to(kBFloat16), lin.weight.detach().to(kBFloat16), lin.bias.detach().to(kBFloat16)).to(kFloat32);
  {
    AutocastGuard region(DeviceType::CPU, kBFloat16);
    {
      NoGradGuard ng;
      const Tensor y1 = lin.forward(x);
      CHECK(autocast_cache_size() == 2);  // weight and bias
      const Tensor y2 = lin.forward(x);
      CHECK(autocast_cache_size() == 2);
      CHECK(y1.dtype() == kBFloat16);
      CHECK(allclose(y1.to(kFloat32), want, 0, 0));
      CHECK(allclose(y2.to(kFloat32), want, 0, 0));
      // An in-place update of the weight is seen by the next forward.
      mul_(lin.weight, 2.0);
      const Tensor y3 = lin.forward(x).to(kFloat32);
      const Tensor want3 =
          linear(x.to(kBFloat16), lin.weight.detach().to(kBFloat16), lin.bias.detach().to(kBFloat16)).to(kFloat32);
      CHECK(allclose(y3, want3, 0, 0));
    }
    // With gradients on nothing more is cached, and the gradient reaches the float32 weight.
    const size_t before = autocast_cache_size();
    sum(lin.forward(x).to(kFloat32)).backward();
    CHECK(autocast_cache_size() == before);
    CHECK(lin.weight.grad().defined());
    CHECK(lin.weight.grad().dtype() == kFloat32);
  }
  CHECK(autocast_cache_size() == 0);  // emptied when the region ended
}
