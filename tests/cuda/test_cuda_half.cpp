// The 16-bit types on the CUDA backend: the emulator's __half and
// __nv_bfloat16 (cuda/emu/cuda_half.h) against Ember's conversions, which
// tests/test_half.cpp holds to PyTorch on every pattern; the bf16/fp16
// GEMMs through cublasGemmEx / cublasGemmStridedBatchedEx against the CPU;
// the 16-bit Adam, AdamW and SGD steps against the CPU's bits. (The 16-bit
// cases of every op with a CUDA kernel run in the conformance suite,
// testing/conformance.h check_half.)
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <ember/cuda/common.h>
#include <ember/ember.h>
#include <ember/ops/half_ops.h>
#include <ember/ops/matmul.h>
#include <ember/ops/optimizer_kernels.h>

namespace {

using namespace ember;

template <class... P, class... A>
void run(void (*k)(P...), dim3 grid, dim3 block, A&&... args) {
  cuda::launch(__FILE__, __LINE__, "test kernel", k, grid, block, 0, nullptr, std::forward<A>(args)...);
}

// Every thread converts its elements both ways with CUDA's intrinsics.
__global__ void convert_kernel(const float* f, unsigned short* bf, unsigned short* h, const unsigned short* bits,
                               float* bf_back, float* h_back, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    bf[i] = __bfloat16_as_ushort(__float2bfloat16(f[i]));
    h[i] = __half_as_ushort(__float2half_rn(f[i]));
    bf_back[i] = __bfloat162float(__ushort_as_bfloat16(bits[i]));
    h_back[i] = __half2float(__ushort_as_half(bits[i]));
  }
}

// y = a x + y in T, computed in float32 and rounded once: the same kernel
// with CUDA's types and with Ember's must give the same bits.
template <class T>
__global__ void axpy_kernel(float a, const T* x, T* y, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    y[i] = T(a * static_cast<float>(x[i]) + static_cast<float>(y[i]));
}

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace

TEST_CASE("cuda emulator: __half and __nv_bfloat16 convert as Ember does, on every 16-bit pattern") {
  // Inputs: for every 16-bit pattern b, the float32 values b << 16 plus the
  // low halves around bfloat16's rounding point, and float16's value of b and
  // the midpoint to its neighbour (float16's ties).
  std::vector<float> f;
  std::vector<unsigned short> bits;
  for (uint32_t b = 0; b < 65536; ++b) {
    for (uint32_t low : {0u, 0x7FFFu, 0x8000u, 0x8001u, 0xFFFFu}) {
      f.push_back(float_of((b << 16) | low));
      bits.push_back(static_cast<unsigned short>(b));
    }
    const float v = static_cast<float>(float16::from_bits(static_cast<uint16_t>(b)));
    const float next = static_cast<float>(float16::from_bits(static_cast<uint16_t>(b + 1)));
    f.push_back(v);
    f.push_back(std::isfinite(v) && std::isfinite(next) ? v + (next - v) / 2 : v);
    bits.push_back(static_cast<unsigned short>(b));
    bits.push_back(static_cast<unsigned short>(b));
  }
  const int n = static_cast<int>(f.size());
  std::vector<unsigned short> bf(n), h(n);
  std::vector<float> bf_back(n), h_back(n);
  run(convert_kernel, 64, 256, f.data(), bf.data(), h.data(), bits.data(), bf_back.data(), h_back.data(), n);
  int bad = 0;
  for (int i = 0; i < n && bad < 10; ++i) {
    const bool nan = std::isnan(f[i]);
    const uint16_t want_bf = nan ? 0x7FFF : bfloat16(f[i]).x, want_h = nan ? 0x7FFF : float16(f[i]).x;
    const float back_bf = static_cast<float>(bfloat16::from_bits(bits[i]));
    const float back_h = static_cast<float>(float16::from_bits(bits[i]));
    const bool ok = bf[i] == want_bf && h[i] == want_h &&
                    (std::isnan(back_bf) ? std::isnan(bf_back[i]) : bits_of(bf_back[i]) == bits_of(back_bf)) &&
                    (std::isnan(back_h) ? std::isnan(h_back[i]) : bits_of(h_back[i]) == bits_of(back_h));
    if (!ok) {
      ++bad;
      INFO("float bits 0x" << std::hex << bits_of(f[i]) << ", 16-bit pattern 0x" << bits[i]);
      CHECK(ok);
    }
  }
  CHECK(bad == 0);
  // Known answers: ties to even, overflow to Inf, subnormals kept.
  CHECK(__bfloat16_as_ushort(__float2bfloat16(float_of(0x3F808000u))) == 0x3F80);  // tie, even kept
  CHECK(__bfloat16_as_ushort(__float2bfloat16(float_of(0x3F818000u))) == 0x3F82);  // tie, rounds up to even
  CHECK(__half_as_ushort(__float2half(65520.0f)) == 0x7C00);
  CHECK(__half_as_ushort(__float2half(65519.0f)) == 0x7BFF);
  CHECK(__half_as_ushort(__float2half(std::ldexp(1.0f, -24))) == 0x0001);
  CHECK(__half2float(__ushort_as_half(0x0001)) == std::ldexp(1.0f, -24));
  CHECK(__bfloat16_as_ushort(__float2bfloat16(std::ldexp(1.0f, -133))) == 0x0001);
}

