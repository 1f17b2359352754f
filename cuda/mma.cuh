/// \file
/// One warp-level tensor-core product, D = A B + C, with A 16 x 16 and B
/// 16 x 8 in bfloat16 or float16 and C, D 16 x 8 in float32: PTX's
/// mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}.{bf16,f16}.f32. On a GPU
/// of compute capability 8.0 or later it is that instruction; under the SIMT
/// emulator (and on older GPUs) an equivalent gathers the warp's fragments
/// and multiplies in float32, handing each lane exactly the elements the
/// instruction hands it, so kernels built on it test their index arithmetic
/// on the emulator.
///
/// The fragments (PTX ISA, "Matrix Fragments for mma.m16n8k16"), with
/// g = lane / 4 and t = lane % 4; each 32-bit register holds two 16-bit
/// elements, the lower-numbered column (A, C) or row (B) in its low half:
/// \code
///   A (row-major 16 x 16): a[0] = A[g][2t, 2t+1]      a[1] = A[g+8][2t, 2t+1]
///                          a[2] = A[g][2t+8, 2t+9]    a[3] = A[g+8][2t+8, 2t+9]
///   B (16 x 8, k by n):    b[0] = B[2t, 2t+1][g]      b[1] = B[2t+8, 2t+9][g]
///   C, D (16 x 8 float):   c[0] = C[g][2t]  c[1] = C[g][2t+1]
///                          c[2] = C[g+8][2t]  c[3] = C[g+8][2t+1]
/// \endcode
/// Every lane of the warp must call it together (it is a warp collective).
///
/// Beside it, the two ways FlashAttention 2 feeds it from shared memory:
/// ldmatrix (four 8 x 8 matrices of 16-bit elements from shared memory into
/// fragments, transposed or not) and cp.async (16-byte copies from global to
/// shared memory that run while the warp computes, completed by commit and
/// wait groups). On a GPU they are those instructions; under the emulator
/// equivalents hand each lane the instruction's elements and refuse what the
/// instruction does not allow (see each).
#pragma once

#include <cstdint>

#include <ember/core/error.h>
#include <ember/cuda/common.h>
#if defined(EMBER_CUDA_EMULATE)
#include <ember/cuda/emu/async_copy.h>
#endif

