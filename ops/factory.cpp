// Factories: constants, ranges, identity, and random tensors with their CPU
// kernel. Random values depend only on (seed, counter, element index), so
// they are the same for any thread count and on any device.
#include <ember/ops/factory.h>

#include <cmath>
#include <numeric>

#include <ember/core/autograd.h>
#include <ember/core/dispatch.h>
#include <ember/core/dtype_dispatch.h>
#include <ember/core/op.h>
#include <ember/core/parallel.h>
#include <ember/ops/copy.h>
#include <ember/ops/onnx_lowerings.h>
#include <ember/ops/random_kernels.h>
#include <ember/ops/range_kernels.h>

namespace ember {

decltype(random_kernel) random_kernel("random");
decltype(range_kernel) range_kernel("range");

namespace {

void cpu_random(Tensor& out, const RandomSpec& spec) {
  EMBER_CHECK(out.is_contiguous(), ValueError, "random: output must be contiguous");
  dispatch_numeric(out.dtype(), "random", [&](auto tag) {
    using T = decltype(tag);
    T* p = static_cast<T*>(out.data_ptr());
    const int64_t n = out.numel();
    const int64_t k = (spec.kind == RandomKind::Uniform && out.dtype() == DType::Float32) ? 4 : 2;
    parallel_for(0, (n + k - 1) / k, 4096, [&](int64_t lo, int64_t hi) {
      T v[4] = {};
      for (int64_t c = lo; c < hi; ++c) {
        random_values<T>(spec, static_cast<uint64_t>(c), v);
        const int64_t end = std::min<int64_t>(k, n - k * c);
        for (int64_t j = 0; j < end; ++j) p[k * c + j] = v[j];
      }
    });
  });
}

Tensor random_tensor(const Shape& shape, TensorOptions opts, Generator* gen, RandomKind kind, double a, double b) {
  if (is_half(opts.dtype)) {
    // Drawn in float32 and rounded, as PyTorch's CPU generator does for 16-bit floats.
    Tensor out = random_tensor(shape, TensorOptions(DType::Float32, opts.device), gen, kind, a, b).to(opts.dtype);
    if (opts.requires_grad) out.requires_grad_(true);
    return out;
  }
  Tensor out = empty(shape, TensorOptions(opts.dtype, opts.device));
  Generator& g = gen ? *gen : default_generator();
  const RandomSpec spec = reserve_random(kind, g, random_counters(kind, out.dtype(), out.numel()), opts.device, a, b);
  if (out.numel()) random_kernel(out.device(), out, spec);
  if (opts.requires_grad) out.requires_grad_(true);
  return out;
}

void cpu_range(Tensor& out, const RangeSpec& spec) {
  EMBER_CHECK(out.is_contiguous(), ValueError, "range: output must be contiguous");
  dispatch_all(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* p = static_cast<T*>(out.data_ptr());
    parallel_for(0, spec.n, 4096, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) p[i] = convert_element<T, double>(range_value(spec, i));
    });
  });
}

// A range of spec.n values on opts' device, computed there (ops/range_kernels.h).
Tensor make_range(const RangeSpec& spec, TensorOptions opts) {
  Tensor out = empty(Shape{spec.n}, TensorOptions(opts.dtype, opts.device));
  if (spec.n) range_kernel(out.device(), out, spec);
  if (opts.requires_grad) out.requires_grad_(true);
  return out;
}

Tensor from_host(std::vector<double> v, const Shape& shape, TensorOptions opts) {
  Tensor t = from_vector(v, shape, TensorOptions(opts.dtype, opts.device));
  if (opts.requires_grad) t.requires_grad_(true);
  return t;
}

}  // namespace

EMBER_REGISTER_KERNEL(random_kernel, CPU, cpu_random);
EMBER_REGISTER_KERNEL(range_kernel, CPU, cpu_range);

namespace {
// full (zeros, ones): the value expanded to the shape, which may follow a dynamic axis.
void lower_full(lowering::Graph& g, const lowering::Call& c) {
  g.bind(c.outputs[0], g.node("Expand", {g.scalar(c.f(1), c.outputs[0].dtype()), g.ints(c, 0)})[0]);
}
}  // namespace

constexpr OpDef full_op{.name = "full", .onnx = lower_full};
EMBER_REGISTER_OP(full_op);

Tensor full(const Shape& shape, double value, TensorOptions opts) {
  return op::call_captured<full_op>(
      [&](const auto&...) -> Tensor {
        Tensor t = empty(shape, TensorOptions(opts.dtype, opts.device));
        t.fill_(value);
        if (opts.requires_grad) t.requires_grad_(true);
        return t;
      },
      shape, value, opts);
}
Tensor zeros(const Shape& shape, TensorOptions opts) { return full(shape, 0.0, opts); }
Tensor ones(const Shape& shape, TensorOptions opts) { return full(shape, 1.0, opts); }
Tensor zeros_like(const Tensor& t) { return zeros(t.shape(), TensorOptions(t.dtype(), t.device())); }
Tensor ones_like(const Tensor& t) { return ones(t.shape(), TensorOptions(t.dtype(), t.device())); }
Tensor full_like(const Tensor& t, double value) { return full(t.shape(), value, TensorOptions(t.dtype(), t.device())); }

Tensor arange(double end, TensorOptions opts) { return arange(0, end, 1, opts); }

