// The CUDA backend on device "cuda" (emulated here: cudaMalloc is host
// memory, cuBLAS is OpenBLAS, kernels run on the SIMT emulator): moving
// tensors, the caching allocator, device errors, checked calls, GEMM
// layouts. Op-by-op agreement with the CPU is the conformance suite's job.
#include <doctest/doctest.h>

#include <chrono>
#include <cstdlib>
#include <string>

#include <ember/cuda/common.h>
#include <ember/ember.h>

#include "test_util.h"

using namespace ember;
using test::contains;
using test::error_of;

namespace {
const Device kCuda("cuda");

bool emulated_without_devices() {
  const char* e = std::getenv("EMBER_EMU_DEVICES");
  return e && std::string(e) == "0";
}
}  // namespace

TEST_CASE("cuda backend: to() both ways, copies between layouts and dtypes") {
  if (emulated_without_devices()) return;
  const Tensor a = arange(0, 12, 1, kFloat32).reshape({3, 4});
  const Tensor d = a.to(kCuda);
  CHECK(d.device() == kCuda);
  CHECK(d.cpu().to_vector<float>() == a.to_vector<float>());
  // Strided device views, dtype conversion on the device, copy_ across devices.
  const Tensor t = d.transpose(0, 1);
  CHECK(t.contiguous().cpu().to_vector<float>() == a.t().contiguous().to_vector<float>());
  CHECK(d.to(kInt64).cpu().to_vector<int64_t>() == a.to(kInt64).to_vector<int64_t>());
  Tensor host = zeros({4, 3});
  host.copy_(t);
  CHECK(host.to_vector<float>() == a.t().contiguous().to_vector<float>());
  Tensor dev = zeros({4, 3}, TensorOptions(kCuda));
  dev.copy_(a.t());
  CHECK(dev.cpu().to_vector<float>() == a.t().contiguous().to_vector<float>());
  CHECK(full({2, 2}, 3.5, TensorOptions(kCuda)).cpu().to_vector<float>() == std::vector<float>(4, 3.5f));
  CHECK(sum(d).item<double>() == 66.0);
}

TEST_CASE("cuda backend: autograd through to() and device ops") {
  if (emulated_without_devices()) return;
  const Tensor x = tensor({1.0, -2.0, 3.0}).requires_grad_();
  const Tensor y = mul(x.to(kCuda), 2.0);
  sum(mul(y, y)).backward();  // d/dx sum (2x)^2 = 8x
  REQUIRE(x.grad().defined());
  CHECK(x.grad().device().is_cpu());
  CHECK(x.grad().to_vector<float>() == std::vector<float>{8, -16, 24});
}

TEST_CASE("cuda backend: mixing devices is an error naming both") {
  if (emulated_without_devices()) return;
  const Tensor a = ones({3}), b = ones({3}, TensorOptions(kCuda));
  const std::string msg = error_of<DeviceError>([&] { add(a, b); });
  CHECK(contains(msg, "cpu"));
  CHECK(contains(msg, "cuda:0"));
  CHECK(contains(error_of<DeviceError>([&] { matmul(ones({2, 2}), ones({2, 2}, TensorOptions(kCuda))); }), "cuda"));
}

namespace {
// A user op with a CPU kernel only.
KernelTable<void(const Tensor& x, Tensor& out)> cpu_only_kernel("cpu_only_op");
void cpu_only_cpu(const Tensor& x, Tensor& out) { out.copy_(x); }
EMBER_REGISTER_KERNEL(cpu_only_kernel, CPU, cpu_only_cpu);
}  // namespace

TEST_CASE("cuda backend: a user op without a CUDA kernel names itself at the call on cuda") {
  if (emulated_without_devices()) return;
  const Tensor x = ones({3}, TensorOptions(kCuda));
  Tensor out = empty({3}, TensorOptions(kCuda));
  const std::string msg = error_of<DeviceError>([&] { cpu_only_kernel(x.device(), x, out); });
  CHECK(contains(msg, "cpu_only_op: no kernel for device cuda:0"));
  CHECK(contains(msg, "EMBER_REGISTER_KERNEL(<table>, CUDA, fn)"));
  const Tensor h = ones({3});
  Tensor hout = empty({3});
  cpu_only_kernel(h.device(), h, hout);  // the CPU kernel still runs
  CHECK(hout.to_vector<float>() == std::vector<float>{1, 1, 1});
}

