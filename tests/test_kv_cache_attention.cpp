// kv_cache_attention (ops/kv_cache_attention.h) and index_copy_
// (ops/indexing.h), the two ops of a graph-captured decoding step: the CPU
// against a float64 reference over positions 1 .. S (one per row and
// shared), head dims 16 to 128, float32, float64, bfloat16 and float16;
// keys past the position never read; CUDA (the emulator here) against the
// CPU; both inside a CUDA graph, with the position changed between replays
// and a bad one reported by replay(); the errors.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include <ember/ember.h>

#include "test_util.h"

using namespace ember;

namespace {

// softmax(q k[0..p]^T / sqrt(D)) v[0..p] per row and head, in float64 on
// the inputs' values.
std::vector<double> reference(const Tensor& q, const Tensor& k, const Tensor& v, const std::vector<int64_t>& pos,
                              int64_t H) {
  const int64_t B = q.size(0), S = k.size(1), E = q.size(2), D = E / H;
  const std::vector<double> qv = q.cpu().to(DType::Float64).contiguous().to_vector<double>(),
                            kv = k.cpu().to(DType::Float64).contiguous().to_vector<double>(),
                            vv = v.cpu().to(DType::Float64).contiguous().to_vector<double>();
  std::vector<double> out(static_cast<size_t>(B * E));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t n = pos[pos.size() == 1 ? 0 : b] + 1;
      std::vector<double> s(static_cast<size_t>(n));
      double mx = -INFINITY, sum = 0;
      for (int64_t j = 0; j < n; ++j) {
        double dot = 0;
        for (int64_t d = 0; d < D; ++d) dot += qv[b * E + h * D + d] * kv[(b * S + j) * E + h * D + d];
        s[j] = dot / std::sqrt(static_cast<double>(D));
        mx = std::max(mx, s[j]);
      }
      for (double& x : s) sum += x = std::exp(x - mx);
      for (int64_t d = 0; d < D; ++d) {
        double acc = 0;
        for (int64_t j = 0; j < n; ++j) acc += s[j] * vv[(b * S + j) * E + h * D + d];
        out[b * E + h * D + d] = acc / sum;
      }
    }
  return out;
}

double max_diff(const Tensor& a, const std::vector<double>& b) {
  const std::vector<double> va = a.cpu().to(DType::Float64).contiguous().to_vector<double>();
  REQUIRE(va.size() == b.size());
  double m = 0;
  for (size_t i = 0; i < va.size(); ++i) m = std::max(m, std::abs(va[i] - b[i]));
  return m;
}

double max_diff(const Tensor& a, const Tensor& b) {
  return max_diff(a, b.cpu().to(DType::Float64).contiguous().to_vector<double>());
}

double tolerance(DType dt) {
  switch (dt) {
    case DType::Float64:
      return 1e-12;
    case DType::Float32:
      return 2e-6;
    case DType::Float16:
      return 2e-3;  // the output's rounding (values below 4)
    default:
      return 2e-2;  // bfloat16
  }
}

// A cache of S positions whose entries past the largest position are NaN:
// a kernel reading them would spread NaN into the output.
struct Case {
  Tensor q, k, v;
};
Case make_case(int64_t B, int64_t S, int64_t E, int64_t valid, DType dt, uint64_t seed) {
  Generator g(seed);
  Case c{randn({B, 1, E}, TensorOptions(), &g), randn({B, S, E}, TensorOptions(), &g),
         randn({B, S, E}, TensorOptions(), &g)};
  if (valid < S) {
    c.k.narrow(1, valid, S - valid).fill_(NAN);
    c.v.narrow(1, valid, S - valid).fill_(NAN);
  }
  c.q = c.q.to(dt), c.k = c.k.to(dt), c.v = c.v.to(dt);
  return c;
}

}  // namespace

