// Tests of ops/matmul: known answers (tools/reference_matmul.py, PyTorch
// 1.13), every matmul shape case against a naive triple loop in float64,
// non-contiguous and broadcast operands, products large enough to be split
// across the thread pool, gradients, linear, and error messages.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include <ember/ember.h>

#include "test_util.h"

using namespace ember;
using test::error_of;

namespace {

// torch.matmul semantics written out naively, in float64.
Tensor ref_matmul(const Tensor& a0, const Tensor& b0) {
  Tensor a = a0.detach().to(DType::Float64), b = b0.detach().to(DType::Float64);
  const bool a1 = a.dim() == 1, b1 = b.dim() == 1;
  if (a1) a = a.unsqueeze(0);
  if (b1) b = b.unsqueeze(1);
  Shape ba, bb;
  for (int i = 0; i < a.dim() - 2; ++i) ba.push_back(a.size(i));
  for (int i = 0; i < b.dim() - 2; ++i) bb.push_back(b.size(i));
  const Shape batch = broadcast_shapes(ba, bb, "ref");
  const int64_t M = a.size(-2), K = a.size(-1), N = b.size(-1), nb = batch.numel();
  Shape as = batch, bs = batch, out_shape = batch;
  as.push_back(M);
  as.push_back(K);
  bs.push_back(K);
  bs.push_back(N);
  if (!a1) out_shape.push_back(M);
  if (!b1) out_shape.push_back(N);
  const std::vector<double> av = a.expand(as).contiguous().to_vector<double>();
  const std::vector<double> bv = b.expand(bs).contiguous().to_vector<double>();
  std::vector<double> cv(static_cast<size_t>(nb * M * N), 0.0);
  for (int64_t p = 0; p < nb; ++p)
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double s = 0;
        for (int64_t l = 0; l < K; ++l) s += av[(p * M + i) * K + l] * bv[(p * K + l) * N + j];
        cv[(p * M + i) * N + j] = s;
      }
  return from_vector(cv, out_shape);
}

void check_close(const Tensor& got, const Tensor& want, double tol) {
  REQUIRE(got.shape() == want.shape());
  CHECK_MESSAGE(allclose(got.to(DType::Float64), want.to(DType::Float64), tol, tol), "got ", got.str(), "\nwant ",
                want.str());
}

Tensor rnd(const Shape& s, DType dt, uint64_t seed) {
  Generator gen(seed);
  return randn(s, TensorOptions(dt), &gen);
}

// Restores the thread count when a test changed it.
struct ThreadGuard {
  int saved = num_threads();
  ~ThreadGuard() { set_num_threads(saved); }
};

struct ShapeCase {
  Shape a, b, out;
};

const std::vector<ShapeCase> kShapeCases = {
    {{3}, {3}, {}},                           // dot
    {{2, 3}, {3, 4}, {2, 4}},                 // matrix product
    {{3}, {3, 4}, {4}},                       // 1-D @ 2-D
    {{2, 3}, {3}, {2}},                       // 2-D @ 1-D
    {{4}, {2, 4, 5}, {2, 5}},                 // 1-D @ 3-D
    {{2, 3, 4}, {4}, {2, 3}},                 // 3-D @ 1-D
    {{5, 3, 4}, {4, 6}, {5, 3, 6}},           // batched @ matrix (folded into one GEMM)
    {{3, 4}, {5, 4, 6}, {5, 3, 6}},           // matrix @ batched
    {{4, 2, 3}, {4, 3, 5}, {4, 2, 5}},        // bmm-like
    {{2, 1, 3, 4}, {5, 4, 6}, {2, 5, 3, 6}},  // broadcast batch dims
    {{1, 3, 4}, {5, 4, 6}, {5, 3, 6}},        // size-1 batch broadcast
    {{2, 3, 1, 4}, {1, 4, 2}, {2, 3, 1, 2}},  // m = 1 rows, folded
    {{1, 4}, {4, 1}, {1, 1}},                 // 1 x 1 result
    {{0, 3}, {3, 4}, {0, 4}},                 // empty rows
    {{2, 0}, {0, 3}, {2, 3}},                 // empty inner dim: zeros
    {{0, 2, 3}, {3, 2}, {0, 2, 2}},           // empty batch
};

}  // namespace

