// Dropout as one fused op. Forward draws u ~ U[0, 1) per element from the
// counter-based generator (the same stream rand() would give: one Philox call
// yields four float uniforms), keeps x where u >= p, scales by 1 / (1 - p)
// and saves the keep-mask as bool. Backward is dx = g * keep / (1 - p).
// One pass each way instead of the five a composition of rand, ge, to, mul
// and mul would take.
#include <ember/ops/dropout.h>

#include <cmath>

#include <ember/core/autograd.h>
#include <ember/core/dispatch.h>
#include <ember/core/dtype_dispatch.h>
#include <ember/core/op.h>
#include <ember/core/parallel.h>
#include <ember/ops/convert.h>
#include <ember/ops/elementwise.h>
#include <ember/ops/onnx_lowerings.h>
#include <ember/ops/philox_cpu.h>
#include <ember/ops/random_kernels.h>

namespace ember {

// x, out, keep: contiguous, same numel; keep is bool.
decltype(dropout_kernel) dropout_kernel("dropout");
// g, keep, dx: contiguous, same numel. dx = g * keep * scale.
decltype(masked_scale_kernel) masked_scale_kernel("dropout_backward");

namespace {

// float32 <-> 16-bit over n elements, by ops/convert.h's vector conversions.
void to_float(const bfloat16* s, float* d, int64_t n) { cpu::bf16_to_float(s, d, n); }
void to_float(const float16* s, float* d, int64_t n) { cpu::f16_to_float(s, d, n); }
void from_float(const float* s, bfloat16* d, int64_t n) { cpu::float_to_bf16(s, d, n); }
void from_float(const float* s, float16* d, int64_t n) { cpu::float_to_f16(s, d, n); }

void cpu_dropout(const Tensor& xt, Tensor& outt, Tensor& keept, const RandomSpec& spec, double p) {
  // 16-bit tensors: each element loaded as float32, scaled, rounded once.
  dispatch_floating_and_half(xt.dtype(), "dropout", [&](auto tag) {
    using T = decltype(tag);
    using O = opmath_t<T>;
    const T* x = static_cast<const T*>(xt.data_ptr());
    T* out = static_cast<T*>(outt.data_ptr());
    bool* keep = static_cast<bool*>(keept.data_ptr());
    const int64_t n = xt.numel();
    // u = (bits >> 8) / 2^24 >= p  <=>  (bits >> 8) >= ceil(p 2^24): the
    // comparison in integers, exactly as rand() >= p would decide it.
    const uint32_t threshold = dropout_threshold(p);
    const O scale = static_cast<O>(1.0 / (1.0 - p));
    // Blocks of 64 Philox counters (256 elements; four interleaved vector
    // chains, ops/philox_cpu.h); counter c covers elements 4c .. 4c+3, word j
    // giving element 4c+j (philox_block's order).
    constexpr int kLanes = 64, kBlock = 4 * kLanes;
    const int64_t blocks = (n + kBlock - 1) / kBlock;
    parallel_for(0, blocks, 64, [&](int64_t lo, int64_t hi) {
      // Locals, not captures: a store through out may alias anything the
      // lambda reaches through its captures, so the compiler would reload a
      // captured scale per element instead of vectorising the loop.
      const O s = scale;
      const uint32_t th = threshold;
      const uint64_t sd = spec.seed, off = spec.offset;
      alignas(64) uint32_t bits[kBlock];
      for (int64_t blk = lo; blk < hi; ++blk) {
        cpu::philox_block64(sd, off + static_cast<uint64_t>(blk * kLanes), bits);
        const int64_t base = blk * kBlock, m = std::min<int64_t>(kBlock, n - base);
        uint8_t* kb = reinterpret_cast<uint8_t*>(keep + base);
        // 16-bit: the block through float32 buffers, converted by the vector
        // conversions (a bit-arithmetic rounding per element would keep the
        // loop scalar).
        alignas(64) O xf[is_half_v<T> ? kBlock : 1], of[is_half_v<T> ? kBlock : 1];
        const O* xb;
        O* ob;
        if constexpr (is_half_v<T>) {
          to_float(x + base, xf, m);
          xb = xf, ob = of;
        } else {
          xb = x + base, ob = out + base;
        }
        // The byte store to keep may alias anything as far as the compiler
        // knows; the pragma says the iterations are independent.
#pragma omp simd
        for (int64_t e = 0; e < m; ++e) {
          // Branch-free; k goes to T through a signed int, which the vector
          // units convert (GCC leaves unsigned-to-float conversions scalar).
          const int32_t k = (bits[e] >> 8) >= th;
          kb[e] = static_cast<uint8_t>(k);
          ob[e] = xb[e] * (static_cast<O>(k) * s);
        }
        if constexpr (is_half_v<T>) from_float(of, out + base, m);
      }
    });
  });
}

void cpu_masked_scale(const Tensor& gt, const Tensor& keept, Tensor& dxt, double scale) {
  dispatch_floating_and_half(gt.dtype(), "dropout_backward", [&](auto tag) {
    using T = decltype(tag);
    using O = opmath_t<T>;
    const T* g = static_cast<const T*>(gt.data_ptr());
    const bool* keep = static_cast<const bool*>(keept.data_ptr());
    T* dx = static_cast<T*>(dxt.data_ptr());
    const O s = static_cast<O>(scale);
    parallel_for(0, gt.numel(), 16384, [&](int64_t lo, int64_t hi) {
      // Locals, and a multiply rather than a select: a store to dx could
      // alias a captured scale, and a branch on a random bit mispredicts one
      // time in ten; this form vectorises.
      const O sc = s;
      const uint8_t* k = reinterpret_cast<const uint8_t*>(keep);
      if constexpr (is_half_v<T>) {
        // Through float32 buffers, as the forward (vector conversions).
        constexpr int64_t kChunk = 1024;
        alignas(64) float gf[kChunk];
        for (int64_t c = lo; c < hi; c += kChunk) {
          const int64_t m = std::min(kChunk, hi - c);
          to_float(g + c, gf, m);
#pragma omp simd
          for (int64_t i = 0; i < m; ++i) gf[i] *= static_cast<O>(k[c + i]) * sc;
          from_float(gf, dx + c, m);
        }
      } else {
        const T* gp = g;
        T* d = dx;
#pragma omp simd
        for (int64_t i = lo; i < hi; ++i) d[i] = gp[i] * (static_cast<T>(k[i]) * sc);
      }
    });
  });
}

}  // namespace

EMBER_REGISTER_KERNEL(dropout_kernel, CPU, cpu_dropout);
EMBER_REGISTER_KERNEL(masked_scale_kernel, CPU, cpu_masked_scale);

namespace {

// The CPU kernels take 16-bit tensors (float32 arithmetic, one rounding);
// elsewhere they run on float32 copies (the same masks either way).
namespace {
void lower_dropout(lowering::Graph&, const lowering::Call&) {
  throw ValueError(
      "ONNX export: dropout ran in training mode; export records the model in eval mode, where "
      "dropout is the identity (a forward function that calls dropout(x, p, true) cannot be exported)");
}
}  // namespace

constexpr OpDef dropout_op{.name = "dropout",
                           .half = Half::NativeWhere,
                           .native_half = [](Device d) { return d.is_cpu(); },
                           .onnx = lower_dropout};
EMBER_REGISTER_OP(dropout_op);

// Training with 0 < p: the mask drawn from gen's counters.
Tensor dropout_body(const Tensor& x, double p, Generator* gen) {
  if (p == 1.0) return mul(x, 0.0);
  Generator& g = gen ? *gen : default_generator();
  const RandomSpec spec =
      reserve_random(RandomKind::Uniform, g, (static_cast<uint64_t>(x.numel()) + 3) / 4, x.device(), 0.0, 1.0);
  const Tensor xc = x.detach().contiguous();
  Tensor out = empty(x.shape(), TensorOptions(x.dtype(), x.device()));
  Tensor keep = empty(x.shape(), TensorOptions(DType::Bool, x.device()));
  if (x.numel()) dropout_kernel(x.device(), xc, out, keep, spec, p);
  if (autograd::needs_grad({x}))
    autograd::record("dropout", {x}, out, [keep, scale = 1.0 / (1.0 - p)](autograd::BackwardContext& ctx) {
      const Tensor g = ctx.grad_output().contiguous();
      Tensor dx = empty(g.shape(), TensorOptions(g.dtype(), g.device()));
      if (g.numel()) masked_scale_kernel(g.device(), g, keep, dx, scale);
      ctx.set_grad(0, dx);
    });
  return out;
}

}  // namespace

Tensor dropout(const Tensor& x, double p, bool training, Generator* gen) {
  EMBER_CHECK(p >= 0.0 && p <= 1.0, ValueError, "dropout: probability has to be between 0 and 1, got ", p);
  EMBER_CHECK(x.is_floating_point(), DTypeError, "dropout: expected a floating-point tensor, got ",
              dtype_name(x.dtype()));
  if (!training || p == 0.0) return x;
  return op::call<dropout_op>(dropout_body, x, p, gen);
}

}  // namespace ember
