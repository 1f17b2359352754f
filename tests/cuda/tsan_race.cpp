// Built with -fsanitize=thread against the SIMT emulator (no Ember library:
// just the emulator and the thread pool). `tsan_race missing` runs a kernel
// whose threads read a neighbour's shared-memory write with no barrier in
// between: ThreadSanitizer must report a data race (CTest passes on the
// report). `tsan_race barrier` runs the same kernel with the barrier: no
// report. Fibers switch without synchronising, and only __syncthreads and
// __syncwarp tell TSan about an order, as on a GPU.
#include <cstdio>
#include <cstring>
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

}  // namespace

int main(int argc, char** argv) {
  const bool missing = argc > 1 && std::strcmp(argv[1], "missing") == 0;
  std::vector<int> in(128), out(128);
  for (int i = 0; i < 128; ++i) in[i] = i;
  for (int rep = 0; rep < 2; ++rep) {
    ember::emu::launch({dim3(2), dim3(64), 0, "neighbour_kernel"}, [&] {
      if (missing) neighbour_kernel<false>(in.data(), out.data());
      else neighbour_kernel<true>(in.data(), out.data());
    });
  }
  std::printf("out[0] = %d (%s barrier)\n", out[0], missing ? "missing" : "with");
  return 0;
}