TEST_CASE("kv_cache_attention: the CPU against a float64 reference, positions 1 .. S, keys past them unread") {
  for (const DType dt : {DType::Float32, DType::Float64, DType::BFloat16, DType::Float16})
    for (const int64_t D : {16, 24, 64, 128})
      for (const int64_t S : {1, 7, 70}) {
        const int64_t H = D == 128 ? 1 : 2, E = H * D;
        // Shared positions: the first key only, the middle, the last; per row: two different ones.
        const std::vector<std::vector<int64_t>> positions{{0}, {S / 2}, {S - 1}, {S - 1, S / 3}};
        for (const auto& pos : positions) {
          CAPTURE(dtype_name(dt));
          CAPTURE(D);
          CAPTURE(S);
          CAPTURE(pos[0]);
          const int64_t valid = *std::max_element(pos.begin(), pos.end()) + 1;
          const Case c = make_case(2, S, E, valid, dt, static_cast<uint64_t>(D + S));
          const Tensor p = from_vector(pos, {static_cast<int64_t>(pos.size())});
          const Tensor out = kv_cache_attention(c.q, c.k, c.v, p, H);
          CHECK(out.shape() == Shape{2, 1, E});
          CHECK(out.dtype() == dt);
          CHECK(max_diff(out, reference(c.q, c.k, c.v, pos, H)) < tolerance(dt));
        }
      }
}

TEST_CASE("kv_cache_attention: views with a unit last stride (a packed projection, a packed cache)") {
  Generator g(3);
  const int64_t B = 2, S = 9, E = 32, H = 2;
  const Tensor qkv = randn({B, 1, 3 * E}, TensorOptions(), &g), kv = randn({B, S, 2 * E}, TensorOptions(), &g);
  const Tensor q = qkv.narrow(2, 0, E), k = kv.narrow(2, 0, E), v = kv.narrow(2, E, E);
  const Tensor out = kv_cache_attention(q, k, v, from_vector(std::vector<int64_t>{4}, {1}), H);
  CHECK(max_diff(out, reference(q, k, v, {4}, H)) < 2e-6);
  CHECK(max_diff(out, kv_cache_attention(q.contiguous(), k.contiguous(), v.contiguous(),
                                         from_vector(std::vector<int64_t>{4}, {1}), H)) == 0.0);
}

TEST_CASE("kv_cache_attention: bad inputs are refused with the op named") {
  const Tensor q = zeros({2, 1, 8}), k = zeros({2, 5, 8}), v = zeros({2, 5, 8});
  auto pos = [](std::vector<int64_t> p) { return from_vector(p, {static_cast<int64_t>(p.size())}); };
  CHECK_THROWS_AS(kv_cache_attention(q, k, v, pos({5}), 2), IndexError);
  CHECK_THROWS_AS(kv_cache_attention(q, k, v, pos({-1}), 2), IndexError);
  CHECK_THROWS_AS(kv_cache_attention(q, k, v, pos({0, 1, 2}), 2), ShapeError);
  CHECK_THROWS_AS(kv_cache_attention(q, k, v, zeros({1}), 2), DTypeError);
  CHECK_THROWS_AS(kv_cache_attention(zeros({2, 2, 8}), k, v, pos({0}), 2), ShapeError);
  CHECK_THROWS_AS(kv_cache_attention(q, k, v, pos({0}), 3), ValueError);
  Tensor qg = zeros({2, 1, 8}).requires_grad_(true);
  std::string what;
  try {
    (void)kv_cache_attention(qg, k, v, pos({0}), 2);
  } catch (const AutogradError& e) {
    what = e.what();
  }
  CHECK(what.find("kv_cache_attention") != std::string::npos);
  CHECK(what.find("inference only") != std::string::npos);
  NoGradGuard ng;  // without grad mode it runs
  CHECK(kv_cache_attention(qg, k, v, pos({0}), 2).size(2) == 8);
}