TEST_CASE("cuda backend: caching allocator reuses blocks after warm-up") {
  if (emulated_without_devices()) return;
  const char* caching = std::getenv("EMBER_CACHING_ALLOCATOR");
  if (caching && std::string(caching) == "0") {
    MESSAGE("EMBER_CACHING_ALLOCATOR=0: reuse is off by request");
    return;
  }
  auto step = [] {
    Tensor w = rand({64, 64}).to(kCuda);
    Tensor x = rand({16, 64}).to(kCuda);
    return sum(relu(matmul(x, w))).item<double>();
  };
  step();
  const MemoryStats before = memory_stats(kCuda);
  step();
  step();
  const MemoryStats after = memory_stats(kCuda);
  CHECK(after.raw_allocs == before.raw_allocs);  // no cudaMalloc after the first step
  CHECK(after.cache_hits > before.cache_hits);
  CHECK(after.peak_allocated >= after.allocated);
  empty_cache(kCuda);
  CHECK(memory_stats(kCuda).reserved == memory_stats(kCuda).allocated);
}

TEST_CASE("cuda backend: failed CUDA and cuBLAS calls name the call, the place and the error") {
  if (emulated_without_devices()) return;
  const std::string msg = error_of<DeviceError>([] { EMBER_CUDA_CHECK(cudaSetDevice(12345)); });
  CHECK(contains(msg, "cudaSetDevice(12345) failed at"));
  CHECK(contains(msg, "test_cuda_backend.cpp:"));
  CHECK(contains(msg, "cudaErrorInvalidDevice"));
  CHECK(contains(msg, "invalid device ordinal"));
  const std::string bl = error_of<DeviceError>([] {
    float one = 1;
    EMBER_CUBLAS_CHECK(cublasSgemm(ember::cuda::cublas_handle(0), CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &one, nullptr, 1,
                                   nullptr, 1, &one, nullptr, 1));  // lda < m
  });
  CHECK(contains(bl, "cublasSgemm"));
  CHECK(contains(bl, "CUBLAS_STATUS_INVALID_VALUE"));
  CHECK(contains(error_of<DeviceError>([] { (void)empty({2}, TensorOptions(Device("cuda:3"))); }),
                 "cuda:3 requested, but there are 1 CUDA device(s)"));
}

TEST_CASE("cuda backend: GEMM with transposed operands and broadcast batches") {
  if (emulated_without_devices()) return;
  Generator g(5);
  const Tensor a = rand({2, 1, 5, 3}, {}, &g), b = rand({4, 6, 3}, {}, &g);  // b^T: [4, 3, 6]
  const Tensor ref = matmul(a, b.transpose(-1, -2));
  const Tensor got = matmul(a.to(kCuda), b.to(kCuda).transpose(-1, -2));
  CHECK(got.shape() == Shape{2, 4, 5, 6});
  CHECK(allclose(got.cpu(), ref, 1e-5, 1e-6));
  const Tensor w = rand({7, 3}, {}, &g), x = rand({2, 5, 3}, {}, &g);
  CHECK(allclose(linear(x.to(kCuda), w.to(kCuda)).cpu(), linear(x, w), 1e-5, 1e-6));
  ember::cuda::set_allow_tf32(true);  // a no-op in the emulator (no tensor cores), a switch on a GPU
  CHECK(ember::cuda::allow_tf32());
  ember::cuda::set_allow_tf32(false);
}

TEST_CASE("cuda backend: per-head products of attention cost one cuBLAS call per head, not one per sequence") {
  if (emulated_without_devices()) return;
  // The heads of (N, L, H*D) tensors as (N, H, L, D) views: the batch dims N
  // and H do not merge into one stride, so one of them loops on the host;
  // cuBLAS batches the larger (N) and the host loops over the H heads.
  Generator g(8);
  const int64_t N = 64, L = 5, H = 4, D = 3;
  const Tensor q = rand({N, L, H * D}, {}, &g), k = rand({N, L, H * D}, {}, &g);
  auto heads = [&](const Tensor& t) { return t.view({N, L, H, D}).transpose(1, 2); };
  const Tensor ref = matmul(heads(q), heads(k).transpose(-1, -2));
  const Tensor qd = q.to(kCuda), kd = k.to(kCuda);
  const int64_t before = ember::emu::cublas_gemm_calls();
  const Tensor got = matmul(heads(qd), heads(kd).transpose(-1, -2));
  CHECK(ember::emu::cublas_gemm_calls() - before == H);
  CHECK(got.shape() == Shape{N, H, L, L});
  CHECK(allclose(got.cpu(), ref, 1e-5, 1e-6));
}

