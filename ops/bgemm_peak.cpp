// One core's bf16 and float32 peaks (bf16_peak_gflops, fp32_peak_gflops,
// declared in ops/bgemm_avx512.h): register-only vdpbf16ps and vfmadd231ps
// loops, timed until they run long enough. The bench's machine line and its
// bgemm rows hold the bf16 GEMM against them.
#include <ember/ops/bgemm_avx512.h>

#include <algorithm>
#include <chrono>
#include <cstdint>

#include <ember/ops/bgemm_detail.h>

#if EMBER_BGEMM_X86
#include <immintrin.h>
#endif

namespace ember::cpu {

namespace {

#if EMBER_BGEMM_X86

// 24 independent chains (more than latency x throughput) of register-only
// vdpbf16ps / vfmadd: nothing but the arithmetic units' rate.
EMBER_TARGET_BF16 __attribute__((noinline)) float dp_loop(int64_t iters, __m512bh a, __m512bh b) {
  __m512 acc[24];
  for (int i = 0; i < 24; ++i) acc[i] = _mm512_setzero_ps();
  for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 24
    for (int i = 0; i < 24; ++i) acc[i] = _mm512_dpbf16_ps(acc[i], a, b);
  }
  __m512 s = acc[0];
  for (int i = 1; i < 24; ++i) s = _mm512_add_ps(s, acc[i]);
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, s);
  return lanes[0];
}
EMBER_TARGET_BF16 __attribute__((noinline)) float fma_loop(int64_t iters, __m512 a, __m512 b) {
  __m512 acc[24];
  for (int i = 0; i < 24; ++i) acc[i] = _mm512_setzero_ps();
  for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 24
    for (int i = 0; i < 24; ++i) acc[i] = _mm512_fmadd_ps(a, b, acc[i]);
  }
  __m512 s = acc[0];
  for (int i = 1; i < 24; ++i) s = _mm512_add_ps(s, acc[i]);
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, s);
  return lanes[0];
}
// The same with fixed operands (small, so the sums stay finite), callable from untargeted code.
EMBER_TARGET_BF16 float dp_run(int64_t iters) {
  return dp_loop(iters, (__m512bh)_mm512_set1_epi32(0x3F803F80), (__m512bh)_mm512_set1_epi32(0x30003000));
}
EMBER_TARGET_BF16 float fma_run(int64_t iters) { return fma_loop(iters, _mm512_set1_ps(1e-8f), _mm512_set1_ps(1e-8f)); }

#endif

template <class Loop>
double peak(double seconds, int flops_per_instr, Loop loop) {
  using clock = std::chrono::steady_clock;
  int64_t iters = 1 << 16;
  for (;;) {
    const auto t0 = clock::now();
    loop(iters);
    const double s = std::chrono::duration<double>(clock::now() - t0).count();
    if (s >= seconds || iters > (int64_t(1) << 40))
      return 24.0 * flops_per_instr * static_cast<double>(iters) / s * 1e-9;
    iters = static_cast<int64_t>(static_cast<double>(iters) * std::min(16.0, 1.2 * seconds / std::max(s, 1e-6)));
  }
}
}  // namespace

double bf16_peak_gflops(double seconds) {
#if EMBER_BGEMM_X86
  if (!bgemm_cpu_has_avx512_bf16()) return 0;
  volatile float sink = 0;
  return peak(seconds, 64, [&](int64_t it) { sink = dp_run(it); });
#else
  (void)seconds;
  return 0;
#endif
}

double fp32_peak_gflops(double seconds) {
#if EMBER_BGEMM_X86
  if (!bgemm_cpu_has_avx512_bf16()) return 0;
  volatile float sink = 0;
  return peak(seconds, 32, [&](int64_t it) { sink = fma_run(it); });
#else
  (void)seconds;
  return 0;
#endif
}

}  // namespace ember::cpu
