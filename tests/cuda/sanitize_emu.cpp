// The SIMT emulator under the sanitizers (no Ember library: just the
// emulator and the thread pool, built twice by tests/CMakeLists.txt).
// With -fsanitize=thread: `missing` runs a kernel whose threads read a
// neighbour's shared-memory write with no barrier in between, and
// ThreadSanitizer must report a data race (CTest passes on the report);
// `barrier` runs the same kernel with the barrier: no report. Fibers switch
// without synchronising, and only __syncthreads and __syncwarp tell TSan
// about an order, as on a GPU.
// With -fsanitize=address: `barrier` and `partial` (a barrier only part of
// the block reaches, and divergent barriers, whose error unwinds inside a
// fiber and is rethrown on the caller) must run without an AddressSanitizer
// report, which checks the emulator's fiber-switch annotations.
#include <cstdio>
#include <cstring>
#include <exception>
#include <vector>

#include <ember/cuda/emu/simt.h>

namespace {

template <bool kBarrier>
__global__ void neighbour_kernel(const int* in, int* out) {
  __shared__ int s[64];
  const int t = threadIdx.x, base = blockIdx.x * 64;
  s[t] = in[base + t];
  if (kBarrier) __syncthreads();
  out[base + t] = s[(t + 1) % 64];
}

__global__ void early_exit_kernel(int* out, int n) {
  __shared__ int s[64];
  const int t = threadIdx.x;
  if (t >= n) return;  // the broken part
  s[t] = t;
  __syncthreads();
  out[t] = s[(t + 1) % n];
}

// The halves wait at different barriers: the emulator throws inside the
// fiber that reaches the second one, and the exception unwinds its stack.
__global__ void divergent_kernel(int* out) {
  if (threadIdx.x < 32) {
    __syncthreads();
  } else {
    __syncthreads();
  }
  out[threadIdx.x] = 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "partial") == 0) {
    std::vector<int> out(64);
    for (int rep = 0; rep < 3; ++rep) {
      try {
        ember::emu::launch({dim3(4), dim3(64), 0, "early_exit_kernel"}, [&] { early_exit_kernel(out.data(), 40); });
        std::printf("no error reported\n");
        return 1;
      } catch (const std::exception& e) {
        std::printf("caught: %s\n", e.what());
      }
      try {
        ember::emu::launch({dim3(2), dim3(64), 0, "divergent_kernel"}, [&] { divergent_kernel(out.data()); });
        std::printf("no error reported\n");
        return 1;
      } catch (const std::exception& e) {
        std::printf("caught: %s\n", e.what());
      }
    }
    return 0;
  }
  const bool missing = argc > 1 && std::strcmp(argv[1], "missing") == 0;
  std::vector<int> in(128), out(128);
  for (int i = 0; i < 128; ++i) in[i] = i;
  for (int rep = 0; rep < 2; ++rep) {
    ember::emu::launch({dim3(2), dim3(64), 0, "neighbour_kernel"}, [&] {
      if (missing)
        neighbour_kernel<false>(in.data(), out.data());
      else
        neighbour_kernel<true>(in.data(), out.data());
    });
  }
  std::printf("out[0] = %d (%s barrier)\n", out[0], missing ? "missing" : "with");
  return 0;
}
