// The 16-bit float dtypes (core/half.h, ops/convert.h): conversions checked
// exhaustively over all 65,536 bit patterns both ways and against PyTorch's
// rounding (tests/fixtures/half_rounding.txt, tools/make_half_fixture.py),
// the vector paths against the scalar ones, promotion against
// torch.result_type (tools/reference_half.py), and the dtype plumbing:
// names, sizes, printing, to(dtype), factories.
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>

#include <ember/ops/convert.h>
#include <ember/ops/pointwise.h>

#include "test_util.h"

using namespace ember;

namespace {
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
// float16's value from its fields, in double (exact), as the IEEE standard defines it.
double f16_reference(uint16_t h) {
  const int e = (h >> 10) & 0x1F, m = h & 0x3FF;
  const double s = (h & 0x8000) ? -1.0 : 1.0;
  if (e == 0x1F) return m ? NAN : s * INFINITY;
  if (e == 0) return s * std::ldexp(static_cast<double>(m), -24);
  return s * std::ldexp(static_cast<double>(1024 + m), e - 25);
}
}  // namespace

TEST_CASE("half: every bfloat16 bit pattern converts to float32 exactly and back") {
  std::vector<bfloat16> all(65536);
  for (uint32_t b = 0; b < 65536; ++b) all[b] = bfloat16::from_bits(static_cast<uint16_t>(b));
  std::vector<float> wide(65536), wide_vec(65536);
  cpu::bf16_to_float(all.data(), wide.data(), 65536, /*use_vector=*/false);
  cpu::bf16_to_float(all.data(), wide_vec.data(), 65536);
  std::vector<bfloat16> back(65536), back_vec(65536);
  cpu::float_to_bf16(wide.data(), back.data(), 65536, false);
  cpu::float_to_bf16(wide.data(), back_vec.data(), 65536);
  int bad = 0;
  for (uint32_t b = 0; b < 65536; ++b) {
    const float f = wide[b];
    bad += bits_of(f) != b << 16;  // exact: the upper half of the float32
    bad += bits_of(wide_vec[b]) != bits_of(f);
    if (std::isnan(f))
      bad += back[b].x != 0x7FC0 || back_vec[b].x != 0x7FC0;  // PyTorch's quiet NaN
    else
      bad += back[b].x != b || back_vec[b].x != b;
  }
  CHECK(bad == 0);
}

TEST_CASE("half: every float16 bit pattern converts to float32 exactly and back") {
  std::vector<float16> all(65536);
  for (uint32_t b = 0; b < 65536; ++b) all[b] = float16::from_bits(static_cast<uint16_t>(b));
  std::vector<float> wide(65536), wide_vec(65536);
  cpu::f16_to_float(all.data(), wide.data(), 65536, false);
  cpu::f16_to_float(all.data(), wide_vec.data(), 65536);
  std::vector<float16> back(65536), back_vec(65536);
  cpu::float_to_f16(wide.data(), back.data(), 65536, false);
  cpu::float_to_f16(wide.data(), back_vec.data(), 65536);
  int bad = 0, nans = 0, subnormals = 0;
  for (uint32_t b = 0; b < 65536; ++b) {
    const double want = f16_reference(static_cast<uint16_t>(b));
    const float f = wide[b];
    bad += bits_of(wide_vec[b]) != bits_of(f);  // F16C agrees bit for bit, NaNs included
    if (std::isnan(want)) {
      ++nans;
      // NaN stays NaN, quiet, sign and payload kept; back it is sign | 0x7E00.
      bad += !std::isnan(f) || bits_of(f) != (((b & 0x8000u) << 16) | 0x7FC00000u | ((b & 0x3FFu) << 13));
      bad += back[b].x != ((b & 0x8000u) | 0x7E00u) || back_vec[b].x != back[b].x;
    } else {
      subnormals += (b & 0x7C00u) == 0 && (b & 0x3FFu) != 0;
      bad += static_cast<double>(f) != want || std::signbit(f) != bool(b & 0x8000u);
      bad += back[b].x != b || back_vec[b].x != b;
    }
  }
  CHECK(bad == 0);
  CHECK(nans == 2 * 1023);
  CHECK(subnormals == 2 * 1023);
}