namespace ember::cuda {

/// Which 16-bit input type an mma takes.
enum class MmaType { BFloat16, Float16 };

/// The 16-bit bits of a float, rounded to nearest even (the two types' own
/// conversions), and back.
///@{
template <MmaType M>
__device__ __forceinline__ uint32_t mma_bits(float x) {
  if constexpr (M == MmaType::BFloat16)
    return __bfloat16_as_ushort(__float2bfloat16_rn(x));
  else
    return __half_as_ushort(__float2half_rn(x));
}
template <MmaType M>
__device__ __forceinline__ float mma_float(uint32_t bits) {
  if constexpr (M == MmaType::BFloat16)
    return __bfloat162float(__ushort_as_bfloat16(static_cast<unsigned short>(bits)));
  else
    return __half2float(__ushort_as_half(static_cast<unsigned short>(bits)));
}
///@}

/// Two 16-bit patterns in one register: lo in bits 0-15, hi in 16-31.
__device__ __forceinline__ uint32_t mma_pack(uint32_t lo, uint32_t hi) { return (lo & 0xFFFFu) | (hi << 16); }

#if !defined(EMBER_CUDA_EMULATE) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define EMBER_MMA_HARDWARE 1
#else
#define EMBER_MMA_HARDWARE 0
#endif

#if !EMBER_MMA_HARDWARE
namespace mma_detail {
// The lane's index in its warp and the warp's in its block.
__device__ __forceinline__ unsigned linear_thread() {
  return threadIdx.x + threadIdx.y * blockDim.x + threadIdx.z * blockDim.x * blockDim.y;
}

// The warp's operands, one row per lane, in a scratch shared by the warp:
// under the emulator `__shared__` is per block, and a block's 32 warps at
// most each take their own row.
struct WarpOperands {
  uint32_t a[32][4], b[32][2];
};

// D = A B + C for the calling lane's four elements, after every lane of the
// warp has published its fragments; float32 products and sums (the
// hardware's accumulation is float32 too, in an order of its own).
template <MmaType M>
__device__ __forceinline__ void emulated(float d[4], const uint32_t a[4], const uint32_t b[2], const float c[4]) {
  __shared__ WarpOperands scratch[32];
  const unsigned linear = linear_thread();
  const int lane = static_cast<int>(linear % 32);
  WarpOperands& w = scratch[linear / 32];
  for (int r = 0; r < 4; ++r) w.a[lane][r] = a[r];
  for (int r = 0; r < 2; ++r) w.b[lane][r] = b[r];
  __syncwarp();
  // A[row][k]: held by lane 4 * (row % 8) + (k % 8) / 2, register
  // (row >= 8) + 2 (k >= 8), half k % 2. B[k][n]: lane 4 n + (k % 8) / 2,
  // register k >= 8, half k % 2.
  auto a_at = [&](int row, int k) {
    const uint32_t r = w.a[4 * (row % 8) + (k % 8) / 2][(row >= 8 ? 1 : 0) + (k >= 8 ? 2 : 0)];
    return mma_float<M>(k % 2 ? r >> 16 : r & 0xFFFFu);
  };
  auto b_at = [&](int k, int n) {
    const uint32_t r = w.b[4 * n + (k % 8) / 2][k >= 8 ? 1 : 0];
    return mma_float<M>(k % 2 ? r >> 16 : r & 0xFFFFu);
  };
  const int g = lane / 4, t = lane % 4;
  for (int e = 0; e < 4; ++e) {
    const int row = g + (e >= 2 ? 8 : 0), col = 2 * t + e % 2;
    float s = 0.0f;
    for (int k = 0; k < 16; ++k) s += a_at(row, k) * b_at(k, col);
    d[e] = s + c[e];
  }
  __syncwarp();  // every lane has read the scratch before the next mma writes it
}

// ldmatrix's x4 through the warp's scratch: lanes 8m .. 8m + 7 hold the row
// addresses of matrix m; register m of lane l is row l / 4, elements
// 2 (l % 4) and 2 (l % 4) + 1 of matrix m (low half first), or with Trans
// of its transpose: elements [2 (l % 4)][l / 4] and [2 (l % 4) + 1][l / 4].
template <bool Trans>
__device__ __forceinline__ void ldmatrix_emulated(uint32_t (&r)[4], const uint16_t* row) {
  __shared__ const uint16_t* scratch[32][32];
  const unsigned linear = linear_thread();
  const int lane = static_cast<int>(linear % 32);
#if defined(EMBER_CUDA_EMULATE)
  EMBER_CHECK(reinterpret_cast<uintptr_t>(row) % 16 == 0 && ::ember::emu::in_dynamic_shared(row, 16), DeviceError,
              "CUDA emulator: ldmatrix.m8n8.x4", Trans ? ".trans" : "", ": lane ", lane, "'s row address ",
              reinterpret_cast<uintptr_t>(row),
              " is not a 16-byte-aligned row of 8 elements in the block's dynamic shared memory");
#endif
  const uint16_t** rows = scratch[linear / 32];
  rows[lane] = row;
#if defined(EMBER_CUDA_EMULATE)
  ::ember::emu::warp_collective("ldmatrix (every lane of the warp takes part)");
#else
  __syncwarp();
#endif
  const int g = lane / 4, t = lane % 4;
  for (int m = 0; m < 4; ++m) {
    if constexpr (Trans)
      r[m] = mma_pack(rows[8 * m + 2 * t][g], rows[8 * m + 2 * t + 1][g]);
    else
      r[m] = mma_pack(rows[8 * m + g][2 * t], rows[8 * m + g][2 * t + 1]);
  }
  __syncwarp();  // every lane has read the scratch before the next ldmatrix writes it
}
}  // namespace mma_detail
#endif

/// d = A b + c over the warp (the file comment has the fragments); d may be c.
///@{
__device__ __forceinline__ void mma_m16n8k16_bf16(float d[4], const uint32_t a[4], const uint32_t b[2],
                                                  const float c[4]) {
#if EMBER_MMA_HARDWARE
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%10, %11, %12, %13};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
#else
  mma_detail::emulated<MmaType::BFloat16>(d, a, b, c);
#endif
}
__device__ __forceinline__ void mma_m16n8k16_f16(float d[4], const uint32_t a[4], const uint32_t b[2],
                                                 const float c[4]) {
#if EMBER_MMA_HARDWARE
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%10, %11, %12, %13};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
#else
  mma_detail::emulated<MmaType::Float16>(d, a, b, c);