TEST_CASE("index_copy_: rows written in place, the rest untouched, on any strides") {
  Tensor x = arange(24.0, TensorOptions(DType::Float32)).reshape({2, 4, 3});
  const Tensor src = mul(ones({2, 2, 3}), -1.0);
  index_copy_(x, 1, from_vector(std::vector<int64_t>{3, 0}, {2}), src);
  const std::vector<float> got = x.to_vector<float>();
  for (int64_t a = 0; a < 2; ++a)
    for (int64_t n = 0; n < 4; ++n)
      for (int64_t b = 0; b < 3; ++b) {
        const float want = n == 0 || n == 3 ? -1.0f : static_cast<float>((a * 4 + n) * 3 + b);
        CHECK(got[(a * 4 + n) * 3 + b] == want);
      }
  // A repeated index: the last slice wins; dim -1; a 0-d index.
  Tensor y = zeros({2, 3});
  index_copy_(y, -1, from_vector(std::vector<int64_t>{1, 1}, {2}), from_vector(std::vector<float>{1, 2, 3, 4}, {2, 2}));
  CHECK(y.to_vector<float>() == std::vector<float>{0, 2, 0, 0, 4, 0});
  index_copy_(y, 0, full({}, 1.0, TensorOptions(DType::Int64)), full({1, 3}, 7.0));
  CHECK(y.to_vector<float>() == std::vector<float>{0, 2, 0, 7, 7, 7});
  // A view whose dims after dim do not merge (through a contiguous copy), and
  // a narrowed view (written in place through its strides).
  Tensor base = zeros({2, 3, 5, 4});
  Tensor t = base.transpose(2, 3);  // (2, 3, 4, 5), dims 2 and 3 do not merge
  const Tensor s4 = randn({2, 1, 4, 5});
  index_copy_(t, 1, from_vector(std::vector<int64_t>{2}, {1}), s4);
  CHECK(max(abs(sub(base.transpose(2, 3).narrow(1, 2, 1), s4))).item<double>() == 0.0);
  CHECK(max(abs(base.narrow(1, 0, 2))).item<double>() == 0.0);
  Tensor kv = zeros({1, 4, 6});
  Tensor k = kv.narrow(2, 0, 3);
  index_copy_(k, 1, from_vector(std::vector<int64_t>{2}, {1}), ones({1, 1, 3}));
  CHECK(sum(kv).item<double>() == 3.0);
  CHECK(sum(kv.narrow(1, 2, 1).narrow(2, 0, 3)).item<double>() == 3.0);
}

TEST_CASE("index_copy_: bad inputs are refused with the op named") {
  Tensor x = zeros({3, 2});
  auto idx = [](std::vector<int64_t> p) { return from_vector(p, {static_cast<int64_t>(p.size())}); };
  CHECK_THROWS_AS(index_copy_(x, 0, idx({3}), zeros({1, 2})), IndexError);
  CHECK_THROWS_AS(index_copy_(x, 0, idx({0}), zeros({2, 2})), ShapeError);
  CHECK_THROWS_AS(index_copy_(x, 0, idx({0}), zeros({1, 3})), ShapeError);
  CHECK_THROWS_AS(index_copy_(x, 0, idx({0}), zeros({1, 2}, TensorOptions(DType::Float64))), DTypeError);
  CHECK_THROWS_AS(index_copy_(x, 0, zeros({1}), zeros({1, 2})), DTypeError);
  CHECK_THROWS_AS(index_copy_(x, 2, idx({0}), zeros({1, 2})), IndexError);  // no dim 2
  Tensor w = zeros({3, 2}).requires_grad_(true);
  CHECK_THROWS_AS(index_copy_(w, 0, idx({0}), zeros({1, 2})), AutogradError);
  CHECK(max(abs(x)).item<double>() == 0.0);  // nothing was written
}