TEST_CASE("cuda emulator: 16-bit arithmetic rounds once, and kernels on CUDA's and Ember's types agree") {
  const __nv_bfloat16 a(1.0f), b(float_of(0x3B800000u));    // 2^-8: below bfloat16's half ulp of 1 is 2^-8 (a tie)
  CHECK(__bfloat16_as_ushort(a + b) == 0x3F80);             // 1 + 2^-8 ties to even: 1
  CHECK(__bfloat16_as_ushort(__hadd(a, b + b)) == 0x3F81);  // 1 + 2^-7: representable
  CHECK(static_cast<float>(__half(3.0f) * __half(0.5f)) == 1.5f);
  CHECK(static_cast<float>(__hdiv(__half(1.0f), __half(3.0f))) == static_cast<float>(float16(1.0f / 3.0f)));
  CHECK(static_cast<float>(-__nv_bfloat16(2.0f)) == -2.0f);
  CHECK(__half(1.0f) < __half(2.0f));

  const int n = 1000;
  std::vector<bfloat16> xe(n), ye(n);
  std::vector<__nv_bfloat16> xc(n), yc(n);
  std::vector<float16> xh(n), yh(n);
  std::vector<__half> xhc(n), yhc(n);
  for (int i = 0; i < n; ++i) {
    const float x = std::sin(0.37f * i) * 3.0f, y = std::cos(0.11f * i);
    xe[i] = bfloat16(x), ye[i] = bfloat16(y), xc[i] = __float2bfloat16(x), yc[i] = __float2bfloat16(y);
    xh[i] = float16(x), yh[i] = float16(y), xhc[i] = __float2half(x), yhc[i] = __float2half(y);
  }
  run(axpy_kernel<bfloat16>, 4, 128, 0.3f, xe.data(), ye.data(), n);
  run(axpy_kernel<__nv_bfloat16>, 4, 128, 0.3f, xc.data(), yc.data(), n);
  run(axpy_kernel<float16>, 4, 128, 0.3f, xh.data(), yh.data(), n);
  run(axpy_kernel<__half>, 4, 128, 0.3f, xhc.data(), yhc.data(), n);
  for (int i = 0; i < n; ++i) {
    CHECK(ye[i].x == __bfloat16_as_ushort(yc[i]));
    CHECK(yh[i].x == __half_as_ushort(yhc[i]));
  }
}

