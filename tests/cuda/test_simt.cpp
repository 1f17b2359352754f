// The SIMT emulator's semantics (cuda/emu/simt.h): indices, __shared__ per
// block, dynamic shared memory, barriers, warp shuffles and votes, atomics;
// and the three ways it finds what a GPU punishes: a barrier only part of a
// block reaches (an error), a missing barrier under a shuffled schedule
// (wrong results), and a missing barrier under ThreadSanitizer (a race
// report: tests/cuda/sanitize_emu.cpp, run by CTest).
#include <doctest/doctest.h>

#include <numeric>
#include <string>
#include <vector>

#include <ember/cuda/common.h>
#include <ember/ember.h>

#include "test_util.h"

namespace {

using ember::DeviceError;
using test::contains;
using test::error_of;

// Runs a kernel on host vectors (device memory is host memory here).
template <class... P, class... A>
void run(void (*k)(P...), dim3 grid, dim3 block, size_t smem, A&&... args) {
  ember::cuda::launch(__FILE__, __LINE__, "test kernel", k, grid, block, smem, nullptr, std::forward<A>(args)...);
}

// Runs f with the schedule seed set, restoring the previous one.
template <class F>
void with_seed(uint64_t seed, F f) {
  const uint64_t old = ember::emu::schedule_seed();
  ember::emu::set_schedule_seed(seed);
  try {
    f();
  } catch (...) {
    ember::emu::set_schedule_seed(old);
    throw;
  }
  ember::emu::set_schedule_seed(old);
}

__global__ void indices_kernel(int* out) {
  const unsigned bx = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  const unsigned tx = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  const unsigned per_block = blockDim.x * blockDim.y * blockDim.z;
  out[bx * per_block + tx] = static_cast<int>(1000 * bx + tx);
}

// Reverses each block's chunk through shared memory.
__global__ void reverse_kernel(const float* in, float* out) {
  __shared__ float s[128];
  const unsigned t = threadIdx.x, base = blockIdx.x * blockDim.x;
  s[t] = in[base + t];
  __syncthreads();
  out[base + t] = s[blockDim.x - 1 - t];
}

__global__ void dynamic_shared_kernel(const double* in, double* out, int n) {
  EMBER_DYNAMIC_SHARED(double, s);
  for (int i = threadIdx.x; i < n; i += blockDim.x) s[i] = in[i] * 2;
  __syncthreads();
  if (threadIdx.x == 0) {
    double acc = 0;
    for (int i = 0; i < n; ++i) acc += s[i];
    out[blockIdx.x] = acc;
  }
}

__global__ void shuffle_kernel(int* xor_sum, int* down_sum, int* bcast, int* up_scan, unsigned* ballots) {
  const int t = threadIdx.x, lane = t % 32;
  int v = t + 1;
  int a = v;
  for (int o = 16; o > 0; o >>= 1) a += __shfl_xor_sync(0xffffffffu, a, o);
  xor_sum[t] = a;
  int d = v;
  for (int o = 16; o > 0; o >>= 1) d += __shfl_down_sync(0xffffffffu, d, o);
  down_sum[t] = d;  // only lane 0 holds the warp's total
  bcast[t] = __shfl_sync(0xffffffffu, v * 10, 5);
  int s = v;
  for (int o = 1; o < 32; o <<= 1) {
    const int u = __shfl_up_sync(0xffffffffu, s, o);
    if (lane >= o) s += u;
  }
  up_scan[t] = s;
  ballots[t] = __ballot_sync(0xffffffffu, t % 3 == 0);
}

__global__ void atomic_kernel(float* fsum, long long* isum, int* imax) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  atomicAdd(fsum, 1.0f);
  atomicAdd(isum, static_cast<long long>(i));
  atomicMax(imax, i);
}

// Broken: threads that fail the guard return before the barrier.
__global__ void early_exit_kernel(float* out, int n) {
  __shared__ float s[64];
  const int t = threadIdx.x;
  if (t >= n) return;
  s[t] = static_cast<float>(t);
  __syncthreads();
  out[t] = s[(t + 1) % n];
}

// Broken: the two halves wait at different barriers.
__global__ void divergent_barrier_kernel(float* out) {
  if (threadIdx.x < 16) {
    __syncthreads();
  } else {
    __syncthreads();
  }
  out[threadIdx.x] = 1;
}

// Each thread reads the value its left neighbour wrote. With the barrier it
// is correct under any schedule; without it, only when threads happen to run
// in order.
template <bool kBarrier>
__global__ void neighbour_kernel(const int* in, int* out) {
  __shared__ int s[256];
  const int t = threadIdx.x;
  s[t] = in[t];
  if (kBarrier) __syncthreads();
  out[t] = t > 0 ? s[t - 1] : -1;
}

__global__ void partial_warp_shuffle_kernel(int* out) {
  out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, static_cast<int>(threadIdx.x), 1);
}

}  // namespace

TEST_CASE("cuda emulator: grid and block indices in 3-D") {
  const dim3 grid(2, 3, 2), block(4, 2, 3);
  std::vector<int> out(12 * 24, -1);
  run(indices_kernel, grid, block, 0, out.data());
  for (unsigned b = 0; b < 12; ++b)
    for (unsigned t = 0; t < 24; ++t) CHECK(out[b * 24 + t] == static_cast<int>(1000 * b + t));
}