TEST_CASE("matmul: known answers") {
  for (DType dt : {DType::Float32, DType::Float64}) {
    const Tensor A = tensor({{1, 2, 3}, {4, 5, 6}}, dt);
    const Tensor B = tensor({{7, 8}, {9, 10}, {11, 12}}, dt);
    const Tensor C = matmul(A, B);
    CHECK(C.dtype() == dt);
    check_close(C, tensor({{58, 64}, {139, 154}}, DType::Float64), 0);
    check_close(mm(A, B), tensor({{58, 64}, {139, 154}}, DType::Float64), 0);
    check_close(matmul(tensor({1, -2, 3}, dt), B), tensor({22, 24}, DType::Float64), 0);
    const Tensor d = matmul(tensor({1, -2, 3}, dt), tensor({4, 5, 6}, dt));
    CHECK(d.dim() == 0);
    CHECK(d.item() == 12.0);
  }
}

TEST_CASE("matmul: self-attention worked example") {
  // softmax(Q K^T [/ sqrt(d)]) V with X = I, W_q = W_k = I, W_v = [[1, 2], [3, 4]].
  for (DType dt : {DType::Float32, DType::Float64}) {
    const Tensor X = tensor({{1, 0}, {0, 1}}, dt);
    const Tensor Wq = eye(2, dt), Wk = eye(2, dt);
    const Tensor Wv = tensor({{1, 2}, {3, 4}}, dt);
    const Tensor Q = matmul(X, Wq), K = matmul(X, Wk), V = matmul(X, Wv);
    auto row_softmax = [](const Tensor& s) {
      const Tensor e = exp(s);
      return div(e, sum(e, {1}, true));
    };
    const Tensor scores = matmul(Q, K.t());
    const double tol = dt == DType::Float32 ? 1e-6 : 1e-8;
    check_close(matmul(row_softmax(scores), V),
                tensor({{1.53788284, 2.53788284}, {2.46211716, 3.46211716}}, DType::Float64), tol);
    check_close(matmul(row_softmax(div(scores, std::sqrt(2.0))), V),
                tensor({{1.6604769, 2.6604769}, {2.3395231, 3.3395231}}, DType::Float64), tol);
  }
}

TEST_CASE("matmul: every shape case matches a naive reference") {
  uint64_t seed = 1;
  for (const ShapeCase& c : kShapeCases) {
    for (DType dt : {DType::Float64, DType::Float32}) {
      INFO(c.a.str(), " @ ", c.b.str(), " ", dtype_name(dt));
      const Tensor a = rnd(c.a, dt, seed), b = rnd(c.b, dt, seed + 1);
      const Tensor out = matmul(a, b);
      CHECK(out.shape() == c.out);
      CHECK(out.dtype() == dt);
      check_close(out, ref_matmul(a, b), dt == DType::Float64 ? 1e-12 : 1e-5);
    }
    seed += 2;
  }
}