TEST_CASE("half: rounding from float32 equals PyTorch's at the rounding boundaries") {
  std::ifstream in(std::string(EMBER_FIXTURE_DIR) + "/half_rounding.txt");
  REQUIRE(in);
  std::vector<float> x;
  std::vector<uint16_t> want_bf, want_h;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream ls(line);
    uint32_t b, bf, h;
    ls >> std::hex >> b >> bf >> h;
    REQUIRE(ls);
    x.push_back(float_of(b));
    want_bf.push_back(static_cast<uint16_t>(bf));
    want_h.push_back(static_cast<uint16_t>(h));
  }
  REQUIRE(x.size() > 3000);
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<bfloat16> bf_vec(x.size());
  std::vector<float16> h_vec(x.size());
  cpu::float_to_bf16(x.data(), bf_vec.data(), n);
  cpu::float_to_f16(x.data(), h_vec.data(), n);
  int bad = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const bool ok = bfloat16(x[i]).x == want_bf[i] && bf_vec[i].x == want_bf[i] && float16(x[i]).x == want_h[i] &&
                    h_vec[i].x == want_h[i];
    if (!ok && ++bad <= 5)
      MESSAGE("float32 0x", std::hex, bits_of(x[i]), ": bf16 ", bfloat16(x[i]).x, "/", bf_vec[i].x, " want ",
              want_bf[i], ", f16 ", float16(x[i]).x, "/", h_vec[i].x, " want ", want_h[i]);
  }
  CHECK(bad == 0);
  // Spot checks a reader can verify by hand.
  CHECK(bfloat16(1.0f).x == 0x3F80);
  CHECK(bfloat16(float_of(0x3F808000)).x == 0x3F80);  // halfway, even kept part: down
  CHECK(bfloat16(float_of(0x3F818000)).x == 0x3F82);  // halfway, odd kept part: up
  CHECK(float16(65504.0f).x == 0x7BFF);
  CHECK(float16(65519.0f).x == 0x7BFF);
  CHECK(float16(65520.0f).x == 0x7C00);  // halfway to 65536 with an odd lsb: Inf
  CHECK(float16(std::ldexp(1.0f, -24)).x == 0x0001);
  CHECK(float16(std::ldexp(1.0f, -25)).x == 0x0000);  // halfway to the smallest subnormal: even (0)
}

TEST_CASE("half: vector and scalar conversions agree on random float32 bit patterns") {
  std::mt19937 rng(19);
  std::vector<float> x(1 << 20);
  for (size_t i = 0; i < x.size(); ++i) {
    uint32_t u = rng();
    if (i % 7 == 0) u &= 0x807FFFFFu;   // float32 subnormals
    if (i % 11 == 0) u |= 0x7F800000u;  // Inf and NaNs
    x[i] = float_of(u);
  }
  const int64_t n = static_cast<int64_t>(x.size()) - 5;  // a tail that is not a multiple of 16
  std::vector<bfloat16> bs(x.size()), bv(x.size());
  std::vector<float16> hs(x.size()), hv(x.size());
  cpu::float_to_bf16(x.data(), bs.data(), n, false);
  cpu::float_to_bf16(x.data(), bv.data(), n);
  cpu::float_to_f16(x.data(), hs.data(), n, false);
  cpu::float_to_f16(x.data(), hv.data(), n);
  int bad = 0;
  for (int64_t i = 0; i < n; ++i) bad += bs[i].x != bv[i].x || hs[i].x != hv[i].x;
  CHECK(bad == 0);
  MESSAGE("vector paths: avx512_bf16 ", cpu::convert_paths().avx512_bf16, ", avx512 f16 ",
          cpu::convert_paths().avx512_f16);
}