TEST_CASE("cuda emulator: __shared__ is per block, __syncthreads orders it") {
  const int blocks = 6, threads = 128;
  std::vector<float> in(blocks * threads), out(in.size());
  std::iota(in.begin(), in.end(), 0.0f);
  for (uint64_t seed : {0, 7}) {
    with_seed(seed, [&] { run(reverse_kernel, blocks, threads, 0, in.data(), out.data()); });
    for (int b = 0; b < blocks; ++b)
      for (int t = 0; t < threads; ++t) CHECK(out[b * threads + t] == in[b * threads + threads - 1 - t]);
  }
}

TEST_CASE("cuda emulator: dynamic shared memory") {
  const int n = 1000;
  std::vector<double> in(n, 1.5), out(3);
  run(dynamic_shared_kernel, 3, 64, n * sizeof(double), in.data(), out.data(), n);
  for (double v : out) CHECK(v == doctest::Approx(3.0 * n));
  // Over the 48 KiB default: the launch fails as on a GPU.
  CHECK(contains(error_of<DeviceError>([&] { run(dynamic_shared_kernel, 1, 32, 64 * 1024, in.data(), out.data(), 1); }),
                 "invalid configuration"));
}

TEST_CASE("cuda emulator: warp shuffles and ballot") {
  const int threads = 64;
  std::vector<int> xs(threads), ds(threads), bc(threads), up(threads);
  std::vector<unsigned> bal(threads);
  for (uint64_t seed : {0, 3}) {
    with_seed(seed,
              [&] { run(shuffle_kernel, 1, threads, 0, xs.data(), ds.data(), bc.data(), up.data(), bal.data()); });
    for (int t = 0; t < threads; ++t) {
      const int w = t / 32, lane = t % 32, first = 32 * w + 1;
      const int total = 32 * first + 31 * 32 / 2;  // sum of first .. first+31
      CHECK(xs[t] == total);
      if (lane == 0) CHECK(ds[t] == total);
      CHECK(bc[t] == (32 * w + 6) * 10);
      CHECK(up[t] == (lane + 1) * first + lane * (lane + 1) / 2);
      unsigned expect = 0;
      for (int l = 0; l < 32; ++l)
        if ((32 * w + l) % 3 == 0) expect |= 1u << l;
      CHECK(bal[t] == expect);
    }
  }
}

TEST_CASE("cuda emulator: atomics across blocks running on several threads") {
  float fsum = 0;
  long long isum = 0;
  int imax = -1;
  const int blocks = 40, threads = 96;
  run(atomic_kernel, blocks, threads, 0, &fsum, &isum, &imax);
  const long long n = blocks * threads;
  CHECK(fsum == static_cast<float>(n));
  CHECK(isum == n * (n - 1) / 2);
  CHECK(imax == n - 1);
}

TEST_CASE("cuda emulator: a barrier reached by part of the block is an error") {
  std::vector<float> out(64);
  const std::string msg = error_of<DeviceError>([&] { run(early_exit_kernel, 1, 64, 0, out.data(), 40); });
  CHECK(contains(msg, "__syncthreads() reached by 40 of 64 threads"));
  CHECK(contains(msg, "test_simt.cpp"));
  // The same kernel with every thread inside the guard is fine.
  run(early_exit_kernel, 1, 64, 0, out.data(), 64);
  CHECK(out[0] == 1.0f);
  const std::string div = error_of<DeviceError>([&] { run(divergent_barrier_kernel, 1, 32, 0, out.data()); });
  CHECK(contains(div, "must reach the same barrier"));
}

TEST_CASE("cuda emulator: a shuffled schedule exposes a missing barrier") {
  const int threads = 256;
  std::vector<int> in(threads), out(threads);
  for (int round = 0; round < 2; ++round) {
    std::iota(in.begin(), in.end(), 1000 * (round + 1));
    auto correct = [&] {
      for (int t = 1; t < threads; ++t)
        if (out[t] != in[t - 1]) return false;
      return true;
    };
    // In order, every thread's left neighbour has run first: the bug hides.
    with_seed(0, [&] { run(neighbour_kernel<false>, 1, threads, 0, in.data(), out.data()); });
    CHECK(correct());
    std::iota(in.begin(), in.end(), 1000 * (round + 1) + 500);
    // Shuffled: some thread runs before its neighbour and reads a stale value.
    with_seed(12345, [&] { run(neighbour_kernel<false>, 1, threads, 0, in.data(), out.data()); });
    CHECK_FALSE(correct());
    // With the barrier, correct under both schedules.
    for (uint64_t seed : {0, 12345}) {
      with_seed(seed, [&] { run(neighbour_kernel<true>, 1, threads, 0, in.data(), out.data()); });
      CHECK(correct());
    }
  }
}

TEST_CASE("cuda emulator: warp collectives check their mask, launches their configuration") {
  std::vector<int> out(64);
  CHECK(contains(error_of<DeviceError>([&] { run(partial_warp_shuffle_kernel, 1, 16, 0, out.data()); }),
                 "names lanes that do not exist"));
  run(partial_warp_shuffle_kernel, 1, 64, 0, out.data());
  CHECK(out[4] == 5);
  CHECK(contains(error_of<DeviceError>([&] { run(partial_warp_shuffle_kernel, 1, 2048, 0, out.data()); }),
                 "more than 1024 threads"));
}