TEST_CASE("matmul: transposed, strided and broadcast operands give the contiguous result") {
  const DType dt = DType::Float64;
  const Tensor a = rnd({5, 7}, dt, 11), b = rnd({7, 6}, dt, 12);
  const Tensor want = matmul(a, b);
  check_close(want, ref_matmul(a, b), 1e-12);
  // Column-major operands (BLAS transpose flags, no copy).
  const Tensor aT = a.t().contiguous().t(), bT = b.t().contiguous().t();
  REQUIRE(!aT.is_contiguous());
  check_close(matmul(aT, b), want, 1e-12);
  check_close(matmul(a, bT), want, 1e-12);
  check_close(matmul(aT, bT), want, 1e-12);
  // Neither row- nor column-major (both strides > 1): copied.
  const Tensor big = zeros({10, 14}, dt);
  Tensor as = big.slice(0, 0, 10, 2).slice(1, 0, 14, 2);
  as.copy_(a);
  REQUIRE(as.stride(0) > 1);
  REQUIRE(as.stride(1) > 1);
  check_close(matmul(as, bT), want, 1e-12);
  // A row of a matrix (rows > 1 apart) and a strided vector.
  Tensor v = zeros({14}, dt).slice(0, 0, 14, 2);
  v.copy_(a[0]);
  check_close(matmul(v, b), want[0], 1e-12);
  check_close(matmul(bT.t(), v), ref_matmul(b.t(), a[0]), 1e-12);
  // Row-major with a leading dimension larger than the row (a narrowed matrix).
  const Tensor wide = rnd({5, 10}, dt, 13);
  check_close(matmul(wide.narrow(1, 2, 7), b), ref_matmul(wide.narrow(1, 2, 7), b), 1e-12);

  // Batched: transposed stacks, a stride-0 broadcast batch, permuted batches.
  const Tensor A = rnd({4, 5, 7}, dt, 14), B = rnd({4, 7, 6}, dt, 15);
  const Tensor wantB = matmul(A, B);
  check_close(wantB, ref_matmul(A, B), 1e-12);
  const Tensor AT = A.transpose(1, 2).contiguous().transpose(1, 2);
  const Tensor BT = B.transpose(1, 2).contiguous().transpose(1, 2);
  check_close(matmul(AT, BT), wantB, 1e-12);
  check_close(bmm(AT, B), wantB, 1e-12);
  const Tensor Ap = A.permute({1, 0, 2}).contiguous().permute({1, 0, 2});  // batch stride 7, row stride 28
  check_close(matmul(Ap, B), wantB, 1e-12);
  check_close(matmul(Ap, b.t().contiguous().t()), ref_matmul(A, b), 1e-12);
  // An operand expanded over the batch (stride 0) equals the plain 2-D operand.
  check_close(matmul(a.expand({4, 5, 7}), B), matmul(a, B), 1e-12);
  check_close(matmul(a.expand({4, 5, 7}), B), ref_matmul(a, B), 1e-12);
  check_close(matmul(A, b.unsqueeze(0).expand({4, 7, 6})), matmul(A, b), 1e-12);
  // Broadcast batch with transposed operands.
  const Tensor A4 = rnd({2, 1, 7, 5}, dt, 16).transpose(-1, -2), B3 = rnd({3, 6, 7}, dt, 17).transpose(-1, -2);
  check_close(matmul(A4, B3), ref_matmul(A4, B3), 1e-12);
}

TEST_CASE("matmul: large products split across the thread pool") {
  ThreadGuard guard;
  for (int threads : {guard.saved, 4, 3}) {
    set_num_threads(threads);
    INFO("threads ", threads);
    for (DType dt : {DType::Float32, DType::Float64}) {
      INFO(dtype_name(dt));
      const double tol = dt == DType::Float32 ? 1e-4 : 1e-11;
      // Split over row blocks.
      const Tensor a = rnd({300, 200}, dt, 21), b = rnd({200, 500}, dt, 22);
      check_close(matmul(a, b), ref_matmul(a, b), tol);
      // Transposed operands through the split (block pointers move along the other stride).
      const Tensor aT = a.t().contiguous().t(), bT = b.t().contiguous().t();
      check_close(matmul(aT, bT), ref_matmul(a, b), tol);
      // Few rows: split over column blocks.
      const Tensor r = rnd({8, 300}, dt, 23), w = rnd({300, 700}, dt, 24);
      check_close(matmul(r, w), ref_matmul(r, w), tol);
      check_close(matmul(r, w.t().contiguous().t()), ref_matmul(r, w), tol);
      // Fewer batch entries than threads: batch x blocks.
      const Tensor A = rnd({3, 150, 100}, dt, 25), B = rnd({3, 100, 200}, dt, 26);
      check_close(matmul(A, B), ref_matmul(A, B), tol);
      // Many batch entries, one GEMM each, run concurrently on the pool.
      const Tensor A2 = rnd({64, 20, 30}, dt, 27), B2 = rnd({64, 30, 40}, dt, 28);
      check_close(bmm(A2, B2), ref_matmul(A2, B2), tol);
      // A stack against one matrix: folded into one tall GEMM, then split.
      const Tensor X = rnd({6, 64, 128}, dt, 29), W = rnd({128, 96}, dt, 30);
      check_close(matmul(X, W), ref_matmul(X, W), tol);
    }
  }
}

