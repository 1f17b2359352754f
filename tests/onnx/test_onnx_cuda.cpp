// ONNX with the CUDA backend (the emulated one in CI): an imported graph
// moved to the device runs and back-propagates as on the CPU, and a model on
// the device exports the same graph.
#include <doctest/doctest.h>

#include <filesystem>

#include <ember/ember.h>
#include <ember/onnx/onnx.h>

#include "onnx/onnxruntime.h"
#include "test_util.h"

using namespace ember;

TEST_CASE("onnx cuda: an imported CNN runs and back-propagates on the device as on the CPU") {
  if (!test::cuda_usable()) return;
  const std::string path = EMBER_FIXTURE_DIR "/onnx_train/cnn.onnx";
  auto cpu = onnx::load(path);
  auto dev = onnx::load(path);
  dev->to(Device("cuda"));
  manual_seed(3);
  const Tensor x = randn({2, 1, 12, 12});
  const Tensor yc = cpu->forward(x), yd = dev->forward(x.to(Device("cuda")));
  REQUIRE(yd.device().is_cuda());
  CHECK(allclose(yd.cpu(), yc, 1e-4, 1e-5));
  sum(mul(yc, yc)).backward();
  sum(mul(yd, yd)).backward();
  const auto pc = cpu->named_parameters(), pd = dev->named_parameters();
  REQUIRE(pc.size() == pd.size());
  for (size_t i = 0; i < pc.size(); ++i) {
    INFO(pc[i].first);
    CHECK(allclose(pd[i].second.grad().cpu(), pc[i].second.grad(), 1e-3, 1e-5));
  }
}

TEST_CASE("onnx cuda: a model on the device exports a graph that runs in onnxruntime") {
  if (!test::cuda_usable()) return;
  manual_seed(4);
  nn::Sequential mlp(
      {std::make_shared<nn::Linear>(5, 8), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(8, 2)});
  mlp.to(Device("cuda"));
  const std::string path =
      (std::filesystem::temp_directory_path() / ("ember_onnx_cuda_" + std::to_string(::getpid()) + ".onnx")).string();
  onnx::export_model(mlp, randn({3, 5}).to(Device("cuda")), path, {.dynamic_axes = {{"input", {{0, "batch"}}}}});
  const Tensor x = randn({4, 5});
  mlp.eval();
  NoGradGuard ng;
  const Tensor want = mlp.forward(x.to(Device("cuda"))).cpu();
  const auto got = test::run_onnxruntime(path, {{"input", x}});
  CHECK(allclose(got.at("output"), want, 0.0, 1e-5));
  std::filesystem::remove(path);
}