namespace {

const Device kCuda("cuda");

bool emulated_without_devices() {
  const char* e = std::getenv("EMBER_EMU_DEVICES");
  return e && std::string(e) == "0";
}

// One 16-bit GEMM through gemm_kernel on CUDA (cublasGemmStridedBatchedEx),
// against float64 on the CPU from the same 16-bit values: C_i = alpha
// op(A_i) op(B_i) + beta C0_i (+ bias), batch dims `batch` with B broadcast
// over the dims where b_bcast is set, C rows ldc = n + 3 apart.
void check_gemm(DType in_dt, DType out_dt, bool ta, bool tb, const Shape& batch, const std::vector<bool>& b_bcast,
                double alpha, double beta, bool with_bias) {
  const int64_t m = 5, n = 7, k = 6, ldc = n + 3;
  Generator g(static_cast<uint64_t>(ta * 2 + tb + 10 * batch.size() + 100 * with_bias));
  Shape a_shape = batch, b_shape, c_shape = batch;
  for (int i = 0; i < batch.size(); ++i) b_shape.push_back(b_bcast[i] ? 1 : batch[i]);
  a_shape.push_back(ta ? k : m), a_shape.push_back(ta ? m : k);
  b_shape.push_back(tb ? n : k), b_shape.push_back(tb ? k : n);
  c_shape.push_back(m), c_shape.push_back(ldc);
  const Tensor a = randn(a_shape, {}, &g).to(in_dt), b = randn(b_shape, {}, &g).to(in_dt);
  const Tensor c0 = randn(c_shape, {}, &g).to(out_dt), bias = randn({n}, {}, &g).to(out_dt);
  // The strides of each operand's batch dims (0 where broadcast).
  const auto batch_strides = [&](const Tensor& t, bool is_b) {
    Shape s;
    for (int i = 0; i < batch.size(); ++i) s.push_back(is_b && b_bcast[i] ? 0 : t.strides()[i]);
    return s;
  };
  GemmDesc d;
  d.m = m, d.n = n, d.k = k, d.trans_a = ta, d.trans_b = tb;
  d.lda = ta ? m : k, d.ldb = tb ? k : n, d.ldc = ldc;
  d.batch = batch;
  d.a = a.to(kCuda), d.b = b.to(kCuda), d.c = c0.to(kCuda);
  d.a_batch_strides = batch_strides(a, false), d.b_batch_strides = batch_strides(b, true);
  d.c_batch_strides = batch_strides(c0, false);
  d.alpha = alpha, d.beta = with_bias ? 0.0 : beta;
  if (with_bias) d.bias = bias.to(kCuda);
  gemm_kernel(kCuda, d);
  const Tensor got = d.c.cpu().narrow(-1, 0, n).to(kFloat64);

  const Tensor a64 = a.to(kFloat64), b64 = b.to(kFloat64);
  Tensor want = mul(matmul(ta ? a64.transpose(-1, -2) : a64, tb ? b64.transpose(-1, -2) : b64), alpha);
  if (with_bias)
    want = add(want, bias.to(kFloat64));
  else
    want = add(want, mul(c0.narrow(-1, 0, n).to(kFloat64), beta));
  // float32 accumulation, one rounding to the output dtype (twice with a
  // bias: rounded into C first, then the sum).
  const double ulp = out_dt == kBFloat16 ? 1.0 / 128 : (out_dt == kFloat16 ? 1.0 / 1024 : 1e-6);
  INFO(dtype_name(in_dt) << " -> " << dtype_name(out_dt) << ", trans " << ta << tb << ", batch " << batch.str()
                         << ", bias " << with_bias);
  CHECK(got.shape() == want.shape());
  CHECK(allclose(got, want, ulp, 1e-4));
  // The padding columns of C are untouched.
  CHECK(equal(d.c.cpu().narrow(-1, n, ldc - n), c0.narrow(-1, n, ldc - n)));
}

}  // namespace