TEST_CASE("matmul: Ember's float32 kernel (ops/sgemm_avx512.h) on every edge") {
  // It takes float32 products up to 256 columns wide (with AVX-512; elsewhere
  // these go to OpenBLAS and must pass all the same): every row tail of its
  // 8- and 6-row blocks, every column tail of its 16-wide vectors and 64-wide
  // panels, inner dims across its 256-long panels, both operand layouts,
  // heads of a packed projection (rows 3E apart), alpha and beta
  // (matmul_into), and the limit either side.
  uint64_t seed = 100;
  for (int64_t m : {1, 5, 6, 7, 8, 9, 13, 50, 257})
    for (int64_t n : {1, 15, 16, 17, 33, 50, 64, 65, 130, 256, 257})
      for (int64_t k : {1, 16, 64, 65, 256, 600}) {
        INFO("m ", m, " n ", n, " k ", k);
        const Tensor a = rnd({m, k}, DType::Float32, seed), b = rnd({k, n}, DType::Float32, seed + 1);
        seed += 2;
        const Tensor want = ref_matmul(a, b);
        const double tol = 1e-5 * std::sqrt(static_cast<double>(k));
        check_close(matmul(a, b), want, tol);
        const Tensor aT = a.t().contiguous().t(), bT = b.t().contiguous().t();
        check_close(matmul(aT, bT), want, tol);
        check_close(matmul(a, bT), want, tol);
      }
  // linear's [out] bias, which the kernel adds as it stores C: across column
  // panels (n > 64), inner-dim panels (k > 256: added once) and row blocks.
  for (int64_t n : {17, 130, 257})
    for (int64_t k : {65, 600}) {
      INFO("linear n ", n, " k ", k);
      const Tensor x = rnd({3, 97, k}, DType::Float32, seed), w = rnd({n, k}, DType::Float32, seed + 1);
      const Tensor bias = rnd({n}, DType::Float32, seed + 2);
      seed += 3;
      const Tensor want = add(ref_matmul(x, w.t()), bias.to(DType::Float64));
      check_close(linear(x, w, bias), want, 1e-5 * std::sqrt(static_cast<double>(k)));
    }
  // Attention heads: q, k, v as (N, H, L, D) views of a packed (N, L, 3, H, D).
  const int64_t N = 3, L = 17, H = 4, D = 16;
  const Tensor qkv = rnd({N, L, 3, H, D}, DType::Float32, 7);
  const Tensor q = qkv.select(2, 0).permute({0, 2, 1, 3}), k = qkv.select(2, 1).permute({0, 2, 1, 3});
  const Tensor v = qkv.select(2, 2).permute({0, 2, 1, 3});
  const Tensor scores = matmul(q, k.transpose(-1, -2));
  check_close(scores, ref_matmul(q, k.transpose(-1, -2)), 1e-4);
  check_close(matmul(scores, v), ref_matmul(scores, v), 1e-4);
  check_close(matmul(scores.transpose(-1, -2), v), ref_matmul(scores.transpose(-1, -2), v), 1e-4);
  // alpha and beta: out = 0.5 a b + 1 * out, written into a strided view.
  const Tensor a = rnd({L, D}, DType::Float32, 8), b = rnd({D, L}, DType::Float32, 9);
  Tensor buf = rnd({L, 2 * L}, DType::Float32, 10);
  const Tensor before = buf.narrow(1, 3, L).clone();
  matmul_into(a, b, buf.narrow(1, 3, L), 0.5, 1.0);
  check_close(buf.narrow(1, 3, L),
              add(mul(ref_matmul(a, b), from_vector(std::vector<double>{0.5}, {})), before.to(DType::Float64)), 1e-4);
  // beta = 0 never reads the output: NaN there stays out of the result.
  Tensor nan_out = full({L, L}, std::nan(""), TensorOptions(DType::Float32));
  matmul_into(a, b, nan_out, 1.0, 0.0);
  check_close(nan_out, ref_matmul(a, b), 1e-4);
}