TEST_CASE("kv_cache_attention and index_copy_ on CUDA give the CPU's results") {
  if (!test::cuda_usable()) return;
  const Device cuda("cuda");
  for (const DType dt : {DType::Float32, DType::Float64, DType::BFloat16, DType::Float16})
    for (const int64_t D : {16, 40, 128})
      // 300 keys: every warp's second round of 32-key tiles (8 warps x 32 = 256 per round).
      for (const int64_t S : {1, 33, 300}) {
        CAPTURE(dtype_name(dt));
        CAPTURE(D);
        CAPTURE(S);
        const int64_t H = D == 128 ? 1 : 2, E = H * D;
        for (const std::vector<int64_t>& pos : std::vector<std::vector<int64_t>>{{S - 1}, {0, S / 2}}) {
          const int64_t valid = *std::max_element(pos.begin(), pos.end()) + 1;
          const Case c = make_case(2, S, E, valid, dt, static_cast<uint64_t>(3 * D + S));
          const Tensor p = from_vector(pos, {static_cast<int64_t>(pos.size())});
          const Tensor cpu = kv_cache_attention(c.q, c.k, c.v, p, H);
          const Tensor dev = kv_cache_attention(c.q.to(cuda), c.k.to(cuda), c.v.to(cuda), p.to(cuda), H);
          CHECK(dev.device() == cuda);
          // The same float32 (float64) arithmetic in another order; 16-bit: one output rounding apart.
          const double tol = dt == DType::Float64 ? 1e-12 : dt == DType::Float32 ? 2e-6 : 2 * tolerance(dt);
          CHECK(max_diff(dev, cpu) < tol);
          CHECK(max_diff(dev, reference(c.q, c.k, c.v, pos, H)) < tolerance(dt));
        }
        Tensor xc = zeros({2, S, E}, TensorOptions(dt)), xd = xc.to(cuda);
        const Tensor src = randn({2, 1, E}).to(dt), at = from_vector(std::vector<int64_t>{S - 1}, {1});
        index_copy_(xc, 1, at, src);
        index_copy_(xd, 1, at.to(cuda), src.to(cuda));
        CHECK(max_diff(xd, xc) == 0.0);
      }
  CHECK_THROWS_AS(
      kv_cache_attention(zeros({1, 1, 8}, TensorOptions(cuda)), zeros({1, 3, 8}, TensorOptions(cuda)),
                         zeros({1, 3, 8}, TensorOptions(cuda)), from_vector(std::vector<int64_t>{3}, {1}).to(cuda), 2),
      IndexError);
  Tensor xd = zeros({2, 3}, TensorOptions(cuda));
  CHECK_THROWS_AS(index_copy_(xd, 0, from_vector(std::vector<int64_t>{2}, {1}).to(cuda), zeros({1, 3}).to(cuda)),
                  IndexError);
}

TEST_CASE("cuda graph: index_copy_ and kv_cache_attention read the position at each replay") {
  if (!test::cuda_usable()) return;
  const Device cuda("cuda");
  Generator g(8);
  const int64_t S = 40, E = 16, H = 2;
  const Tensor kv_cpu = randn({1, S, 2 * E}, TensorOptions(), &g);
  Tensor kv = kv_cpu.to(cuda), pos = zeros({1}, TensorOptions(DType::Int64, cuda)),
         row = zeros({1, 1, 3 * E}, TensorOptions(cuda)), out;
  auto step = [&] {
    index_copy_(kv, 1, pos, row.narrow(2, E, 2 * E));
    out = kv_cache_attention(row.narrow(2, 0, E), kv.narrow(2, 0, E), kv.narrow(2, E, E), pos, H);
  };
  step();  // warm-up
  CudaGraph graph;
  graph.capture(cuda, step);
  REQUIRE(graph.captured());
  // index_copy_, the two key ranges of the 40-key cache, their merge; no index check inside the graph
  CHECK(graph.captured_launches() == 3);
  Tensor want_kv = kv.cpu();  // the warm-up wrote row 0
  for (const int64_t p : {3, 17, 39, 5}) {
    CAPTURE(p);
    const Tensor r = randn({1, 1, 3 * E}, TensorOptions(), &g);
    row.copy_(r.to(cuda));
    pos.copy_(from_vector(std::vector<int64_t>{p}, {1}).to(cuda));
    graph.replay();
    Tensor wk = want_kv;
    index_copy_(wk, 1, from_vector(std::vector<int64_t>{p}, {1}), r.narrow(2, E, 2 * E));
    CHECK(max_diff(kv, want_kv) == 0.0);
    const Tensor want = kv_cache_attention(r.narrow(2, 0, E), want_kv.narrow(2, 0, E), want_kv.narrow(2, E, E),
                                           from_vector(std::vector<int64_t>{p}, {1}), H);
    CHECK(max_diff(out, want) < 2e-6);
  }
  // A position past the cache: the replay reports it (and wrote nothing out of bounds).
  pos.copy_(from_vector(std::vector<int64_t>{S}, {1}).to(cuda));
  std::string what;
  try {
    graph.replay();
  } catch (const IndexError& e) {
    what = e.what();
  }
  INFO(what);
  CHECK(what.find("index 40 is out of range for size 40") != std::string::npos);
  CHECK(what.find("kv_cache_attention") != std::string::npos);
  CHECK(max_diff(kv, want_kv) == 0.0);
}