namespace {
// Range(start, end, step) in the result's dtype. Whole-number bounds go through Graph::ints, so a range that
// follows a dynamic axis (GPT's positions) is computed from the input's shape.
void lower_arange(lowering::Graph& g, const lowering::Call& c) {
  const DType dt = c.outputs[0].dtype();
  std::vector<std::string> in;
  for (size_t i = 0; i < 3; ++i) {
    const double v = c.f(i);
    if (v != std::floor(v)) {
      in.push_back(g.scalar(v, dt));
      continue;
    }
    const std::string s = g.node("Squeeze", {g.ints(c, i), g.constant_ints({0})})[0];
    in.push_back(dt == DType::Int64 ? s : g.node("Cast", {s}, {{"to", int64_t{lowering::onnx_dtype(dt)}}})[0]);
  }
  g.bind(c.outputs[0], g.node("Range", in)[0]);
}
}  // namespace

constexpr OpDef arange_op{.name = "arange", .onnx = lower_arange};
EMBER_REGISTER_OP(arange_op);

Tensor arange(double start, double end, double step, TensorOptions opts) {
  return op::call_captured<arange_op>(
      [&](const auto&...) -> Tensor {
        EMBER_CHECK(step != 0, ValueError, "arange: step must be nonzero");
        EMBER_CHECK((end - start) / step >= 0, ValueError, "arange: the range [", start, ", ", end,
                    ") is empty or runs against step ", step);
        const int64_t n = static_cast<int64_t>(std::ceil((end - start) / step));
        return make_range(RangeSpec{start, step, end, n, n}, opts);
      },
      start, end, step, opts);
}

Tensor linspace(double start, double end, int64_t steps, TensorOptions opts) {
  EMBER_CHECK(steps >= 0, ValueError, "linspace: steps must be non-negative, got ", steps);
  const double step = steps > 1 ? (end - start) / static_cast<double>(steps - 1) : 0.0;
  // Filled from both ends, as PyTorch does, so the last value is exactly end
  // (steps == 1: start alone).
  return make_range(RangeSpec{start, step, end, steps, steps == 1 ? 1 : steps / 2}, opts);
}

Tensor eye(int64_t n, TensorOptions opts) { return eye(n, n, opts); }

Tensor eye(int64_t n, int64_t m, TensorOptions opts) {
  EMBER_CHECK(n >= 0 && m >= 0, ValueError, "eye: sizes must be non-negative, got ", n, " x ", m);
  std::vector<double> v(static_cast<size_t>(n * m), 0.0);
  for (int64_t i = 0; i < std::min(n, m); ++i) v[i * m + i] = 1.0;
  return from_host(std::move(v), Shape{n, m}, opts);
}

Tensor rand(const Shape& shape, TensorOptions opts, Generator* gen) { return uniform(shape, 0.0, 1.0, opts, gen); }
Tensor uniform(const Shape& shape, double low, double high, TensorOptions opts, Generator* gen) {
  EMBER_CHECK(is_floating(opts.dtype), DTypeError, "rand/uniform: dtype must be floating, got ",
              dtype_name(opts.dtype));
  EMBER_CHECK(low <= high, ValueError, "uniform: low ", low, " is above high ", high);
  return random_tensor(shape, opts, gen, RandomKind::Uniform, low, high);
}
Tensor randn(const Shape& shape, TensorOptions opts, Generator* gen) { return normal(shape, 0.0, 1.0, opts, gen); }
Tensor normal(const Shape& shape, double mean, double std, TensorOptions opts, Generator* gen) {
  EMBER_CHECK(is_floating(opts.dtype), DTypeError, "randn/normal: dtype must be floating, got ",
              dtype_name(opts.dtype));
  EMBER_CHECK(std >= 0, ValueError, "normal: std must be non-negative, got ", std);
  return random_tensor(shape, opts, gen, RandomKind::Normal, mean, std);
}
Tensor randint(int64_t low, int64_t high, const Shape& shape, TensorOptions opts, Generator* gen) {
  EMBER_CHECK(low < high, ValueError, "randint: low ", low, " must be below high ", high);
  return random_tensor(shape, opts, gen, RandomKind::Integer, static_cast<double>(low), static_cast<double>(high));
}
Tensor rand_like(const Tensor& t, Generator* gen) { return rand(t.shape(), TensorOptions(t.dtype(), t.device()), gen); }
Tensor randn_like(const Tensor& t, Generator* gen) {
  return randn(t.shape(), TensorOptions(t.dtype(), t.device()), gen);
}

Tensor randperm(int64_t n, Generator* gen) {
  // Fisher-Yates driven by one batch of random integers.
  Tensor r = rand({n}, TensorOptions(DType::Float64), gen);
  const std::vector<double> u = r.to_vector<double>();
  std::vector<int64_t> p(static_cast<size_t>(n));
  std::iota(p.begin(), p.end(), int64_t{0});
  for (int64_t i = n - 1; i > 0; --i) {
    const int64_t j = std::min<int64_t>(i, static_cast<int64_t>(u[i] * static_cast<double>(i + 1)));
    std::swap(p[i], p[j]);
  }
  return from_vector(p, Shape{n});
}

Tensor& uniform_(Tensor& t, double low, double high, Generator* gen) {
  NoGradGuard no_grad;
  Tensor r = uniform(t.shape(), low, high, TensorOptions(t.dtype(), t.device()), gen);
  return t.copy_(r);
}

Tensor& normal_(Tensor& t, double mean, double std, Generator* gen) {
  NoGradGuard no_grad;
  Tensor r = normal(t.shape(), mean, std, TensorOptions(t.dtype(), t.device()), gen);
  return t.copy_(r);
}

}  // namespace ember