TEST_CASE("matmul: gradients") {
  SUBCASE("known answers") {
    // tools/reference_matmul.py: d sum(C * Wt) for C = A @ B.
    const Tensor A = tensor({{1, 2, 3}, {4, 5, 6}}, DType::Float64).requires_grad_();
    const Tensor B = tensor({{7, 8}, {9, 10}, {11, 12}}, DType::Float64).requires_grad_();
    const Tensor Wt = tensor({{1, -1}, {2, 0.5}}, DType::Float64);
    sum(mul(matmul(A, B), Wt)).backward();
    check_close(A.grad(), tensor({{-1, -1, -1}, {18, 23, 28}}, DType::Float64), 1e-12);
    check_close(B.grad(), tensor({{9, 1}, {12, 0.5}, {15, 0}}, DType::Float64), 1e-12);
  }
  SUBCASE("gradcheck on every shape case") {
    uint64_t seed = 100;
    for (const ShapeCase& c : kShapeCases) {
      INFO(c.a.str(), " @ ", c.b.str());
      const Tensor a = rnd(c.a, DType::Float64, seed++).requires_grad_();
      const Tensor b = rnd(c.b, DType::Float64, seed++).requires_grad_();
      const GradcheckResult r = gradcheck([](const std::vector<Tensor>& x) { return matmul(x[0], x[1]); }, {a, b});
      CHECK_MESSAGE(r.ok, r.message);
      // Gradients come back in the inputs' shapes (1-D and broadcast batch dims summed).
      Tensor out = matmul(a, b);
      sum(out).backward();
      CHECK(a.grad().shape() == c.a);
      CHECK(b.grad().shape() == c.b);
    }
  }
  SUBCASE("broadcast batch gradients are sums over the broadcast dims") {
    const Tensor a = rnd({2, 1, 3, 4}, DType::Float64, 201).requires_grad_();
    const Tensor b = rnd({5, 4, 6}, DType::Float64, 202).requires_grad_();
    sum(matmul(a, b)).backward();
    // With dC = 1: dA[i, 0] = sum_j ones(3, 6) @ b[j]^T, dB[j] = sum_i a[i, 0]^T @ ones(3, 6).
    const Tensor ones36 = ones({3, 6}, DType::Float64);
    check_close(a.grad(), ref_matmul(ones36, sum(b.detach(), {0}).t()).unsqueeze(0).unsqueeze(0).expand({2, 1, 3, 4}),
                1e-12);
    check_close(b.grad(), ref_matmul(sum(a.detach(), {0, 1}).t(), ones36).unsqueeze(0).expand({5, 4, 6}), 1e-12);
  }
  SUBCASE("only inputs that need a gradient get one") {
    const Tensor a = rnd({3, 4}, DType::Float64, 301);
    const Tensor b = rnd({4, 2}, DType::Float64, 302).requires_grad_();
    sum(matmul(a, b)).backward();
    CHECK(!a.grad().defined());
    check_close(b.grad(), ref_matmul(a.t(), ones({3, 2}, DType::Float64)), 1e-12);
  }
  SUBCASE("non-contiguous inputs") {
    const Tensor a = rnd({4, 3, 5}, DType::Float64, 401).transpose(-1, -2).requires_grad_();
    const Tensor b = rnd({2, 3}, DType::Float64, 402).t().requires_grad_();
    const GradcheckResult r = gradcheck([](const std::vector<Tensor>& x) { return matmul(x[0], x[1]); }, {a, b});
    CHECK_MESSAGE(r.ok, r.message);
  }
}

TEST_CASE("mm and bmm") {
  const Tensor a = rnd({3, 4}, DType::Float64, 501), b = rnd({4, 5}, DType::Float64, 502);
  check_close(mm(a, b), ref_matmul(a, b), 1e-12);
  const Tensor A = rnd({2, 3, 4}, DType::Float64, 503), B = rnd({2, 4, 5}, DType::Float64, 504);
  check_close(bmm(A, B), ref_matmul(A, B), 1e-12);
  const Tensor Ag = A.detach().requires_grad_(), Bg = B.detach().requires_grad_();
  const GradcheckResult r = gradcheck([](const std::vector<Tensor>& x) { return bmm(x[0], x[1]); }, {Ag, Bg});
  CHECK_MESSAGE(r.ok, r.message);
}

