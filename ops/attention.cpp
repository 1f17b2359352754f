// Multi-head attention as one op (ops/attention.h): forward and backward
// written with matmul_into on per-head strided views and the softmax and
// dropout kernels, so it runs on every backend that has those; and a fused
// kernel that keeps none of the (N, H, L, S) weights: on the CPU for short
// sequences (32 to 64 keys, at most 64 queries and head dims, float32 or
// bfloat16, no mask: the demo transformer's attention), one head at a time
// in L1; on CUDA the tensor-core kernels (cuda/attention.cu) for bfloat16
// and float16 at head dims 64 and 128, any lengths, no mask.
#include <ember/ops/attention.h>

#include <cmath>

#include <ember/core/autograd.h>
#include <ember/core/dispatch.h>
#include <ember/core/op.h>
#include <ember/ops/attention_fused.h>
#include <ember/ops/causal_attention.h>
#include <ember/ops/dropout.h>
#include <ember/ops/half_ops.h>
#include <ember/ops/matmul.h>
#include <ember/ops/onnx_lowerings.h>
#include <ember/ops/pointwise.h>
#include <ember/ops/sgemm_avx512.h>
#include <ember/ops/softmax.h>

namespace ember {
namespace {

// x (N, T, H * D) seen per head as (N, H, T, D): head h is D columns at h * D
// of every row. A view: no copy, x's own row and batch strides.
Tensor heads(const Tensor& x, int64_t H) {
  const int64_t D = x.size(2) / H;
  return make_view(x, {x.size(0), H, x.size(1), D}, {x.stride(0), D, x.stride(1), 1}, x.offset());
}

// The same heads transposed: (N, H, D, T), each read column-major by BLAS.
Tensor heads_t(const Tensor& x, int64_t H) {
  const int64_t D = x.size(2) / H;
  return make_view(x, {x.size(0), H, D, x.size(1)}, {x.stride(0), D, 1, x.stride(1)}, x.offset());
}

}  // namespace

// A plain view with a contiguous last dim, which heads() needs.
Tensor detail::unit_last(const Tensor& x) {
  return x.stride(2) == 1 || x.size(2) <= 1 ? x.detach() : x.detach().contiguous();
}

void detail::check_attention_inputs(const char* op, const Tensor& q, const Tensor& k, const Tensor& v, int64_t H,
                                    const Tensor& mask, double p) {
  EMBER_CHECK(q.defined() && k.defined() && v.defined(), ValueError, op, ": got an undefined tensor");
  EMBER_CHECK(q.dim() == 3 && k.dim() == 3 && v.dim() == 3, ShapeError, op,
              ": expected q (N, L, E), k and v (N, S, E), got ", q.shape().str(), ", ", k.shape().str(), ", ",
              v.shape().str());
  EMBER_CHECK(q.is_floating_point() && k.dtype() == q.dtype() && v.dtype() == q.dtype(), DTypeError, op,
              ": expected q, k, v of one floating dtype, got ", dtype_name(q.dtype()), ", ", dtype_name(k.dtype()),
              ", ", dtype_name(v.dtype()));
  check_same_device(op, q, k);
  check_same_device(op, q, v);
  const int64_t N = q.size(0), E = q.size(2);
  EMBER_CHECK(k.size(0) == N && v.size(0) == N && k.size(1) == v.size(1) && k.size(2) == E && v.size(2) == E,
              ShapeError, op, ": q ", q.shape().str(), ", k ", k.shape().str(), " and v ", v.shape().str(),
              " do not fit (one batch, one width E, as many values as keys)");
  EMBER_CHECK(H > 0 && E % H == 0, ValueError, op, ": width ", E, " is not divisible into ", H, " heads");
  EMBER_CHECK(k.size(1) > 0, ShapeError, op, ": attention over zero keys (k of shape ", k.shape().str(), ")");
  EMBER_CHECK(p >= 0.0 && p < 1.0, ValueError, op, ": dropout probability must be in [0, 1), got ", p);
  if (mask.defined()) {
    EMBER_CHECK(mask.dtype() == DType::Bool, DTypeError, op, ": mask must be bool (true = masked out), got ",
                dtype_name(mask.dtype()));
    check_same_device(op, q, mask);
    const Shape full{N, H, q.size(1), k.size(1)};
    EMBER_CHECK(mask.dim() <= 4 && broadcast_shapes(full, mask.shape(), op) == full, ShapeError, op, ": mask of shape ",
                mask.shape().str(), " does not broadcast to (N, H, L, S) = ", full.str());
  }
}

namespace {
using detail::unit_last;

// Both attention ops are on PyTorch's lower-precision autocast list (as
// nn.MultiheadAttention's products are). 16-bit: the body's bf16 path
// (bf16_path), float32 copies rounded once otherwise.
// The fused kernel (ops/attention_cpu.cpp) is a fast path for the shapes
// fused_fits takes. FLOPs: S = Q K^T and O = W V, 2 N L S E each (E: all
// heads together).
constexpr const char* kComposed = "the composed path: matmul_into, softmax and dropout kernels, (N, H, L, S) weights";
// Export writes the attention as its MatMul / Softmax / Where core (ops/onnx_lowerings.h).
void check_no_dropout(const lowering::Call& c, size_t i) {
  EMBER_CHECK(c.f(i) == 0.0, ValueError, "ONNX export: ", c.name(), " ran with attention dropout ", c.f(i),
              " (training mode); export records the model in eval mode");
}
void lower_mha(lowering::Graph& g, const lowering::Call& c) {
  check_no_dropout(c, 5);
  const int64_t heads = c.i(3), E = c.tensor(0).size(-1);
  const std::string mask = c.has_tensor(4) ? g.value(c.tensor(4)) : "";
  g.bind(c.outputs[0], lowering::attention(g, g.value(c.tensor(0)), g.value(c.tensor(1)), g.value(c.tensor(2)), heads,
                                           E / heads, mask, false));
}
void lower_mhsa(lowering::Graph& g, const lowering::Call& c) {
  check_no_dropout(c, 3);
  const int64_t heads = c.i(1), E = c.tensor(0).size(-1) / 3;
  const auto qkv = g.node("Split", {g.value(c.tensor(0)), g.constant_ints({E, E, E})}, {{"axis", int64_t{-1}}}, 3);
  const std::string mask = c.has_tensor(2) ? g.value(c.tensor(2)) : "";
  g.bind(c.outputs[0], lowering::attention(g, qkv[0], qkv[1], qkv[2], heads, E / heads, mask, false));
}
constexpr OpDef mha_op{
    .name = "multi_head_attention",
    .autocast = Autocast::LowerPrecision,
    .half = Half::InBody,
    .fast_paths = {{{.table = &detail::attention_forward_kernel, .without = kComposed}}},
    .flops = [](const Tensor* const* in, int, const Tensor& out) { return 4 * out.numel() * in[1]->size(1); },
    .onnx = lower_mha,
};
constexpr OpDef mhsa_op{
    .name = "multi_head_self_attention",
    .autocast = Autocast::LowerPrecision,
    .half = Half::InBody,
    .fast_paths = {{{.table = &detail::attention_forward_kernel, .without = kComposed}}},
    .flops = [](const Tensor* const*, int, const Tensor& out) { return 4 * out.numel() * out.size(1); },
    .onnx = lower_mhsa,
};
EMBER_REGISTER_OP(mha_op);
EMBER_REGISTER_OP(mhsa_op);

// From 32 keys up: at the ViT's 17 tokens the composed path, whose softmax
// puts 16 rows across the vector lanes, measured faster; at the demo
// transformer's 50 the fused one does (docs/PERFORMANCE.md, "ops/attention.cpp").
bool fused_shape_fits(const Tensor& q, const Tensor& k, int64_t H, const Tensor& mask) {
  const int64_t D = q.size(2) / H;
  return cpu::kHaveSgemmAvx512 && !mask.defined() && q.size(1) <= 64 && k.size(1) >= 32 && k.size(1) <= 64 && D <= 64 &&
         q.numel() > 0 && k.numel() > 0;
}
// On CUDA: the tensor-core kernels' dtypes and head dims, any lengths.
bool fused_fits(const Tensor& q, const Tensor& k, int64_t H, const Tensor& mask) {
  if (q.device().type == DeviceType::CUDA)
    return !mask.defined() && detail::cuda_causal_tensor_core(q.dtype(), q.size(2) / H) && q.numel() > 0 &&
           k.numel() > 0;
  return (q.dtype() == DType::Float32 || q.dtype() == DType::BFloat16) && fused_shape_fits(q, k, H, mask);
}

// What the forward keeps for backward: the weights W = softmax(S), the
// dropout mask and Wd = dropout(W) (Wd is W when p = 0); or, from the fused
// kernel, only each row's log-sum-exp and the dropout draws' Philox stream.
struct Forward {
  Tensor out, w, keep, wd;
  Tensor lse;  // fused: (N, H, L) float32
  RandomSpec spec{RandomKind::Uniform, 0, 0, 0.0, 1.0};
};

// fused_kernel: the op's fast path is present on q's device.
Forward forward(const Tensor& q, const Tensor& k, const Tensor& v, int64_t H, const Tensor& mask, double p,
                Generator* gen, double scale, bool fused_kernel) {
  const int64_t N = q.size(0), L = q.size(1), S = k.size(1), E = q.size(2);
  const TensorOptions o(q.dtype(), q.device());
  // Scores, weights and their gradients: float32 for bfloat16 q, k, v (the
  // composed path's bf16 form, bf16_path), else q's dtype.
  const TensorOptions wo(q.dtype() == DType::BFloat16 ? DType::Float32 : q.dtype(), q.device());
  const Shape ws{N, H, L, S}, rows{N * H * L, S, 1};  // softmax over S, one row per (n, h, query)
  Forward f;
  f.out = empty({N, L, E}, o);
  if (fused_kernel && fused_fits(q, k, H, mask)) {
    if (p > 0) {
      Generator& g = gen ? *gen : default_generator();
      f.spec =
          reserve_random(RandomKind::Uniform, g, (static_cast<uint64_t>(N * H * L * S) + 3) / 4, q.device(), 0.0, 1.0);
    }
    f.lse = empty({N, H, L}, TensorOptions(DType::Float32, q.device()));
    detail::attention_forward_kernel(q.device(), q, k, v, detail::FusedAttentionParams{H, scale, p, f.spec}, f.out,
                                     f.lse);
    return f;
  }
  f.w = empty(ws, wo);
  if (f.out.numel() == 0) return f;
  {
    Tensor scores = empty(ws, wo);
    matmul_into(heads(q, H), heads_t(k, H), scores, scale);
    const Tensor m3 = mask.defined() ? broadcast_view(mask, ws).contiguous().view(rows) : Tensor();
    Tensor w3 = f.w.view(rows);
    softmax_kernel(q.device(), scores.view(rows), m3, w3, false);
  }
  f.wd = f.w;
  if (p > 0) {
    Generator& g = gen ? *gen : default_generator();
    const RandomSpec spec =
        reserve_random(RandomKind::Uniform, g, (static_cast<uint64_t>(f.w.numel()) + 3) / 4, q.device(), 0.0, 1.0);
    f.wd = empty(ws, wo);
    f.keep = empty(ws, TensorOptions(DType::Bool, q.device()));
    dropout_kernel(q.device(), f.w, f.wd, f.keep, spec, p);
  }
  matmul_into(f.wd, heads(v, H), heads(f.out, H));
  return f;
}

// Gradients of q, k, v into dq, dk, dv (each (N, T, E) views with a unit
// last stride, or undefined when not wanted), from g = d out.
// out: the forward's output (read by the fused CUDA backward).
void backward(const Tensor& g, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Forward& f,
              int64_t H, double p, double scale, Tensor dq, Tensor dk, Tensor dv) {
  if (f.lse.defined()) {
    detail::attention_backward_kernel(q.device(), unit_last(g), q, k, v, out, f.lse,
                                      detail::FusedAttentionParams{H, scale, p, f.spec}, dq, dk, dv);
    return;
  }
  if (!f.wd.defined()) {  // no queries, or no batch: nothing flows back
    for (Tensor* d : {&dq, &dk, &dv})
      if (d->defined()) d->zero_();
    return;
  }
  const Tensor gh = heads(unit_last(g), H);
  if (dv.defined()) matmul_into(f.wd.transpose(-2, -1), gh, heads(dv, H));  // dV = Wd^T G
  if (!dq.defined() && !dk.defined()) return;
  const TensorOptions o(f.w.dtype(), f.w.device());
  const Shape rows{f.w.numel() / f.w.size(-1), f.w.size(-1), 1};
  Tensor dw = empty(f.w.shape(), o);
  matmul_into(gh, heads_t(v, H), dw);  // dWd = G V^T
  if (p > 0) {
    Tensor dwk = empty(f.w.shape(), o);
    masked_scale_kernel(dw.device(), dw, f.keep, dwk, 1.0 / (1.0 - p));
    dw = dwk;
  }
  Tensor ds = empty(f.w.shape(), o);
  Tensor ds3 = ds.view(rows);
  softmax_backward_kernel(ds.device(), f.w.view(rows), dw.view(rows), ds3, false);
  dw = Tensor();
  if (dq.defined()) matmul_into(ds, heads(k, H), heads(dq, H), scale);                    // dQ = dS K / sqrt(D)
  if (dk.defined()) matmul_into(ds.transpose(-2, -1), heads(q, H), heads(dk, H), scale);  // dK = dS^T Q / sqrt(D)
}

// bfloat16 q, k, v on the CPU run without float32 copies. Both paths read
// the bf16 inputs in place and write the bf16 outputs through the bf16 GEMM
// (ops/bgemm_avx512.h), with the scores, softmax, dropout and their
// gradients in float32; the weights are rounded to bfloat16 (by the GEMM as
// it packs them; in the fused kernel once, into a buffer: as_a), as
// PyTorch's autocast runs the softmax output through a bf16 bmm. The fused kernel (32-64 keys, no mask) does the
// composed path's products one head at a time, so the two agree but for a rounding flipped by their softmax kernels'
// float32 differences. Either saves converting the packed projection, the output and their gradients as whole tensors.
// float16 still takes float32 copies.
bool bf16_path(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask) {
  return q.device().is_cpu() && q.dtype() == DType::BFloat16 && k.dtype() == DType::BFloat16 &&
         v.dtype() == DType::BFloat16 && (!mask.defined() || mask.dtype() == DType::Bool);
}
// 16-bit q, k, v on CUDA that the tensor-core kernels take run in their dtype too.
bool tensor_core_path(const Tensor& q, const Tensor& k, int64_t H, const Tensor& mask, bool fused_kernel) {
  return fused_kernel && q.device().type == DeviceType::CUDA && fused_fits(q, k, H, mask);
}

double scale_of(const Tensor& q, int64_t H) { return 1.0 / std::sqrt(static_cast<double>(q.size(2) / H)); }

Tensor mha_body(const Tensor& q, const Tensor& k, const Tensor& v, int64_t num_heads, const Tensor& mask,
                double dropout_p, Generator* gen) {
  detail::check_attention_inputs("multi_head_attention", q, k, v, num_heads, mask, dropout_p);
  const bool fused_kernel = op::fast_path<mha_op>(detail::attention_forward_kernel, q.device());
  if (any_half({&q, &k, &v, &mask}) && !bf16_path(q, k, v, mask) &&
      !tensor_core_path(q, k, num_heads, mask, fused_kernel))  // float32 copies, rounded once
    return mha_body(upcast_half(q), upcast_half(k), upcast_half(v), num_heads, upcast_half(mask), dropout_p, gen)
        .to(q.dtype());
  const Tensor qp = unit_last(q), kp = unit_last(k), vp = unit_last(v);
  const int64_t H = num_heads;
  const double scale = scale_of(q, H);
  Forward f = forward(qp, kp, vp, H, mask, dropout_p, gen, scale, fused_kernel);
  Tensor out = std::move(f.out);  // not kept in f: the output holds the node
  if (autograd::needs_grad({q, k, v}))
    autograd::record("multi_head_attention", {q, k, v}, out,
                     [sq = autograd::SavedTensor(qp), sk = autograd::SavedTensor(kp), sv = autograd::SavedTensor(vp),
                      so = autograd::SavedTensor(f.lse.defined() ? out : Tensor()), f = std::move(f), H, p = dropout_p,
                      scale](autograd::BackwardContext& ctx) {
                       const Tensor &q = sq.get(), &k = sk.get(), &v = sv.get();
                       auto grad = [&](int i, const Tensor& like) {
                         return ctx.needs_grad(i) ? empty(like.shape(), TensorOptions(like.dtype(), like.device()))
                                                  : Tensor();
                       };
                       const Tensor dq = grad(0, q), dk = grad(1, k), dv = grad(2, v);
                       backward(ctx.grad_output(), q, k, v, so.get(), f, H, p, scale, dq, dk, dv);
                       if (dq.defined()) ctx.set_grad(0, dq);
                       if (dk.defined()) ctx.set_grad(1, dk);
                       if (dv.defined()) ctx.set_grad(2, dv);
                     });
  return out;
}

Tensor mhsa_body(const Tensor& qkv, int64_t num_heads, const Tensor& mask, double dropout_p, Generator* gen) {
  EMBER_CHECK(qkv.defined() && qkv.dim() == 3 && qkv.size(2) % 3 == 0, ShapeError,
              "multi_head_self_attention: expected a packed projection (N, L, 3E), got ",
              qkv.defined() ? qkv.shape().str() : std::string("an undefined tensor"));
  const Tensor packed = unit_last(qkv);
  const int64_t E = qkv.size(2) / 3, H = num_heads;
  const Tensor q = packed.narrow(2, 0, E), k = packed.narrow(2, E, E), v = packed.narrow(2, 2 * E, E);
  detail::check_attention_inputs("multi_head_self_attention", q, k, v, H, mask, dropout_p);
  const bool fused_kernel = op::fast_path<mhsa_op>(detail::attention_forward_kernel, q.device());
  if (any_half({&qkv, &mask}) && !bf16_path(q, k, v, mask) && !tensor_core_path(q, k, H, mask, fused_kernel))
    return mhsa_body(upcast_half(qkv), num_heads, upcast_half(mask), dropout_p, gen).to(qkv.dtype());
  const double scale = scale_of(q, H);
  Forward f = forward(q, k, v, H, mask, dropout_p, gen, scale, fused_kernel);
  Tensor out = std::move(f.out);  // not kept in f: the output holds the node
  if (autograd::needs_grad({qkv}))
    autograd::record("multi_head_self_attention", {qkv}, out,
                     [sp = autograd::SavedTensor(packed), so = autograd::SavedTensor(f.lse.defined() ? out : Tensor()),
                      f = std::move(f), H, E, p = dropout_p, scale](autograd::BackwardContext& ctx) {
                       const Tensor& x = sp.get();
                       // The three slices of one gradient, each written by its GEMM.
                       Tensor d = empty(x.shape(), TensorOptions(x.dtype(), x.device()));
                       backward(ctx.grad_output(), x.narrow(2, 0, E), x.narrow(2, E, E), x.narrow(2, 2 * E, E),
                                so.get(), f, H, p, scale, d.narrow(2, 0, E), d.narrow(2, E, E), d.narrow(2, 2 * E, E));
                       ctx.set_grad(0, d);
                     });
  return out;
}

}  // namespace

Tensor multi_head_attention(const Tensor& q, const Tensor& k, const Tensor& v, int64_t num_heads, const Tensor& mask,
                            double dropout_p, Generator* gen) {
  return op::call<mha_op>(mha_body, q, k, v, num_heads, mask, dropout_p, gen);
}

Tensor multi_head_self_attention(const Tensor& qkv, int64_t num_heads, const Tensor& mask, double dropout_p,
                                 Generator* gen) {
  return op::call<mhsa_op>(mhsa_body, qkv, num_heads, mask, dropout_p, gen);
}

}  // namespace ember
