// The warp-level tensor-core product of cuda/mma.cuh under the SIMT
// emulator: which lane holds which (row, col) of A, B, C and D (PTX's
// m16n8k16 fragment table, written out again here from the ISA's formulas),
// and D = A B + C against a plain matmul, in bfloat16 and float16. Values
// are small integers, exact in both 16-bit types and in float32 sums, so
// every check is exact.
#include <doctest/doctest.h>

#include <array>
#include <vector>

#include <ember/ember.h>
#include <ember/cuda/mma.cuh>

namespace {

using ember::cuda::MmaType;

// PTX's fragments, g = lane / 4, t = lane % 4: A element i of 8 (register
// i / 2, half i % 2) is A[g + 8 ((i / 2) % 2)][2t + i % 2 + 8 (i >= 4)];
// B element i of 4 is B[2t + i % 2 + 8 (i >= 2)][g]; C element i of 4 is
// C[g + 8 (i >= 2)][2t + i % 2].
int a_row(int lane, int i) { return lane / 4 + ((i / 2) % 2 ? 8 : 0); }
int a_col(int lane, int i) { return 2 * (lane % 4) + i % 2 + (i >= 4 ? 8 : 0); }
int b_row(int lane, int i) { return 2 * (lane % 4) + i % 2 + (i >= 2 ? 8 : 0); }
int b_col(int lane, int) { return lane / 4; }
int c_row(int lane, int i) { return lane / 4 + (i >= 2 ? 8 : 0); }
int c_col(int lane, int i) { return 2 * (lane % 4) + i % 2; }

template <MmaType M>
__global__ void mma_kernel(const uint32_t* a, const uint32_t* b, const float* c, float* d) {
  const int lane = static_cast<int>(threadIdx.x % 32), warp = static_cast<int>(threadIdx.x / 32);
  const int base = warp * 32 + lane;  // each warp multiplies its own matrices
  float dd[4];
  ember::cuda::mma_m16n8k16<M>(dd, a + 4 * base, b + 2 * base, c + 4 * base);
  for (int e = 0; e < 4; ++e) d[4 * base + e] = dd[e];
}

using Mat16 = std::array<std::array<float, 16>, 16>;
using Mat8 = std::array<std::array<float, 8>, 16>;

// D = A B + C through the kernel, warp w taking A[w], B[w], C[w]; the
// fragments are packed here from the table above.
template <MmaType M>
std::vector<Mat8> run_mma(const std::vector<Mat16>& A, const std::vector<Mat8>& B, const std::vector<Mat8>& C) {
  const size_t warps = A.size();
  std::vector<uint32_t> a(warps * 32 * 4), b(warps * 32 * 2);
  std::vector<float> c(warps * 32 * 4), d(warps * 32 * 4);
  for (size_t w = 0; w < warps; ++w)
    for (int lane = 0; lane < 32; ++lane) {
      const size_t base = w * 32 + static_cast<size_t>(lane);
      for (int r = 0; r < 4; ++r) {
        const uint32_t lo = ember::cuda::mma_bits<M>(A[w][a_row(lane, 2 * r)][a_col(lane, 2 * r)]);
        const uint32_t hi = ember::cuda::mma_bits<M>(A[w][a_row(lane, 2 * r + 1)][a_col(lane, 2 * r + 1)]);
        a[4 * base + r] = ember::cuda::mma_pack(lo, hi);
        c[4 * base + r] = C[w][c_row(lane, r)][c_col(lane, r)];
      }
      for (int r = 0; r < 2; ++r) {
        const uint32_t lo = ember::cuda::mma_bits<M>(B[w][b_row(lane, 2 * r)][b_col(lane, 2 * r)]);
        const uint32_t hi = ember::cuda::mma_bits<M>(B[w][b_row(lane, 2 * r + 1)][b_col(lane, 2 * r + 1)]);
        b[2 * base + r] = ember::cuda::mma_pack(lo, hi);
      }
    }
  ember::cuda::launch(__FILE__, __LINE__, "mma test", mma_kernel<M>, dim3(1), dim3(static_cast<unsigned>(32 * warps)),
                      0, nullptr, a.data(), b.data(), c.data(), d.data());
  std::vector<Mat8> D(warps);
  for (size_t w = 0; w < warps; ++w)
    for (int lane = 0; lane < 32; ++lane)
      for (int e = 0; e < 4; ++e) D[w][c_row(lane, e)][c_col(lane, e)] = d[4 * (w * 32 + lane) + e];
  return D;
}

template <MmaType M>
void check_ownership() {
  // A = I, so D = B: lane (g, t) gets B[g][2t], B[g][2t+1], B[g+8][2t],
  // B[g+8][2t+1], and every B element reaches its place.
  Mat16 I{};
  Mat8 B{}, Z{};
  for (int i = 0; i < 16; ++i) I[i][i] = 1;
  for (int k = 0; k < 16; ++k)
    for (int n = 0; n < 8; ++n) B[k][n] = static_cast<float>(10 * k + n);
  const Mat8 D = run_mma<M>({I}, {B}, {Z})[0];
  for (int k = 0; k < 16; ++k)
    for (int n = 0; n < 8; ++n) CHECK(D[k][n] == 10 * k + n);
  // B selects a column of A: B[k][n] = 1 where k = n (shift 0) or k = n + 8
  // (shift 8), so D[r][n] = A[r][n + shift]: every A element reaches its place.
  Mat16 A{};
  for (int r = 0; r < 16; ++r)
    for (int k = 0; k < 16; ++k) A[r][k] = static_cast<float>(16 * (r % 8) + k - 60);  // |x| <= 127: exact
  for (int shift : {0, 8}) {
    Mat8 S{};
    for (int n = 0; n < 8; ++n) S[n + shift][n] = 1;
    const Mat8 Ds = run_mma<M>({A}, {S}, {Z})[0];
    for (int r = 0; r < 16; ++r)
      for (int n = 0; n < 8; ++n) CHECK(Ds[r][n] == A[r][n + shift]);
  }
  // A = 0: D = C, element for element (the accumulator's own layout).
  Mat16 O{};
  Mat8 C{};
  for (int r = 0; r < 16; ++r)
    for (int n = 0; n < 8; ++n) C[r][n] = static_cast<float>(100 * r + n) + 0.25f;
  const Mat8 Dc = run_mma<M>({O}, {B}, {C})[0];
  for (int r = 0; r < 16; ++r)
    for (int n = 0; n < 8; ++n) CHECK(Dc[r][n] == C[r][n]);
}

template <MmaType M>
void check_product() {
  // Four warps in one block, each with its own A, B, C (small integers and
  // quarters: exact in 16 bits and in float32 sums), against a plain matmul.
  std::vector<Mat16> A(4);
  std::vector<Mat8> B(4), C(4);
  for (int w = 0; w < 4; ++w) {
    for (int r = 0; r < 16; ++r)
      for (int k = 0; k < 16; ++k) A[w][r][k] = static_cast<float>((7 * r + 3 * k + 5 * w) % 9 - 4) * 0.5f;
    for (int k = 0; k < 16; ++k)
      for (int n = 0; n < 8; ++n) B[w][k][n] = static_cast<float>((5 * k + 11 * n + w) % 7 - 3);
    for (int r = 0; r < 16; ++r)
      for (int n = 0; n < 8; ++n) C[w][r][n] = static_cast<float>((r * n + w) % 5) - 2.25f;
  }
  const std::vector<Mat8> D = run_mma<M>(A, B, C);
  double nonzero = 0;
  for (int w = 0; w < 4; ++w)
    for (int r = 0; r < 16; ++r)
      for (int n = 0; n < 8; ++n) {
        float s = C[w][r][n];
        for (int k = 0; k < 16; ++k) s += A[w][r][k] * B[w][k][n];
        CHECK(D[w][r][n] == s);
        nonzero += s != 0;
      }
  CHECK(nonzero > 400);  // not vacuous
}

}  // namespace