TEST_CASE("linear") {
  SUBCASE("known answers") {
    // tools/reference_matmul.py
    const Tensor x = tensor({{{1, 2}, {3, 4}, {5, 6}}}, DType::Float64).requires_grad_();
    const Tensor w = tensor({{1, 0}, {0, 1}, {1, 1}}, DType::Float64).requires_grad_();
    const Tensor b = tensor({0.5, -0.5, 1}, DType::Float64).requires_grad_();
    const Tensor y = linear(x, w, b);
    check_close(y, tensor({{{1.5, 1.5, 4}, {3.5, 3.5, 8}, {5.5, 5.5, 12}}}, DType::Float64), 1e-12);
    sum(y).backward();
    check_close(x.grad(), full({1, 3, 2}, 2.0, DType::Float64), 1e-12);
    check_close(w.grad(), tensor({{9, 12}, {9, 12}, {9, 12}}, DType::Float64), 1e-12);
    check_close(b.grad(), tensor({3, 3, 3}, DType::Float64), 1e-12);
  }
  SUBCASE("matches matmul with the transposed weight") {
    for (DType dt : {DType::Float32, DType::Float64}) {
      const double tol = dt == DType::Float32 ? 1e-5 : 1e-12;
      const Tensor x = rnd({2, 3, 4}, dt, 601), w = rnd({5, 4}, dt, 602), b = rnd({5}, dt, 603);
      check_close(linear(x, w), ref_matmul(x, w.t()), tol);
      check_close(linear(x, w, b), add(ref_matmul(x, w.t()), b.to(DType::Float64)), tol);
      // 1-D input -> 1-D output.
      check_close(linear(x[0][0], w, b), add(ref_matmul(x[0][0], w.t()), b.to(DType::Float64)), tol);
      CHECK(linear(x[0][0], w).shape() == Shape{5});
      // Non-contiguous input and weight.
      const Tensor xt = x.transpose(0, 1).contiguous().transpose(0, 1);
      const Tensor wt = w.t().contiguous().t();
      check_close(linear(xt, wt, b), add(ref_matmul(x, w.t()), b.to(DType::Float64)), tol);
      // Large enough to split.
      const Tensor X = rnd({4, 64, 96}, dt, 604), W = rnd({80, 96}, dt, 605), B = rnd({80}, dt, 606);
      check_close(linear(X, W, B), add(ref_matmul(X, W.t()), B.to(DType::Float64)), dt == DType::Float32 ? 1e-4 : tol);
    }
  }
  SUBCASE("gradcheck") {
    const Tensor x = rnd({2, 3, 4}, DType::Float64, 701).requires_grad_();
    const Tensor w = rnd({5, 4}, DType::Float64, 702).requires_grad_();
    const Tensor b = rnd({5}, DType::Float64, 703).requires_grad_();
    auto with_bias = [](const std::vector<Tensor>& v) { return linear(v[0], v[1], v[2]); };
    auto without = [](const std::vector<Tensor>& v) { return linear(v[0], v[1]); };
    GradcheckResult r = gradcheck(with_bias, {x, w, b});
    CHECK_MESSAGE(r.ok, r.message);
    r = gradcheck(without, {x, w});
    CHECK_MESSAGE(r.ok, r.message);
    const Tensor x1 = rnd({4}, DType::Float64, 704).requires_grad_();
    r = gradcheck(with_bias, {x1, w, b});
    CHECK_MESSAGE(r.ok, r.message);
    // A bias broadcast over rows and columns ([1, 1] and 0-dim).
    const Tensor b11 = rnd({1, 1}, DType::Float64, 705).requires_grad_();
    r = gradcheck(with_bias, {x, w, b11});
    CHECK_MESSAGE(r.ok, r.message);
    const Tensor b0 = scalar_tensor(0.25, DType::Float64).requires_grad_();
    r = gradcheck(with_bias, {x, w, b0});
    CHECK_MESSAGE(r.ok, r.message);
  }
  SUBCASE("a frozen weight gets no gradient") {
    const Tensor x = rnd({3, 4}, DType::Float64, 801).requires_grad_();
    const Tensor w = rnd({2, 4}, DType::Float64, 802);
    sum(linear(x, w)).backward();
    CHECK(!w.grad().defined());
    check_close(x.grad(), ref_matmul(ones({3, 2}, DType::Float64), w), 1e-12);
  }
}

