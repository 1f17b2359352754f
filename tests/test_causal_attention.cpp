// Causal attention (ops/causal_attention.h): the fused FlashAttention kernel
// in float32 and float64 against the composed float64 path
// (multi_head_attention with the causal mask), forward and backward, with
// and without dropout, across block tails; a float64 gradcheck; bad input.
#include <doctest/doctest.h>
#include <ember/ember.h>

using namespace ember;

namespace {
double max_diff(const Tensor& a, const Tensor& b) { return max(abs(sub(a, b))).item<double>(); }
}  // namespace

TEST_CASE("causal_attention: the fused kernel equals the composed float64 path, dropout and block tails included") {
  struct Case {
    int64_t N, L, S, H, D;
    bool packed;
  };
  // Sizes across the 64-row block: one row, a ragged single block, exactly
  // one block, one past it, several blocks with a tail; fewer queries than
  // keys (a KV cache's chunk); one and four queries against a long cache
  // (decoding: without dropout, the decode loops); head dims 1 to 64.
  for (const Case c :
       {Case{2, 1, 1, 1, 1, true}, Case{2, 5, 5, 2, 4, true}, Case{1, 64, 64, 2, 16, true}, Case{2, 65, 65, 3, 8, true},
        Case{1, 130, 130, 2, 48, true}, Case{2, 3, 70, 2, 8, false}, Case{1, 67, 131, 1, 16, false},
        Case{2, 9, 9, 4, 4, false}, Case{1, 1, 1030, 3, 16, false}, Case{2, 4, 200, 2, 64, false}}) {
    for (double p : {0.0, 0.3}) {
      CAPTURE(c.L);
      CAPTURE(c.S);
      CAPTURE(c.D);
      CAPTURE(p);
      const int64_t E = c.H * c.D;
      Generator gen(11);
      // Strided inputs: columns [1, 1 + 3E) of rows 3E + 2 wide.
      const Tensor wide_q = randn({c.N, c.L, 3 * E + 2}, TensorOptions(DType::Float64), &gen);
      const Tensor wide_kv = randn({c.N, c.S, 2 * E + 1}, TensorOptions(DType::Float64), &gen);
      const Tensor gout = randn({c.N, c.L, E}, TensorOptions(DType::Float64), &gen);
      std::vector<Tensor> outs, gq, gkv;
      // Runs 0 and 1: the fused kernel in float32 and float64; run 2: the composed float64 path.
      for (int run = 0; run < 3; ++run) {
        const DType dt = run == 0 ? DType::Float32 : DType::Float64;
        // Fresh leaves per run (to() of a tensor already of dt is the tensor itself).
        const Tensor bq = wide_q.to(dt).clone().requires_grad_(), bkv = wide_kv.to(dt).clone().requires_grad_();
        Generator drop(42);
        Tensor out;
        if (c.packed) {
          const Tensor x = bq.narrow(2, 1, 3 * E);
          out = run < 2 ? causal_self_attention(x, c.H, p, &drop)
                        : multi_head_self_attention(x, c.H, causal_attention_mask(c.L, c.L), p, &drop);
        } else {
          const Tensor q = bq.narrow(2, 1, E), k = bkv.narrow(2, 0, E), v = bkv.narrow(2, E + 1, E);
          out = run < 2 ? causal_attention(q, k, v, c.H, p, &drop)
                        : multi_head_attention(q, k, v, c.H, causal_attention_mask(c.L, c.S), p, &drop);
        }
        sum(mul(out, gout.to(dt))).backward();
        outs.push_back(out.to(DType::Float64));
        gq.push_back(bq.grad().to(DType::Float64));
        gkv.push_back(bkv.grad().defined() ? bkv.grad().to(DType::Float64) : zeros_like(wide_kv));
      }
      CHECK(max_diff(outs[1], outs[2]) < 1e-12);
      CHECK(max_diff(gq[1], gq[2]) < 1e-11);
      CHECK(max_diff(gkv[1], gkv[2]) < 1e-11);
      CHECK(max_diff(outs[0], outs[2]) < 1e-5);
      CHECK(max_diff(gq[0], gq[2]) < 3e-5);
      CHECK(max_diff(gkv[0], gkv[2]) < 3e-5);
      CHECK(max(abs(outs[2])).item<double>() > 0.1);  // not vacuous
      CHECK(max(abs(gq[2])).item<double>() > 0.1);
    }
  }
}

TEST_CASE("causal_attention: the first query sees only the first key, the last sees all") {
  // With L = S, out[0] is v[0] exactly (one key, weight 1), whatever q and k.
  Generator gen(3);
  const Tensor x = randn({2, 70, 3 * 8}, TensorOptions(DType::Float64), &gen);
  const Tensor out = causal_self_attention(x, 2);
  CHECK(max_diff(out.narrow(1, 0, 1), x.narrow(2, 16, 8).narrow(1, 0, 1)) < 1e-15);
  // Changing the last token changes only the last output row.
  Tensor y = x.clone();
  y.narrow(1, 69, 1).fill_(0.5);
  const Tensor out2 = causal_self_attention(y, 2);
  CHECK(max_diff(out.narrow(1, 0, 69), out2.narrow(1, 0, 69)) == 0.0);
  CHECK(max_diff(out.narrow(1, 69, 1), out2.narrow(1, 69, 1)) > 1e-3);
}

