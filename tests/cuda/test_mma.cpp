// The warp-level tensor-core product of cuda/mma.cuh under the SIMT
// emulator: which lane holds which (row, col) of A, B, C and D (PTX's
// m16n8k16 fragment table, written out again here from the ISA's formulas),
// and D = A B + C against a plain matmul, in bfloat16 and float16. Values
// are small integers, exact in both 16-bit types and in float32 sums, so
// every check is exact.
//
// Beside it, the loads that feed it: ldmatrix x4 and x4.trans (which lane
// receives which element, known answers from an index-filled tile; an mma
// fed by them against a plain matmul) and cp.async (copies, zero fill, the
// emulator landing a group only at its wait, and the refusals of what a GPU
// does not allow).
#include <doctest/doctest.h>

#include <array>
#include <vector>

#include <ember/ember.h>
#include <ember/cuda/mma.cuh>

#include "../test_util.h"

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

namespace {

using test::contains;
using test::error_of;

template <class... P, class... A>
void run(void (*k)(P...), dim3 block, size_t smem, A&&... args) {
  ember::cuda::launch(__FILE__, __LINE__, "ldmatrix/cp.async test", k, dim3(1), block, smem, nullptr,
                      std::forward<A>(args)...);
}

// The 32 rows of 8 elements of a shared tile (16 bytes each) that the lanes
// address: lane l passes row perm(l), a scramble, so the answer shows that
// matrix m's row r comes from lane 8 m + r and nowhere else.
__host__ __device__ int perm(int l) { return (5 * l + 3) % 32; }
// Element c of row r of matrix m, as ldmatrix sees them: 256 m + 16 r + c.
uint16_t ld_value(int m, int r, int c) { return static_cast<uint16_t>(256 * m + 16 * r + c); }

// in: the 32 x 8 tile (row perm(8 m + r) holds matrix m's row r); out: each
// lane's four registers, plain then .trans.
__global__ void ldmatrix_kernel(const uint16_t* in, uint32_t* out) {
  EMBER_DYNAMIC_SHARED(uint16_t, tile);
  for (int i = static_cast<int>(threadIdx.x); i < 32 * 8; i += 32) tile[i] = in[i];
  __syncthreads();
  const int lane = static_cast<int>(threadIdx.x);
  uint32_t r[4], rt[4];
  ember::cuda::ldmatrix_x4(r, tile + 8 * perm(lane));
  ember::cuda::ldmatrix_x4_trans(rt, tile + 8 * perm(lane));
  for (int m = 0; m < 4; ++m) {
    out[8 * lane + m] = r[m];
    out[8 * lane + 4 + m] = rt[m];
  }
}

// D (16 x 16, two column blocks) = A B with A row-major in shared (row
// stride 24: padded, 16-byte rows), B given twice: as X = B^T row-major (k
// pairs adjacent: plain ldmatrix) and as B row-major (ldmatrix .trans).
// out: 2 x 32 lanes x 8 floats (the two column blocks' accumulators), for
// the X path then the .trans path.
template <MmaType M>
__global__ void ldmatrix_mma_kernel(const uint16_t* a, const uint16_t* bt, const uint16_t* b, float* out) {
  constexpr int ld = 24;
  EMBER_DYNAMIC_SHARED(uint16_t, smem);
  uint16_t *as = smem, *xs = smem + 16 * ld, *bs = smem + 32 * ld;
  for (int i = static_cast<int>(threadIdx.x); i < 256; i += 32) {
    as[(i / 16) * ld + i % 16] = a[i];
    xs[(i / 16) * ld + i % 16] = bt[i];
    bs[(i / 16) * ld + i % 16] = b[i];
  }
  __syncthreads();
  const int lane = static_cast<int>(threadIdx.x);
  uint32_t af[4], x[4], y[4];
  // A: lane l addresses row l % 16 at column 8 (l / 16).
  ember::cuda::ldmatrix_x4(af, as + (lane % 16) * ld + 8 * (lane / 16));
  // X = B^T: matrices (n 0-7, k 0-7), (n 0-7, k 8-15), (n 8-15, k 0-7), (n 8-15, k 8-15).
  ember::cuda::ldmatrix_x4(x, xs + (lane % 8 + 8 * (lane / 16)) * ld + 8 * ((lane / 8) % 2));
  // B: matrices (k 0-7, n 0-7), (k 8-15, n 0-7), (k 0-7, n 8-15), (k 8-15, n 8-15), transposed.
  ember::cuda::ldmatrix_x4_trans(y, bs + (lane % 16) * ld + 8 * (lane / 16));
  const uint32_t* frags[2] = {x, y};
  for (int path = 0; path < 2; ++path)
    for (int nb = 0; nb < 2; ++nb) {
      float d[4] = {0, 0, 0, 0};
      ember::cuda::mma_m16n8k16<M>(d, af, frags[path] + 2 * nb, d);
      for (int e = 0; e < 4; ++e) out[path * 256 + lane * 8 + nb * 4 + e] = d[e];
    }
}

// Copies n 16-byte chunks of src into shared (chunk i valid when i is not
// a multiple of 5, else zero filled) in two commit groups (even, odd
// chunks), then: after wait<1> (the even group done), after wait<0>.
// out: 2 x n x 8 elements.
__global__ void cp_async_kernel(const uint16_t* src, uint16_t* out, int n) {
  EMBER_DYNAMIC_SHARED(uint16_t, s);
  const int t = static_cast<int>(threadIdx.x);
  for (int i = t; i < 8 * n; i += static_cast<int>(blockDim.x)) s[i] = 0xFFFF;
  __syncthreads();
  for (int parity = 0; parity < 2; ++parity) {
    for (int i = 2 * t + parity; i < n; i += 2 * static_cast<int>(blockDim.x))
      ember::cuda::cp_async_16(s + 8 * i, src + 8 * i, i % 5 != 0);
    ember::cuda::cp_async_commit();
  }
  ember::cuda::cp_async_wait<1>();
  __syncthreads();
  for (int i = t; i < 8 * n; i += static_cast<int>(blockDim.x)) out[i] = s[i];
  __syncthreads();  // every thread has read before any lands its odd chunks
  ember::cuda::cp_async_wait<0>();
  __syncthreads();
  for (int i = t; i < 8 * n; i += static_cast<int>(blockDim.x)) out[8 * n + i] = s[i];
}

// What a GPU refuses: which = 0 a source off 16 bytes, 1 a destination off
// 16 bytes, 2 a destination outside shared memory, 3 an ldmatrix row off 16
// bytes, 4 an ldmatrix that half the warp never reaches.
__global__ void misuse_kernel(const uint16_t* src, uint16_t* global, int which) {
  EMBER_DYNAMIC_SHARED(uint16_t, s);
  uint32_t r[4];
  if (which == 0) ember::cuda::cp_async_16(s, src + 2, true);
  if (which == 1) ember::cuda::cp_async_16(s + 4, src, true);
  if (which == 2) ember::cuda::cp_async_16(global, src, true);
  if (which == 3) ember::cuda::ldmatrix_x4(r, s + 8 * (threadIdx.x % 8) + 4);
  if (which == 4 && threadIdx.x < 16) ember::cuda::ldmatrix_x4(r, s + 8 * (threadIdx.x % 8));
  ember::cuda::cp_async_wait<0>();
}

}  // namespace

