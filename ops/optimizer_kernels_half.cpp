// The optimizers' CPU kernels for bfloat16 and float16 parameters (tables:
// ops/optimizer_kernels.h): Adam/AdamW, SGD and the sum of squares of
// clip_grad_norm_. Moments and momentum buffers have the parameter's dtype,
// as PyTorch keeps them.
//
// A step works on blocks of kBlock elements: p, g and the moments are
// converted to float32 (exactly) into arrays on the stack, stepped by the
// float32 kernel's own loop (adam_range<float>: the formula of the float32
// kernel and of cuda/optimizer.cu term by term, and vectorised), and each
// stored value is rounded once, by the vectorised bulk conversions of
// ops/convert.h (round to nearest even, core/half.h's bits). With stochastic
// rounding a bfloat16 p takes the random word of its element instead:
// element i, word i % 4 of Philox counter offset + i / 4, the words
// cuda/optimizer.cu draws, so both backends round alike.
#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>

#include <ember/core/dtype_dispatch.h>
#include <ember/core/half.h>
#include <ember/core/parallel.h>
#include <ember/ops/convert.h>
#include <ember/ops/optimizer_kernels_cpu.h>
#include <ember/ops/philox_cpu.h>

namespace ember::optim {

namespace {

// Elements per block: 64 Philox counters' words, and four float32 arrays of
// 1 KiB that stay in L1 between the conversions and the update.
constexpr int64_t kBlock = 256;

void load(const bfloat16* src, float* dst, int64_t n) { cpu::bf16_to_float(src, dst, n); }
void load(const float16* src, float* dst, int64_t n) { cpu::f16_to_float(src, dst, n); }
void store(const float* src, bfloat16* dst, int64_t n) { cpu::float_to_bf16(src, dst, n); }
void store(const float* src, float16* dst, int64_t n) { cpu::float_to_f16(src, dst, n); }

// p rounded stochastically, element i with its random word words[i].
void store_stochastic(const float* __restrict src, bfloat16* __restrict dst, const uint32_t* __restrict words,
                      int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i].x = bf16_bits_stochastic(src[i], words[i]);
}

// body(begin, n, words) for each block of [0, numel), over the pool; words is
// the block's random words when stochastic, else null. Blocks start at
// multiples of kBlock, so a block's words are one philox_block64.
template <class Body>
void for_blocks(int64_t numel, bool stochastic, uint64_t seed, uint64_t offset, const Body& body) {
  const int64_t blocks = (numel + kBlock - 1) / kBlock;
  parallel_for(0, blocks, 16384 / kBlock, [&](int64_t lo, int64_t hi) {
    alignas(64) uint32_t words[kBlock];
    for (int64_t b = lo; b < hi; ++b) {
      const int64_t begin = b * kBlock, n = std::min(kBlock, numel - begin);
      if (stochastic) cpu::philox_block64(seed, offset + static_cast<uint64_t>(begin / 4), words);
      body(begin, n, stochastic ? words : nullptr);
    }
  });
}

template <class T>
void store_param(const float* src, T* dst, const uint32_t* words, int64_t n) {
  if constexpr (std::is_same_v<T, bfloat16>) {
    if (words) return store_stochastic(src, dst, words, n);
  }
  store(src, dst, n);
}

template <class T>
void adam_half(Tensor& p, const Tensor& g, Tensor& m, Tensor& v, const AdamStep& s) {
  T* pp = static_cast<T*>(p.data_ptr());
  const T* gp = static_cast<const T*>(g.data_ptr());
  T* mp = static_cast<T*>(m.data_ptr());
  T* vp = static_cast<T*>(v.data_ptr());
  // The float32 kernel's step, on float32 copies of each block.
  const auto step = adam_stepper<float>(s);
  const bool stochastic = s.stochastic_rounding && std::is_same_v<T, bfloat16>;
  for_blocks(p.numel(), stochastic, s.seed, s.offset, [&](int64_t begin, int64_t n, const uint32_t* words) {
    alignas(64) float fp[kBlock], fg[kBlock], fm[kBlock], fv[kBlock];
    load(pp + begin, fp, n);
    load(gp + begin, fg, n);
    load(mp + begin, fm, n);
    load(vp + begin, fv, n);
    // p's update reads the float32 m and v, before their rounding (as CUDA).
    step(0, n, fp, fg, fm, fv);
    store(fm, mp + begin, n);
    store(fv, vp + begin, n);
    store_param(fp, pp + begin, words, n);
  });
}

// sgd_element over a block of float32 arrays. A function of its own on
// restrict pointers, as adam_range, so that GCC can vectorise it.
void sgd_range(int64_t n, float* __restrict p, const float* __restrict g, float* __restrict buf, float lr,
               float momentum, float keep, float wd, bool nesterov, bool first) {
  if (momentum == 0.0f) {
    float unused = 0;
    for (int64_t i = 0; i < n; ++i) sgd_element(p[i], g[i], unused, lr, momentum, keep, wd, nesterov, first);
    return;
  }
  for (int64_t i = 0; i < n; ++i) sgd_element(p[i], g[i], buf[i], lr, momentum, keep, wd, nesterov, first);
}

template <class T>
void sgd_half(Tensor& p, const Tensor& g, Tensor& buf, const SGDStep& s) {
  T* pp = static_cast<T*>(p.data_ptr());
  const T* gp = static_cast<const T*>(g.data_ptr());
  const bool momentum = s.momentum != 0;
  T* bp = momentum ? static_cast<T*>(buf.data_ptr()) : nullptr;
  const float lr = static_cast<float>(s.lr), mom = static_cast<float>(s.momentum);
  const float keep = static_cast<float>(1.0 - s.dampening), wd = static_cast<float>(s.weight_decay);
  const bool stochastic = s.stochastic_rounding && std::is_same_v<T, bfloat16>;
  for_blocks(p.numel(), stochastic, s.seed, s.offset, [&](int64_t begin, int64_t n, const uint32_t* words) {
    alignas(64) float fp[kBlock], fg[kBlock], fb[kBlock];
    load(pp + begin, fp, n);
    load(gp + begin, fg, n);
    if (momentum && !s.first) load(bp + begin, fb, n);
    sgd_range(n, fp, fg, fb, lr, mom, keep, wd, s.nesterov, s.first);
    if (momentum) store(fb, bp + begin, n);
    store_param(fp, pp + begin, words, n);
  });
}

// Calls f(T{}) for T = bfloat16 or float16.
template <class F>
void dispatch_half(DType dt, const char* op, F&& f) {
  if (dt == DType::BFloat16) return f(bfloat16{});
  if (dt == DType::Float16) return f(float16{});
  throw DTypeError(std::string(op) + ": expected a bfloat16 or float16 tensor, got " + dtype_name(dt));
}

}  // namespace

void cpu_adam_half(Tensor& p, const Tensor& g, Tensor& m, Tensor& v, const AdamStep& s) {
  dispatch_half(p.dtype(), "adam_step", [&](auto tag) { adam_half<decltype(tag)>(p, g, m, v, s); });
}

void cpu_sgd_half(Tensor& p, const Tensor& g, Tensor& buf, const SGDStep& s) {
  dispatch_half(p.dtype(), "sgd_step", [&](auto tag) { sgd_half<decltype(tag)>(p, g, buf, s); });
}

double sum_squares_half(const Tensor& x, int64_t begin, int64_t end) {
  double total = 0;
  dispatch_half(x.dtype(), "sum_squares", [&](auto tag) {
    using T = decltype(tag);
    const T* xp = static_cast<const T*>(x.data_ptr());
    alignas(64) float f[1024];
    for (int64_t i = begin; i < end; i += 1024) {
      const int64_t n = std::min<int64_t>(1024, end - i);
      load(xp + i, f, n);
      total += sum_squares_range(f, n);  // float32 values, exact squares in float64
    }
  });
  return total;
}

}  // namespace ember::optim