TEST_CASE("matmul: errors name the op, the shapes and the dtypes") {
  const Tensor a = rnd({2, 3}, DType::Float32, 1), b = rnd({4, 5}, DType::Float32, 2);
  CHECK_THROWS_WITH_AS(matmul(a, b), "matmul: shapes [2, 3] and [4, 5] cannot be multiplied (3 != 4)", ShapeError);
  CHECK_THROWS_WITH_AS(mm(a, b), "mm: shapes [2, 3] and [4, 5] cannot be multiplied (3 != 4)", ShapeError);
  CHECK_THROWS_WITH_AS(matmul(rnd({3}, DType::Float32, 3), rnd({4}, DType::Float32, 4)),
                       "matmul: shapes [3] and [4] cannot be multiplied (3 != 4)", ShapeError);
  CHECK_THROWS_WITH_AS(matmul(rnd({2, 3, 4}, DType::Float32, 5), rnd({3, 4, 5}, DType::Float32, 6)),
                       "matmul: the batch dims of shapes [2, 3, 4] and [3, 4, 5] cannot be broadcast (2 vs 3)",
                       ShapeError);
  // Dtypes.
  std::string msg = error_of<DTypeError>([] { matmul(ones({2, 2}), ones({2, 2}, DType::Float64)); });
  CHECK(msg.find("matmul") != std::string::npos);
  CHECK(msg.find("float32") != std::string::npos);
  CHECK(msg.find("float64") != std::string::npos);
  msg = error_of<DTypeError>([] { matmul(ones({2, 2}, DType::Int64), ones({2, 2}, DType::Int64)); });
  CHECK(msg.find("matmul") != std::string::npos);
  CHECK(msg.find("int64") != std::string::npos);
  CHECK_THROWS_AS(matmul(ones({2, 2}, DType::Bool), ones({2, 2}, DType::Bool)), DTypeError);
  // 0-dim inputs.
  CHECK_THROWS_WITH_AS(matmul(scalar_tensor(2.0), ones({2})),
                       "matmul: both arguments need at least 1 dim, got shapes [] and [2]", ShapeError);
  CHECK_THROWS_AS(matmul(ones({2}), scalar_tensor(2.0)), ShapeError);
  // mm / bmm are strict about dims.
  CHECK_THROWS_WITH_AS(mm(ones({3}), ones({3, 2})), "mm: expected 2-D tensors, got shapes [3] and [3, 2]", ShapeError);
  CHECK_THROWS_WITH_AS(bmm(ones({2, 3}), ones({3, 2})), "bmm: expected 3-D tensors, got shapes [2, 3] and [3, 2]",
                       ShapeError);
  CHECK_THROWS_WITH_AS(bmm(ones({2, 3, 4}), ones({3, 4, 5})),
                       "bmm: batch sizes of shapes [2, 3, 4] and [3, 4, 5] differ (2 != 3)", ShapeError);
  CHECK_THROWS_WITH_AS(bmm(ones({2, 3, 4}), ones({2, 5, 5})),
                       "bmm: shapes [2, 3, 4] and [2, 5, 5] cannot be multiplied (4 != 5)", ShapeError);
  // linear.
  CHECK_THROWS_WITH_AS(linear(ones({2, 3}), ones({4, 5})),
                       "linear: input [2, 3] and weight [4, 5] cannot be multiplied (input's last dim 3 != "
                       "in_features 5)",
                       ShapeError);
  CHECK_THROWS_AS(linear(ones({2, 3}), ones({3})), ShapeError);
  CHECK_THROWS_AS(linear(scalar_tensor(1.0), ones({2, 1})), ShapeError);
  msg = error_of<ShapeError>([] { linear(ones({2, 3}), ones({4, 3}), ones({3})); });
  CHECK(msg.find("linear: bias of shape [3]") != std::string::npos);
  CHECK(msg.find("[2, 4]") != std::string::npos);
  CHECK_THROWS_AS(linear(ones({2, 3}), ones({4, 3}), ones({4}, DType::Float64)), DTypeError);
  CHECK_THROWS_AS(linear(ones({2, 3}), ones({4, 3}, DType::Float64)), DTypeError);
}

namespace {
// Records the descriptors the matmul ops hand to the CPU GEMM kernel, then
// runs the real kernel.
std::vector<GemmDesc>* g_seen = nullptr;
void (*g_real_gemm)(const GemmDesc&) = nullptr;
void spy_gemm(const GemmDesc& d) {
  if (g_seen) g_seen->push_back(d);
  g_real_gemm(d);
}
struct GemmSpy {
  std::vector<GemmDesc> seen;
  GemmSpy() {
    g_real_gemm = gemm_kernel.get(kCPU);
    g_seen = &seen;
    gemm_kernel.set(DeviceType::CPU, spy_gemm);
  }
  ~GemmSpy() {
    gemm_kernel.set(DeviceType::CPU, g_real_gemm);
    g_seen = nullptr;
  }
};
}  // namespace