TEST_CASE("cuda backend: bf16 and fp16 GEMMs through cublasGemmEx match the CPU") {
  if (emulated_without_devices()) return;
  CHECK(takes_half(gemm_kernel, kCuda));  // what ops/matmul.cpp can ask before handing down a 16-bit GemmDesc
  for (DType in : {kBFloat16, kFloat16})
    for (DType out : {in, kFloat32})
      for (bool ta : {false, true})
        for (bool tb : {false, true}) {
          check_gemm(in, out, ta, tb, Shape{}, {}, 1.0, 0.0, false);                   // one product
          check_gemm(in, out, ta, tb, Shape{3}, {false}, 0.5, 1.0, false);             // strided batch, accumulate
          check_gemm(in, out, ta, tb, Shape{3}, {true}, 1.0, 0.0, true);               // B broadcast, bias
          check_gemm(in, out, ta, tb, Shape{2, 3}, {false, true}, 0.25, -1.0, false);  // an outer batch loop
        }
}

TEST_CASE("cuda backend: matmul and linear on 16-bit CUDA tensors") {
  if (emulated_without_devices()) return;
  Generator g(5);
  for (DType dt : {kBFloat16, kFloat16}) {
    const Tensor x = randn({4, 3, 8}, {}, &g).to(dt), w = randn({6, 8}, {}, &g).to(dt), b = randn({6}, {}, &g).to(dt);
    const Tensor want = linear(x.to(kFloat32), w.to(kFloat32), b.to(kFloat32));
    const Tensor got = linear(x.to(kCuda), w.to(kCuda), b.to(kCuda));
    CHECK(got.dtype() == dt);
    CHECK(allclose(got.cpu().to(kFloat32), want, dt == kBFloat16 ? 1.0 / 64 : 1.0 / 512, 1e-2));
  }
}

TEST_CASE("cuda backend: 16-bit AdamW step in float32 math matches the float32 CPU step") {
  if (emulated_without_devices()) return;
  Generator g(17);
  for (DType dt : {kBFloat16, kFloat16}) {
    std::vector<Tensor> cpu_params, dev_params;
    for (const Shape& s : {Shape{7, 9}, Shape{40000}}) {
      const Tensor p = randn(s, {}, &g).to(dt), grad = randn(s, {}, &g).to(dt);
      Tensor a = p.to(kFloat32).requires_grad_(), b = p.to(kCuda).requires_grad_();
      a.mutable_grad() = grad.to(kFloat32);
      b.mutable_grad() = grad.to(kCuda);
      cpu_params.push_back(a);
      dev_params.push_back(b);
    }
    optim::AdamW ocpu(cpu_params), odev(dev_params);
    ocpu.step();
    odev.step();
    for (size_t i = 0; i < cpu_params.size(); ++i) {
      CHECK(dev_params[i].dtype() == dt);
      // One step moves p by about lr = 1e-3; the 16-bit result is the float32
      // one rounded (moments rounded too), so within one 16-bit rounding.
      CHECK(allclose(dev_params[i].detach().cpu().to(kFloat32), cpu_params[i].detach(),
                     dt == kBFloat16 ? 1.0 / 128 : 1.0 / 1024, 1e-6));
    }
  }
}

TEST_CASE("cuda backend: 16-bit sum, softmax, layer_norm and cross_entropy run their kernels without float32 copies") {
  if (emulated_without_devices()) return;
  Generator g(23);
  for (DType dt : {kBFloat16, kFloat16}) {
    const Tensor x = randn({6, 10}, {}, &g).to(dt).to(kCuda).requires_grad_();
    const Tensor w = ones({10}, TensorOptions(dt, kCuda)).requires_grad_();
    const Tensor b = zeros({10}, TensorOptions(dt, kCuda)).requires_grad_();
    const Tensor t = from_vector(std::vector<int64_t>{1, 0, 3, 9, 2, 5}).to(kCuda);
    profiler::reset();
    Tensor loss;
    {
      profiler::Guard on;
      const Tensor y = layer_norm(softmax(x, -1), {10}, w, b);
      loss = add(cross_entropy(y, t), mean(y));
      CHECK(y.dtype() == dt);
      CHECK(loss.dtype() == dt);
    }
    const std::vector<profiler::Row> rows = profiler::rows();
    const auto calls = [&](const std::string& name) {
      for (const profiler::Row& r : rows)
        if (r.name == name) return r.calls;
      return int64_t{0};
    };
    INFO(dtype_name(dt));
    for (const char* k : {"softmax", "layer_norm", "cross_entropy", "sum"}) CHECK(calls(k) >= 1);
    // Two conversions, no float32 copy of any input: the count of targets
    // (int64, counted on the device) to float32 for the mean, and
    // cross_entropy's float32 loss rounded to the logits' dtype.
    CHECK(calls("copy") <= 2);
    loss.backward();
    CHECK(x.grad().dtype() == dt);
    CHECK(w.grad().dtype() == dt);
  }
}