TEST_CASE("half: dtype names, sizes and PyTorch's promotion (torch.result_type)") {
  CHECK(std::string(dtype_name(kBFloat16)) == "bfloat16");
  CHECK(std::string(dtype_name(kFloat16)) == "float16");
  CHECK(itemsize(kBFloat16) == 2);
  CHECK(itemsize(kFloat16) == 2);
  CHECK(is_floating(kBFloat16));
  CHECK(is_floating(kFloat16));
  struct Row {
    DType a, b;
    DType r[4];  // a, b both 1-dim; b 0-dim; a 0-dim; both 0-dim
  };
  // tools/reference_half.py
  const Row rows[] = {
      {kBool, kBool, {kBool, kBool, kBool, kBool}},
      {kBool, kInt64, {kInt64, kInt64, kInt64, kInt64}},
      {kBool, kBFloat16, {kBFloat16, kBFloat16, kBFloat16, kBFloat16}},
      {kBool, kFloat16, {kFloat16, kFloat16, kFloat16, kFloat16}},
      {kBool, kFloat32, {kFloat32, kFloat32, kFloat32, kFloat32}},
      {kBool, kFloat64, {kFloat64, kFloat64, kFloat64, kFloat64}},
      {kInt64, kBool, {kInt64, kInt64, kInt64, kInt64}},
      {kInt64, kInt64, {kInt64, kInt64, kInt64, kInt64}},
      {kInt64, kBFloat16, {kBFloat16, kBFloat16, kBFloat16, kBFloat16}},
      {kInt64, kFloat16, {kFloat16, kFloat16, kFloat16, kFloat16}},
      {kInt64, kFloat32, {kFloat32, kFloat32, kFloat32, kFloat32}},
      {kInt64, kFloat64, {kFloat64, kFloat64, kFloat64, kFloat64}},
      {kBFloat16, kBool, {kBFloat16, kBFloat16, kBFloat16, kBFloat16}},
      {kBFloat16, kInt64, {kBFloat16, kBFloat16, kBFloat16, kBFloat16}},
      {kBFloat16, kBFloat16, {kBFloat16, kBFloat16, kBFloat16, kBFloat16}},
      {kBFloat16, kFloat16, {kFloat32, kBFloat16, kFloat16, kFloat32}},
      {kBFloat16, kFloat32, {kFloat32, kBFloat16, kFloat32, kFloat32}},
      {kBFloat16, kFloat64, {kFloat64, kBFloat16, kFloat64, kFloat64}},
      {kFloat16, kBool, {kFloat16, kFloat16, kFloat16, kFloat16}},
      {kFloat16, kInt64, {kFloat16, kFloat16, kFloat16, kFloat16}},
      {kFloat16, kBFloat16, {kFloat32, kFloat16, kBFloat16, kFloat32}},
      {kFloat16, kFloat16, {kFloat16, kFloat16, kFloat16, kFloat16}},
      {kFloat16, kFloat32, {kFloat32, kFloat16, kFloat32, kFloat32}},
      {kFloat16, kFloat64, {kFloat64, kFloat16, kFloat64, kFloat64}},
      {kFloat32, kBool, {kFloat32, kFloat32, kFloat32, kFloat32}},
      {kFloat32, kInt64, {kFloat32, kFloat32, kFloat32, kFloat32}},
      {kFloat32, kBFloat16, {kFloat32, kFloat32, kBFloat16, kFloat32}},
      {kFloat32, kFloat16, {kFloat32, kFloat32, kFloat16, kFloat32}},
      {kFloat32, kFloat32, {kFloat32, kFloat32, kFloat32, kFloat32}},
      {kFloat32, kFloat64, {kFloat64, kFloat32, kFloat64, kFloat64}},
      {kFloat64, kBool, {kFloat64, kFloat64, kFloat64, kFloat64}},
      {kFloat64, kInt64, {kFloat64, kFloat64, kFloat64, kFloat64}},
      {kFloat64, kBFloat16, {kFloat64, kFloat64, kBFloat16, kFloat64}},
      {kFloat64, kFloat16, {kFloat64, kFloat64, kFloat16, kFloat64}},
      {kFloat64, kFloat32, {kFloat64, kFloat64, kFloat32, kFloat64}},
      {kFloat64, kFloat64, {kFloat64, kFloat64, kFloat64, kFloat64}},
  };
  for (const Row& row : rows) {
    for (int k = 0; k < 4; ++k) {
      const bool a0 = k >= 2, b0 = k == 1 || k == 3;
      const Tensor a = a0 ? zeros({}, row.a) : zeros({2}, row.a);
      const Tensor b = b0 ? zeros({}, row.b) : zeros({2}, row.b);
      CHECK_MESSAGE(result_type(a, b) == row.r[k], dtype_name(row.a), (a0 ? " 0-dim" : ""), " with ", dtype_name(row.b),
                    (b0 ? " 0-dim" : ""));
    }
  }
}

TEST_CASE("half: tensors of bfloat16 and float16: factories, to(dtype), printing, element access") {
  for (DType dt : {kBFloat16, kFloat16}) {
    CAPTURE(dtype_name(dt));
    const Tensor t = tensor({1.0, -2.5, 0.1, 3e4}, dt);
    CHECK(t.dtype() == dt);
    CHECK(t.element_size() == 2);
    // 0.1 rounds: bfloat16 to 0.10009765625, float16 to 0.0999755859375.
    const std::vector<double> v = t.to_vector<double>();
    CHECK(v[0] == 1.0);
    CHECK(v[1] == -2.5);
    CHECK(v[2] == (dt == kBFloat16 ? 0.10009765625 : 0.0999755859375));
    CHECK(v[3] == (dt == kBFloat16 ? 29952.0 : 30000.0));
    CHECK(t.to(kFloat32).to(dt).to_vector<double>() == v);
    CHECK(t.to(kFloat64).to_vector<double>() == v);
    CHECK(t.to(kInt64).to_vector<int64_t>() == std::vector<int64_t>{1, -2, 0, dt == kBFloat16 ? 29952 : 30000});
    CHECK(test::contains(t.str(), std::string("dtype=") + dtype_name(dt)));
    CHECK(sum(ones({3}, dt)).item<double>() == 3.0);
    CHECK(full({2, 2}, 0.1, dt).at<double>({1, 1}) == v[2]);
    CHECK(arange(4, dt).to_vector<double>() == std::vector<double>{0, 1, 2, 3});
    const Tensor r = randn({1000}, dt);
    CHECK(r.dtype() == dt);
    const double mu = mean(r.to(kFloat64)).item<double>();
    CHECK(std::fabs(mu) < 0.15);
    // A strided (transposed) conversion takes the generic loop, a contiguous
    // one the vector path: the same values.
    const Tensor m = randn({33, 17});
    CHECK(m.t().to(dt).to(kFloat32).t().to_vector<float>() == m.to(dt).to(kFloat32).to_vector<float>());
  }
  // Overflow: float16 saturates to Inf past 65504, bfloat16 keeps float32's range.
  CHECK(std::isinf(tensor({1e5}).to(kFloat16).item<float>()));
  CHECK(tensor({1e5}).to(kBFloat16).item<float>() == 99840.0f);
}