TEST_CASE("cuda backend: random tensors and dropout match the CPU for one seed") {
  if (emulated_without_devices()) return;
  Generator g1(42), g2(42);
  CHECK(rand({1000}, {}, &g1).to_vector<float>() == rand({1000}, TensorOptions(kCuda), &g2).cpu().to_vector<float>());
  CHECK(randn({7, 9}, {}, &g1).to_vector<float>() == randn({7, 9}, TensorOptions(kCuda), &g2).cpu().to_vector<float>());
  const Tensor x = ones({5, 13});
  CHECK(dropout(x, 0.3, true, &g1).to_vector<float>() == dropout(x.to(kCuda), 0.3, true, &g2).cpu().to_vector<float>());
}

// Run by CTest with EMBER_EMU_DEVICES=0: what a machine without a GPU sees.
TEST_CASE("cuda backend: no device") {
  if (!emulated_without_devices()) {
    MESSAGE("runs under EMBER_EMU_DEVICES=0 (its own CTest entry)");
    return;
  }
  const std::string msg = error_of<DeviceError>([] { (void)ones({2}, TensorOptions(kCuda)); });
  CHECK(contains(msg, "no CUDA device available: cudaGetDeviceCount failed"));
  CHECK(contains(msg, "cudaErrorNoDevice"));
  CHECK(sum(ones({2})).item<double>() == 2.0);  // the CPU is unaffected
}

// Not a pass/fail check: how fast the emulator runs a realistic launch (the
// feasibility probe's 64 rows of 1024 with 256-thread blocks: 16384 fibers,
// two block reductions each).
TEST_CASE("cuda emulator: speed of a 64x1024 row softmax (reported)") {
  if (emulated_without_devices()) return;
  const Tensor x = randn({64, 1024}, TensorOptions(kCuda));
  (void)softmax(x, -1);
  const auto t0 = std::chrono::steady_clock::now();
  const int reps = 5;
  for (int i = 0; i < reps; ++i) (void)softmax(x, -1);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / reps;
  MESSAGE("emulated softmax [64, 1024], 256 threads per row: ", ms, " ms per launch");
  CHECK(ms < 5000);
}

// AdamW over a group takes one launch per 32 tensors / 160 chunks of 16384
// elements on CUDA: many small parameters and one that spans two launches.
TEST_CASE("cuda backend: multi-tensor AdamW matches the per-parameter CPU step") {
  if (emulated_without_devices()) return;
  Generator g(11);
  std::vector<Tensor> cpu_params, dev_params;
  std::vector<Shape> shapes;
  for (int i = 0; i < 40; ++i) shapes.push_back(Shape{3 + i, 5});
  shapes.push_back(Shape{3000000});  // > 160 * 16384: split across launches
  for (const Shape& s : shapes) {
    const Tensor p = randn(s, {}, &g), grad = randn(s, {}, &g);
    Tensor a = p.clone().requires_grad_(), b = p.to(kCuda).requires_grad_();
    a.mutable_grad() = grad;
    b.mutable_grad() = grad.to(kCuda);
    cpu_params.push_back(a);
    dev_params.push_back(b);
  }
  optim::AdamW ocpu(cpu_params), odev(dev_params);
  for (int step = 0; step < 2; ++step) {
    ocpu.step();
    odev.step();
  }
  for (size_t i = 0; i < shapes.size(); ++i) {
    INFO(i);
    CHECK(allclose(dev_params[i].detach().cpu(), cpu_params[i].detach(), 1e-6, 1e-7));
  }
}

TEST_CASE("cuda backend: clip_grad_norm_ (fused sum of squares) matches the CPU") {
  if (emulated_without_devices()) return;
  Generator g(13);
  std::vector<Tensor> cpu_params, dev_params;
  // More than 32 tensors and 160 chunks of 16384: the sums of squares span
  // several launches, each writing its partials after the last one's.
  std::vector<Shape> shapes{Shape{7, 9}, Shape{100000}, Shape{3}};
  for (int i = 0; i < 40; ++i) shapes.push_back(Shape{3 + i});
  shapes.push_back(Shape{3000000});
  for (const Shape& s : shapes) {
    const Tensor grad = randn(s, {}, &g);
    Tensor a = zeros(s).requires_grad_(), b = zeros(s, TensorOptions(kCuda)).requires_grad_();
    a.mutable_grad() = grad.clone();
    b.mutable_grad() = grad.to(kCuda);
    cpu_params.push_back(a);
    dev_params.push_back(b);
  }
  const double nc = optim::clip_grad_norm_(cpu_params, 1.0).item<double>(),
               nd = optim::clip_grad_norm_(dev_params, 1.0).item<double>();
  CHECK(nd == doctest::Approx(nc).epsilon(1e-12));
  for (size_t i = 0; i < cpu_params.size(); ++i)
    CHECK(allclose(dev_params[i].grad().cpu(), cpu_params[i].grad(), 1e-6, 1e-9));
}