TEST_CASE("cuda mma m16n8k16: each lane holds the (row, col) PTX gives it, bfloat16 and float16") {
  check_ownership<MmaType::BFloat16>();
  check_ownership<MmaType::Float16>();
}

TEST_CASE("cuda mma m16n8k16: D = A B + C against a plain matmul, four warps, bfloat16 and float16") {
  check_product<MmaType::BFloat16>();
  check_product<MmaType::Float16>();
}

TEST_CASE("cuda mma m16n8k16: inputs are rounded to the 16-bit type, sums stay float32") {
  // 1 + 2^-9 is 1 in bfloat16 (8 significand bits) and exact in float16
  // (11); the product of 16 such terms shows which rounding ran.
  std::vector<Mat16> A(1);
  std::vector<Mat8> B(1), C(1);
  for (int r = 0; r < 16; ++r)
    for (int k = 0; k < 16; ++k) A[0][r][k] = 1.0f + 1.0f / 512;
  for (int k = 0; k < 16; ++k)
    for (int n = 0; n < 8; ++n) B[0][k][n] = 1;
  CHECK(run_mma<MmaType::BFloat16>(A, B, C)[0][3][5] == 16.0f);
  CHECK(run_mma<MmaType::Float16>(A, B, C)[0][3][5] == 16.0f + 16.0f / 512);
  // An accumulator of 2^24 + 2 stays float32: adding 16 ones lands exactly.
  C[0][0][0] = 16777216.0f;
  CHECK(run_mma<MmaType::Float16>(A, B, C)[0][0][0] == 16777216.0f + 16.0f);
}