TEST_CASE("cuda backend: 16-bit Adam, AdamW and SGD steps give the CPU's bits, stochastic rounding included") {
  if (emulated_without_devices()) return;
  // Two steps on a few parameters (the multi-tensor launch, a tail, more
  // than one 16384-element chunk): the same formula in float32 and the same
  // random words on both backends, so the same bits.
  for (DType dt : {kBFloat16, kFloat16})
    for (int kind = 0; kind < 5; ++kind) {
      const bool sr = kind >= 3 && dt == kBFloat16;  // stochastic rounding: bfloat16 only
      if (kind >= 3 && !sr) continue;
      const std::string label = std::string(dtype_name(dt)) + " optimizer " + std::to_string(kind);
      INFO(label);
      Generator g(29);
      std::vector<Tensor> cpu_params, dev_params, grads;
      for (const Shape& s : {Shape{7, 9}, Shape{40000}, Shape{5}}) {
        const Tensor p = randn(s, {}, &g).to(dt);
        cpu_params.push_back(p.clone().requires_grad_());
        dev_params.push_back(p.to(kCuda).requires_grad_());
        for (int k = 0; k < 2; ++k) grads.push_back(mul(randn(s, {}, &g), 0.1).to(dt));
      }
      Generator rc(5), rd(5);
      const auto make = [&](std::vector<Tensor>& ps, Generator* rng) -> std::unique_ptr<optim::Optimizer> {
        if (kind == 0) return std::make_unique<optim::Adam>(ps, optim::AdamOptions{0.01, 0.9, 0.99, 1e-6, 0.1});
        if (kind == 1) return std::make_unique<optim::SGD>(ps, optim::SGDOptions{0.05, 0.9, 0.1, 0.01, false});
        if (kind == 2) return std::make_unique<optim::SGD>(ps, optim::SGDOptions{0.05, 0.9, 0.0, 0.01, true});
        if (kind == 4)
          return std::make_unique<optim::SGD>(
              ps, optim::SGDOptions{.lr = 1e-3, .momentum = 0.9, .stochastic_rounding = true, .generator = rng});
        return std::make_unique<optim::AdamW>(
            ps, optim::AdamWOptions{.lr = 1e-3, .stochastic_rounding = true, .generator = rng});
      };
      auto ocpu = make(cpu_params, &rc), odev = make(dev_params, &rd);
      for (int step = 0; step < 2; ++step) {
        for (size_t i = 0; i < cpu_params.size(); ++i) {
          cpu_params[i].mutable_grad() = grads[2 * i + step];
          dev_params[i].mutable_grad() = grads[2 * i + step].to(kCuda);
        }
        ocpu->step();
        odev->step();
      }
      for (size_t i = 0; i < cpu_params.size(); ++i) {
        CHECK(dev_params[i].dtype() == dt);
        CHECK(allclose(dev_params[i].detach().cpu().to(kFloat32), cpu_params[i].detach().to(kFloat32), 0, 0));
      }
      const StateDict sc = ocpu->state_dict(), sd = odev->state_dict();
      REQUIRE(sc.size() == sd.size());
      for (size_t k = 0; k < sc.size(); ++k)
        CHECK(allclose(sd[k].second.cpu().to(kFloat64), sc[k].second.to(kFloat64), 0, 0));
      if (sr) CHECK(rc.offset() == rd.offset());
    }
}