TEST_CASE("cuda ldmatrix x4 and x4.trans: each lane receives PTX's elements of each 8 x 8 matrix") {
  std::vector<uint16_t> tile(32 * 8);
  for (int m = 0; m < 4; ++m)
    for (int r = 0; r < 8; ++r)
      for (int c = 0; c < 8; ++c) tile[8 * static_cast<size_t>(perm(8 * m + r)) + c] = ld_value(m, r, c);
  std::vector<uint32_t> out(32 * 8);
  run(ldmatrix_kernel, dim3(32), 32 * 8 * sizeof(uint16_t), tile.data(), out.data());
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane / 4, t = lane % 4;
    for (int m = 0; m < 4; ++m) {
      // Plain: row g, elements 2t and 2t + 1, the first in the low half.
      CHECK(out[8 * lane + m] == (ld_value(m, g, 2 * t) | uint32_t(ld_value(m, g, 2 * t + 1)) << 16));
      // .trans: the transpose's row g, i.e. column g of rows 2t and 2t + 1.
      CHECK(out[8 * lane + 4 + m] == (ld_value(m, 2 * t, g) | uint32_t(ld_value(m, 2 * t + 1, g)) << 16));
    }
  }
}

template <MmaType M>
void check_ldmatrix_mma() {
  float A[16][16], B[16][16];
  std::vector<uint16_t> a(256), bt(256), b(256);
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 16; ++j) {
      A[i][j] = static_cast<float>((3 * i + 7 * j) % 11 - 5);
      B[i][j] = static_cast<float>((5 * i + 2 * j) % 9 - 4) * 0.5f;
      a[16 * i + j] = static_cast<uint16_t>(ember::cuda::mma_bits<M>(A[i][j]));
      b[16 * i + j] = static_cast<uint16_t>(ember::cuda::mma_bits<M>(B[i][j]));
      bt[16 * j + i] = b[16 * i + j];
    }
  std::vector<float> out(512);
  run(ldmatrix_mma_kernel<M>, dim3(32), 48 * 24 * sizeof(uint16_t), a.data(), bt.data(), b.data(), out.data());
  int nonzero = 0;
  for (int path = 0; path < 2; ++path)
    for (int lane = 0; lane < 32; ++lane)
      for (int nb = 0; nb < 2; ++nb)
        for (int e = 0; e < 4; ++e) {
          const int row = lane / 4 + (e >= 2 ? 8 : 0), col = 8 * nb + 2 * (lane % 4) + e % 2;
          float s = 0;
          for (int k = 0; k < 16; ++k) s += A[row][k] * B[k][col];
          CHECK(out[path * 256 + lane * 8 + nb * 4 + e] == s);
          nonzero += s != 0;
        }
  CHECK(nonzero > 400);  // not vacuous
}