#endif
}
template <MmaType M>
__device__ __forceinline__ void mma_m16n8k16(float d[4], const uint32_t a[4], const uint32_t b[2], const float c[4]) {
  if constexpr (M == MmaType::BFloat16)
    mma_m16n8k16_bf16(d, a, b, c);
  else
    mma_m16n8k16_f16(d, a, b, c);
}
///@}

/// ldmatrix.sync.aligned.m8n8.x4{,.trans}.shared.b16 over the warp: lane l
/// passes the address of row l % 8 of matrix l / 8 (8 consecutive 16-bit
/// elements, 16-byte aligned, in shared memory); register m of lane l gets
/// row l / 4, elements 2 (l % 4), 2 (l % 4) + 1 of matrix m (the low half
/// the first), and with .trans the same of matrix m's transpose. So four
/// matrices laid out as a 16 x 16 tile (rows 0-7 and 8-15 by columns 0-7
/// and 8-15, in the order top left, bottom left, top right, bottom right)
/// arrive as that tile's A fragment, and .trans of a k-by-n tile stored
/// row-major arrives as B fragments. Under the emulator a misaligned or
/// non-shared row address, or a warp short of lanes, is a DeviceError (the
/// emulator takes shared memory to be the block's dynamic shared memory).
///@{
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const uint16_t* row) {
#if EMBER_MMA_HARDWARE
  const auto addr = static_cast<uint32_t>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
#else
  mma_detail::ldmatrix_emulated<false>(r, row);
#endif
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const uint16_t* row) {
#if EMBER_MMA_HARDWARE
  const auto addr = static_cast<uint32_t>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
#else
  mma_detail::ldmatrix_emulated<true>(r, row);
#endif
}
///@}

/// cp.async.cg.shared.global of 16 bytes, src to dst (both 16-byte aligned,
/// dst in shared memory), or with valid false 16 zero bytes to dst (src is
/// not read; pass any aligned address). The copy runs asynchronously: it is
/// complete only after cp_async_wait<N> has retired its group (and visible
/// to other threads only after a __syncthreads that follows that). Without
/// sm_80 (the host pass) a plain copy.
__device__ __forceinline__ void cp_async_16(void* dst, const void* src, bool valid) {
#if EMBER_MMA_HARDWARE
  const auto addr = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(addr), "l"(src), "r"(valid ? 16 : 0) : "memory");
#elif defined(EMBER_CUDA_EMULATE)
  ::ember::emu::cp_async(dst, src, valid ? 16 : 0);
#else
  uint32_t* d = static_cast<uint32_t*>(dst);
  const uint32_t* s = static_cast<const uint32_t*>(src);
  for (int i = 0; i < 4; ++i) d[i] = valid ? s[i] : 0u;
#endif
}

/// cp.async.commit_group: the calling thread's copies issued since the last
/// commit become one group.
__device__ __forceinline__ void cp_async_commit() {
#if EMBER_MMA_HARDWARE
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#elif defined(EMBER_CUDA_EMULATE)
  ::ember::emu::cp_async_commit();
#endif
}

/// cp.async.wait_group N: waits until at most the N most recent groups of
/// the calling thread are pending (N = 0: all of them are complete).
template <int N>
__device__ __forceinline__ void cp_async_wait() {
#if EMBER_MMA_HARDWARE
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#elif defined(EMBER_CUDA_EMULATE)
  ::ember::emu::cp_async_wait(N);
#endif
}

}  // namespace ember::cuda
