// kv_cache_attention (ops/kv_cache_attention.h): one new query per row
// against a KV cache up to a device-held position; the op's checks and its
// CPU kernel (cuda/kv_cache_attention.cu has the CUDA one).
#include <ember/core/autograd.h>
#include <ember/core/cuda_graph.h>
#include <ember/core/op.h>
#include <ember/core/parallel.h>
#include <ember/ops/attention.h>
#include <ember/ops/decode_attention_avx512.h>
#include <ember/ops/factory.h>
#include <ember/ops/indexing.h>
#include <ember/ops/kv_cache_attention.h>

#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

namespace ember {

decltype(detail::kv_cache_attention_kernel) detail::kv_cache_attention_kernel("kv_cache_attention");

namespace {

// Row b, head h over keys 0 .. n - 1, in A (float, or double for double):
// the scores, their max, exp and sum in index order, then the weighted sum
// of the value rows.
template <class T, class A>
void head_loop(const T* q, const T* k, int64_t ks, const T* v, int64_t vs, int64_t n, int64_t D, A scale, T* out,
               std::vector<A>& s) {
  s.resize(static_cast<size_t>(n));
  A mx = -std::numeric_limits<A>::infinity();
  for (int64_t j = 0; j < n; ++j) {
    A dot = 0;
    for (int64_t d = 0; d < D; ++d) dot += static_cast<A>(q[d]) * static_cast<A>(k[j * ks + d]);
    s[j] = dot * scale;
    mx = s[j] > mx ? s[j] : mx;
  }
  A sum = 0;
  for (int64_t j = 0; j < n; ++j) sum += s[j] = std::exp(s[j] - mx);
  for (int64_t d = 0; d < D; ++d) {
    A acc = 0;
    for (int64_t j = 0; j < n; ++j) acc += s[j] * static_cast<A>(v[j * vs + d]);
    out[d] = static_cast<T>(acc / sum);
  }
}

void cpu_kv_cache_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& pos, int64_t H,
                            Tensor& out) {
  const int64_t B = q.size(0), E = q.size(2), D = E / H;
  const int64_t* p = pos.data<int64_t>();
  const bool per_row = pos.numel() > 1;
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  const DType dt = q.dtype();
  // float32 and bfloat16 on AVX-512: the decoding loop of causal attention,
  // one query row against S = n keys per batch row (its keys split over the
  // pool's threads).
  if ((dt == DType::Float32 || dt == DType::BFloat16) && cpu::decode_attention_supported(H, D, 1)) {
    const size_t el = dt == DType::Float32 ? 4 : 2;
    for (int64_t b = 0; b < B; ++b) {
      const int64_t n = p[per_row ? b : 0] + 1;
      auto at = [&](const Tensor& t, int64_t off) {
        return static_cast<const char*>(t.data_ptr()) + static_cast<size_t>(off) * el;
      };
      cpu::DecodeAttention a{at(q, b * q.stride(0)),
                             at(k, b * k.stride(0)),
                             at(v, b * v.stride(0)),
                             dt == DType::BFloat16,
                             0,
                             q.stride(1),
                             0,
                             k.stride(1),
                             0,
                             v.stride(1),
                             1,
                             H,
                             1,
                             n,
                             D,
                             static_cast<float>(scale),
                             static_cast<char*>(out.data_ptr()) + static_cast<size_t>(b * E) * el,
                             nullptr};
      cpu::decode_attention(a);
    }
    return;
  }
  auto run = [&](auto tag, auto atag) {
    using T = decltype(tag);
    using A = decltype(atag);
    const T *qp = static_cast<const T*>(q.data_ptr()), *kp = static_cast<const T*>(k.data_ptr()),
            *vp = static_cast<const T*>(v.data_ptr());
    T* op = static_cast<T*>(out.data_ptr());
    parallel_for(0, B * H, 1, [&](int64_t lo, int64_t hi) {
      std::vector<A> s;
      for (int64_t t = lo; t < hi; ++t) {
        const int64_t b = t / H, h = t % H, n = p[per_row ? b : 0] + 1;
        head_loop<T, A>(qp + b * q.stride(0) + h * D, kp + b * k.stride(0) + h * D, k.stride(1),
                        vp + b * v.stride(0) + h * D, v.stride(1), n, D, static_cast<A>(scale), op + b * E + h * D, s);
      }
    });
  };
  if (dt == DType::Float64)
    run(double{}, double{});
  else if (dt == DType::Float32)
    run(float{}, float{});
  else if (dt == DType::BFloat16)
    run(bfloat16{}, float{});
  else
    run(float16{}, float{});
}
EMBER_REGISTER_KERNEL(detail::kv_cache_attention_kernel, CPU, cpu_kv_cache_attention);

// Not on an autocast list; 16-bit inputs run natively (float32 arithmetic
// inside the kernels). FLOPs: q k^T and w v over the cache's S keys at most.
constexpr OpDef kv_cache_attention_op{
    .name = "kv_cache_attention",
    .half = Half::InBody,
    .flops = [](const Tensor* const* in, int, const Tensor& out) { return 4 * out.numel() * in[1]->size(1); },
};
EMBER_REGISTER_OP(kv_cache_attention_op);

Tensor kv_cache_attention_body(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& pos, int64_t H) {
  const char* op = "kv_cache_attention";
  detail::check_attention_inputs(op, q, k, v, H, Tensor(), 0.0);
  EMBER_CHECK(q.size(1) == 1, ShapeError, op, ": expected one query per row, q (B, 1, E), got ", q.shape().str());
  EMBER_CHECK(!(autograd::grad_enabled() && autograd::needs_grad({q, k, v})), AutogradError, op,
              ": inference only (no backward): q ", q.shape().str(), ", k or v ", k.shape().str(),
              " requires grad (wrap the call in NoGradGuard)");
  EMBER_CHECK(pos.defined() && pos.dtype() == DType::Int64, DTypeError, op, ": pos must be an int64 tensor, got ",
              pos.defined() ? dtype_name(pos.dtype()) : "an undefined tensor");
  const int64_t B = q.size(0), S = k.size(1);
  EMBER_CHECK(pos.numel() == 1 || pos.numel() == B, ShapeError, op, ": pos must hold 1 or B = ", B, " positions, got ",
              pos.shape().str());
  EMBER_CHECK(pos.device() == q.device(), DeviceError, op, ": pos is on ", pos.device().str(), ", q on ",
              q.device().str());
  const int64_t D = q.size(2) / H;
  EMBER_CHECK(!q.device().is_cuda() || D <= kKvCacheAttentionCudaMaxHeadDim, ValueError, op, ": head dim ", D,
              " is wider than the CUDA kernel's ", kKvCacheAttentionCudaMaxHeadDim);
  const Tensor p = pos.contiguous().view({pos.numel()});
  // Inside a capture nothing can be read back: the kernel reports a bad
  // position to the graph's error record instead.
  if (!is_capturing(q.device()))
    if (auto bad = find_bad_index(p, S))
      EMBER_CHECK(false, IndexError, op, ": position ", *bad, " is outside the cache of ", S, " keys (k ",
                  k.shape().str(), ")");
  Tensor out = empty({B, 1, q.size(2)}, TensorOptions(q.dtype(), q.device()));
  if (B > 0 && q.size(2) > 0)
    detail::kv_cache_attention_kernel(q.device(), detail::unit_last(q), detail::unit_last(k), detail::unit_last(v), p,
                                      H, out);
  return out;
}

}  // namespace

Tensor kv_cache_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const Tensor& pos,
                          int64_t num_heads) {
  return op::call<kv_cache_attention_op>(kv_cache_attention_body, q, k_cache, v_cache, pos, num_heads);
}

}  // namespace ember
