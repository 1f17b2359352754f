// Modules of any dtype (Module::to(DType), nn/module_dtype.cpp): conversion
// of parameters and buffers in place, a float64 MultiheadAttention against
// PyTorch in float64 (tests/fixtures/mha_float64.safetensors, from
// tools/make_mha_float64_fixture.py), bfloat16 checkpoints saved and loaded
// bit for bit, and load_state_dict's dtype rules.
#include <cstring>

#include "test_util.h"

using namespace ember;
using test::contains;
using test::error_of;

namespace {
Tensor find(const StateDict& sd, const std::string& name) {
  for (const auto& [n, t] : sd)
    if (n == name) return t;
  FAIL("no tensor " << name);
  return Tensor();
}
// The raw bytes of a CPU tensor, for bit-identity checks.
std::vector<unsigned char> bytes_of(const Tensor& t) {
  const Tensor c = t.contiguous();
  std::vector<unsigned char> b(static_cast<size_t>(c.numel()) * c.element_size());
  if (!b.empty()) std::memcpy(b.data(), c.data_ptr(), b.size());
  return b;
}
}  // namespace

TEST_CASE("Module::to(dtype) converts floating parameters and buffers in place, not integer buffers") {
  nn::Sequential m({std::make_shared<nn::Linear>(3, 4), std::make_shared<nn::BatchNorm1d>(4)});
  const Tensor w = m.parameters()[0];  // a handle taken before the conversion
  const std::vector<double> before = w.to_vector<double>();
  m.to_double();
  CHECK(w.dtype() == kFloat64);
  CHECK(w.to_vector<double>() == before);  // float32 -> float64 is exact
  CHECK(w.requires_grad());
  for (const auto& entry : m.state_dict()) {
    const auto& n = entry.first;
    const auto& t = entry.second;
    CHECK_MESSAGE(t.dtype() == (n == "1.num_batches_tracked" ? kInt64 : kFloat64), n);
  }
  const Tensor y = m.forward(randn({5, 3}, kFloat64));
  CHECK(y.dtype() == kFloat64);
  m.to_bfloat16();
  CHECK(w.dtype() == kBFloat16);
  m.train(false);
  const Tensor yb = m.forward(randn({5, 3}, kBFloat16));
  CHECK(yb.dtype() == kBFloat16);
  m.to(kCPU, kFloat32);
  CHECK(w.dtype() == kFloat32);
  CHECK(contains(error_of<DTypeError>([&] { m.to(kInt64); }), "floating dtype only"));
}

TEST_CASE("a bfloat16 Linear trains: its gradients are bfloat16") {
  nn::Linear lin(4, 3, true, TensorOptions(kBFloat16));
  CHECK(lin.weight.dtype() == kBFloat16);
  const Tensor x = randn({2, 4}, kBFloat16);
  sum(lin.forward(x)).backward();
  CHECK(lin.weight.grad().dtype() == kBFloat16);
  CHECK(lin.bias.grad().dtype() == kBFloat16);
  // d sum(x W^T + b) / db = number of rows, exactly.
  CHECK(lin.bias.grad().to_vector<double>() == std::vector<double>{2, 2, 2});
}

TEST_CASE("MultiheadAttention in float64 from PyTorch-named float64 weights equals PyTorch to float64 precision") {
  const StateDict sd = load_safetensors(std::string(EMBER_FIXTURE_DIR) + "/mha_float64.safetensors");
  nn::MultiheadAttention mha(8, 2, {0.0, true, 0, 0, /*batch_first=*/true});
  mha.to(kFloat64);
  StateDict weights;
  for (const auto& [n, t] : sd)
    if (n.rfind("in_proj_", 0) == 0 || n.rfind("out_proj.", 0) == 0) weights.emplace_back(n, t);  // PyTorch names
  mha.load_state_dict(weights);
  CHECK(mha.in_proj_weight.dtype() == kFloat64);
  CHECK(mha.in_proj_weight.to_vector<double>() == find(sd, "in_proj_weight").to_vector<double>());  // no rounding
  const Tensor q = find(sd, "input.query").clone().requires_grad_();
  const Tensor pad = gt(find(sd, "input.key_padding_mask"), 0.5);
  auto [out, w] = mha.forward(q, find(sd, "input.key"), find(sd, "input.value"), pad);
  CHECK(out.dtype() == kFloat64);
  CHECK(allclose(out, find(sd, "output"), 1e-12, 1e-13));
  CHECK(allclose(w, find(sd, "weights"), 1e-12, 1e-13));
  const Tensor c = cos(arange(static_cast<double>(out.numel()), kFloat64)).reshape(out.shape());
  sum(mul(out, c)).backward();
  CHECK(allclose(q.grad(), find(sd, "grad.query"), 1e-12, 1e-13));
  // The same weights in float32 agree only to float32 precision: the float64
  // result above is not a float32 computation widened.
  mha.to(kFloat32);
  auto [out32, w32] = mha.forward(q.detach().to(kFloat32), find(sd, "input.key").to(kFloat32),
                                  find(sd, "input.value").to(kFloat32), pad);
  const double err32 = max(abs(sub(out32.to(kFloat64), find(sd, "output")))).item<double>();
  CHECK(err32 > 1e-10);
  CHECK(err32 < 1e-4);
}

TEST_CASE("a bfloat16 model saved and loaded is bit-identical, dtype rules of load_state_dict") {
  const std::string path = test::scratch_path("ember_module_dtype_tests", "bf16.safetensors").string();
  nn::Sequential a({std::make_shared<nn::Linear>(5, 4), std::make_shared<nn::LayerNorm>(Shape{4})});
  a.to_bfloat16();
  nn::save(a, path);
  const StateDict file = load_safetensors(path);
  for (const auto& entry : file) {
    const std::string& n = entry.first;
    CHECK_MESSAGE(entry.second.dtype() == kBFloat16, n);
  }
  nn::Sequential b({std::make_shared<nn::Linear>(5, 4), std::make_shared<nn::LayerNorm>(Shape{4})});
  b.to_bfloat16();
  nn::load(b, path);
  for (size_t i = 0; i < a.state_dict().size(); ++i)
    CHECK(bytes_of(a.state_dict()[i].second) == bytes_of(b.state_dict()[i].second));
  // Into a float32 model: copied into the parameters' dtype (exact: bf16 -> f32).
  nn::Sequential c({std::make_shared<nn::Linear>(5, 4), std::make_shared<nn::LayerNorm>(Shape{4})});
  nn::load(c, path);
  CHECK(c.parameters()[0].dtype() == kFloat32);
  CHECK(c.parameters()[0].to_vector<double>() == a.parameters()[0].to_vector<double>());
  // A floating tensor for an integer buffer (or the reverse) is refused by name.
  nn::BatchNorm1d bn(4);
  StateDict sd = bn.state_dict();
  for (auto& [n, t] : sd)
    if (n == "num_batches_tracked") t = zeros({}, kFloat32);
  const std::string msg = error_of<DTypeError>([&] { bn.load_state_dict(sd); });
  CHECK(contains(msg, "dtype mismatch for num_batches_tracked"));
  CHECK(contains(msg, "the checkpoint has float32, the model has int64"));
}