TEST_CASE("cuda ldmatrix feeding mma: A and B fragments (B^T plain, B .trans) give the plain matmul") {
  check_ldmatrix_mma<MmaType::BFloat16>();
  check_ldmatrix_mma<MmaType::Float16>();
}

TEST_CASE("cuda cp.async: 16-byte copies and zero fill land by commit group, at the wait") {
  const int n = 40;
  std::vector<uint16_t> src(8 * n), out(16 * n);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint16_t>(i + 1);
  run(cp_async_kernel, dim3(8), 8 * n * sizeof(uint16_t), src.data(), out.data(), n);
  for (int i = 0; i < n; ++i)
    for (int e = 0; e < 8; ++e) {
      const uint16_t want = i % 5 ? src[8 * i + e] : uint16_t(0);
      // After wait_group 1 the even chunks' group has landed; the odd ones'
      // has not here (the emulator lands a copy at the latest moment a GPU
      // may, so a kernel that reads before waiting fails its tests).
      CHECK(out[8 * i + e] == (i % 2 == 0 ? want : uint16_t(0xFFFF)));
      CHECK(out[8 * n + 8 * i + e] == want);  // after wait_group 0: all
    }
}

TEST_CASE("cuda cp.async and ldmatrix: the emulator refuses what a GPU does not allow") {
  std::vector<uint16_t> src(64, 1), global(64);
  auto misuse = [&](int which, unsigned threads = 32) {
    return error_of<ember::DeviceError>(
        [&] { run(misuse_kernel, dim3(threads), 256, src.data(), global.data(), which); });
  };
  CHECK(contains(misuse(0), "cp.async.cg: the source"));
  CHECK(contains(misuse(0), "not 16-byte aligned"));
  CHECK(contains(misuse(1), "cp.async.cg: the destination"));
  CHECK(contains(misuse(2), "dynamic shared memory"));
  CHECK(contains(misuse(3), "ldmatrix.m8n8.x4"));
  CHECK(contains(misuse(3), "16-byte-aligned"));
  CHECK(contains(misuse(4), "ldmatrix"));
  CHECK(contains(misuse(4, 16), "do not exist"));                                  // a warp of 16 lanes
  CHECK_NOTHROW(run(misuse_kernel, dim3(32), 256, src.data(), global.data(), 5));  // used rightly, it runs
}