TEST_CASE("matmul: operands reach the GEMM kernel in place") {
  const DType dt = DType::Float64;
  SUBCASE("transposed operands become BLAS transpose flags, not copies") {
    const Tensor a = rnd({7, 5}, dt, 1).t(), b = rnd({6, 7}, dt, 2).t();  // [5, 7] and [7, 6], column-major
    GemmSpy spy;
    const Tensor c = matmul(a, b);
    REQUIRE(spy.seen.size() == 1);
    const GemmDesc& d = spy.seen[0];
    CHECK(d.trans_a);
    CHECK(d.trans_b);
    CHECK(d.lda == 5);
    CHECK(d.ldb == 7);
    CHECK(d.a.data_ptr() == a.data_ptr());
    CHECK(d.b.data_ptr() == b.data_ptr());
    CHECK(d.batch.empty());
    check_close(c, ref_matmul(a, b), 1e-12);
  }
  SUBCASE("a matrix with both strides > 1 is copied") {
    Tensor a = zeros({10, 14}, dt).slice(0, 0, 10, 2).slice(1, 0, 14, 2);
    a.copy_(rnd({5, 7}, dt, 3));
    const Tensor b = rnd({7, 3}, dt, 4);
    GemmSpy spy;
    const Tensor c = matmul(a, b);
    REQUIRE(spy.seen.size() == 1);
    CHECK(spy.seen[0].a.data_ptr() != a.data_ptr());
    CHECK(!spy.seen[0].trans_a);
    CHECK(spy.seen[0].lda == 7);
    CHECK(spy.seen[0].b.data_ptr() == b.data_ptr());
    check_close(c, ref_matmul(a, b), 1e-12);
  }
  SUBCASE("broadcast batch dims get stride 0") {
    const Tensor a = rnd({2, 1, 3, 4}, dt, 5), b = rnd({5, 4, 6}, dt, 6);
    GemmSpy spy;
    const Tensor c = matmul(a, b);
    REQUIRE(spy.seen.size() == 1);
    const GemmDesc& d = spy.seen[0];
    CHECK(d.batch == Shape{2, 5});
    CHECK(d.a_batch_strides == Shape{12, 0});
    CHECK(d.b_batch_strides == Shape{0, 24});
    CHECK(d.c_batch_strides == Shape{90, 18});
    CHECK(d.a.data_ptr() == a.data_ptr());
    CHECK(d.b.data_ptr() == b.data_ptr());
    check_close(c, ref_matmul(a, b), 1e-12);
  }
  SUBCASE("a stack against one matrix is one tall GEMM") {
    const Tensor x = rnd({4, 3, 5}, dt, 7), w = rnd({6, 5}, dt, 8);
    GemmSpy spy;
    const Tensor c = matmul(x, w.t());
    const Tensor y = linear(x, w);
    REQUIRE(spy.seen.size() == 2);
    for (const GemmDesc& d : spy.seen) {
      CHECK(d.batch.empty());
      CHECK(d.m == 12);
      CHECK(d.n == 6);
      CHECK(d.k == 5);
      CHECK(d.trans_b);
      CHECK(d.b.data_ptr() == w.data_ptr());
    }
    check_close(c, ref_matmul(x, w.t()), 1e-12);
    check_close(y, ref_matmul(x, w.t()), 1e-12);
  }
  SUBCASE("backward uses transposed views and folds the weight gradient") {
    const Tensor x = rnd({4, 3, 5}, dt, 9).requires_grad_(), w = rnd({6, 5}, dt, 10).requires_grad_();
    const Tensor y = linear(x, w);
    GemmSpy spy;
    sum(y).backward();
    REQUIRE(spy.seen.size() == 2);  // dx = dy W and dW = dy^T x, both one GEMM
    for (const GemmDesc& d : spy.seen) CHECK(d.batch.empty());
  }
  SUBCASE("a linear's [out] bias rides in the descriptor, written block by block") {
    // 600 x 500 outputs: more than one row block of C even on one thread.
    const Tensor x = rnd({2, 300, 8}, dt, 11), w = rnd({500, 8}, dt, 12), b = rnd({500}, dt, 13);
    GemmSpy spy;
    const Tensor y = linear(x, w, b);
    REQUIRE(spy.seen.size() == 1);
    CHECK(spy.seen[0].bias.data_ptr() == b.data_ptr());
    CHECK(spy.seen[0].beta == 0);
    check_close(y, add(ref_matmul(x, w.t()), b), 1e-12);
  }
}