TEST_CASE("causal_attention: float64 gradcheck of the fused kernel, with and without dropout") {
  for (double p : {0.0, 0.25}) {
    CAPTURE(p);
    Generator gen(9);
    const Tensor x = randn({2, 5, 12}, TensorOptions(DType::Float64), &gen).requires_grad_();
    auto r = gradcheck(
        [&](const std::vector<Tensor>& in) {
          Generator d(4);  // the same mask for every evaluation
          return causal_self_attention(in[0], 2, p, &d);
        },
        {x});
    CHECK_MESSAGE(r.ok, r.message);
    const Tensor q = randn({1, 3, 4}, TensorOptions(DType::Float64), &gen).requires_grad_();
    const Tensor k = randn({1, 6, 4}, TensorOptions(DType::Float64), &gen).requires_grad_();
    const Tensor v = randn({1, 6, 4}, TensorOptions(DType::Float64), &gen).requires_grad_();
    auto r2 = gradcheck(
        [&](const std::vector<Tensor>& in) {
          Generator d(4);
          return causal_attention(in[0], in[1], in[2], 2, p, &d);
        },
        {q, k, v});
    CHECK_MESSAGE(r2.ok, r2.message);
  }
}

TEST_CASE("causal_attention: bad input is refused with the op named") {
  const Tensor x = randn({2, 3, 12});
  CHECK_THROWS_WITH_AS(causal_self_attention(x, 5), doctest::Contains("causal_self_attention"), ValueError);
  CHECK_THROWS_AS(causal_self_attention(randn({2, 3, 8}), 2), ShapeError);
  CHECK_THROWS_AS(causal_self_attention(randn({3, 12}), 2), ShapeError);
  CHECK_THROWS_AS(causal_self_attention(x, 2, 1.0), ValueError);
  CHECK_THROWS_AS(causal_self_attention(x.to(DType::Int64), 2), DTypeError);
  // More queries than keys: the causal alignment is undefined.
  CHECK_THROWS_WITH_AS(causal_attention(randn({1, 4, 4}), randn({1, 3, 4}), randn({1, 3, 4}), 1),
                       doctest::Contains("causal_attention"), ShapeError);
  CHECK_THROWS_AS(causal_attention_mask(4, 3), ShapeError);
}

TEST_CASE("causal_attention: bfloat16 decoding without a graph equals float32 on the same values") {
  // One and three new queries against a cache of 300 keys, 3 heads of 16:
  // the bf16 decode loops read bfloat16 and compute in float32.
  Generator gen(5);
  for (int64_t L : {1, 3}) {
    const Tensor q = randn({2, L, 48}, TensorOptions(), &gen).to(kBFloat16);
    const Tensor k = randn({2, 300, 48}, TensorOptions(), &gen).to(kBFloat16);
    const Tensor v = randn({2, 300, 48}, TensorOptions(), &gen).to(kBFloat16);
    NoGradGuard ng;
    const Tensor out = causal_attention(q, k, v, 3);
    CHECK(out.dtype() == kBFloat16);
    const Tensor want = causal_attention(q.to(kFloat32), k.to(kFloat32), v.to(kFloat32), 3);
    CHECK(max_diff(out.to(DType::Float64), want.to(DType::Float64)) < 1e-2);
    CHECK(max(abs(want)).item<double>() > 0.1);
  }
}

TEST_CASE("causal_attention: decoding against a cache view equals float64 for every head width and key count") {
  // The decoding path (a few queries, a longer cache; AVX-512 builds run
  // ops/decode_attention_avx512.h) over head widths 16 to 128, key counts
  // around its 16-key blocks and its split of the keys between threads, and
  // the cache as GPT keeps it: a (N, max_len, E) buffer narrowed to the
  // filled length. float32 and bfloat16 keys and values against float64.
  Generator gen(21);
  for (int64_t D : {16, 48, 64, 128})
    for (int64_t S : {2, 15, 16, 17, 33, 100, 257})
      for (int64_t L : {1, 2}) {
        if (L >= S) continue;
        CAPTURE(D);
        CAPTURE(S);
        CAPTURE(L);
        const int64_t H = D == 64 ? 12 : 3, E = H * D;
        const Tensor kc = randn({2, S + 5, E}, TensorOptions(DType::Float64), &gen);
        const Tensor vc = randn({2, S + 5, E}, TensorOptions(DType::Float64), &gen);
        const Tensor q = randn({2, L, E}, TensorOptions(DType::Float64), &gen);
        const Tensor k = kc.narrow(1, 0, S), v = vc.narrow(1, 0, S);
        NoGradGuard ng;
        const Tensor want = multi_head_attention(q, k, v, H, causal_attention_mask(L, S));
        const Tensor f32 =
            causal_attention(q.to(kFloat32), kc.to(kFloat32).narrow(1, 0, S), vc.to(kFloat32).narrow(1, 0, S), H);
        CHECK(max_diff(f32.to(DType::Float64), want) < 2e-6);
        // bfloat16: the same values rounded to bfloat16 first, so only the arithmetic differs.
        const Tensor qb = q.to(kBFloat16), kb = kc.to(kBFloat16), vb = vc.to(kBFloat16);
        const Tensor want_b =
            multi_head_attention(qb.to(DType::Float64), kb.narrow(1, 0, S).to(DType::Float64),
                                 vb.narrow(1, 0, S).to(DType::Float64), H, causal_attention_mask(L, S));
        const Tensor bf = causal_attention(qb, kb.narrow(1, 0, S), vb.narrow(1, 0, S), H);
        CHECK(bf.dtype() == kBFloat16);
        // One bfloat16 rounding of outputs below 4 in magnitude: at most 2^-7 relative.
        CHECK(max_diff(bf.to(DType::Float64), want_b) < 4.0 * 0x1p-8);
        CHECK(max(abs(want)).item<double>() > 0.1);
      }
}
