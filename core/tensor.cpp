// Tensor metadata, element access, printing, factories over raw memory, and
// the Tensor methods that belong to autograd.
#include <ember/core/tensor.h>

#include <cmath>
#include <cstring>
#include <iomanip>
#include <sstream>

#include <ember/core/autograd.h>

namespace ember {

TensorImpl::TensorImpl(std::shared_ptr<Storage> s, const Shape& sh, const Shape& st, int64_t off, DType dt)
    : storage(std::move(s)), shape(sh), strides(st), offset(off), dtype(dt) {}

TensorImpl::~TensorImpl() = default;

int64_t Tensor::size(int64_t d) const { return shape()[wrap_dim(d, dim(), "size")]; }
int64_t Tensor::stride(int64_t d) const { return strides()[wrap_dim(d, dim(), "stride")]; }

bool Tensor::is_contiguous() const {
  const Shape& sh = shape();
  const Shape& st = strides();
  int64_t expected = 1;
  for (int i = sh.size() - 1; i >= 0; --i) {
    if (sh[i] == 1) continue;  // the stride of a size-1 dim never matters
    if (st[i] != expected) return false;
    expected *= sh[i];
  }
  return true;
}

void* Tensor::data_ptr() const {
  return static_cast<char*>(impl().storage->data()) + impl().offset * static_cast<int64_t>(element_size());
}

// ---- element access ---------------------------------------------------------
namespace {
template <class T>
T read_as(const void* p, DType dt) {
  switch (dt) {
    case DType::Bool:
      return static_cast<T>(*static_cast<const bool*>(p));
    case DType::Int64:
      return static_cast<T>(*static_cast<const int64_t*>(p));
    case DType::Float32:
      return static_cast<T>(*static_cast<const float*>(p));
    case DType::Float64:
      return static_cast<T>(*static_cast<const double*>(p));
    case DType::BFloat16:
      return static_cast<T>(static_cast<float>(*static_cast<const bfloat16*>(p)));
    case DType::Float16:
      return static_cast<T>(static_cast<float>(*static_cast<const float16*>(p)));
  }
  return T();
}
}  // namespace

template <class T>
T Tensor::item() const {
  EMBER_CHECK(numel() == 1, ValueError, "item(): the tensor has ", numel(), " elements (shape ", shape().str(),
              "); only one-element tensors convert to a scalar");
  Tensor c = device().is_cpu() ? *this : cpu();
  return read_as<T>(c.data_ptr(), c.dtype());
}

template <class T>
T Tensor::at(std::initializer_list<int64_t> index) const {
  EMBER_CHECK(static_cast<int>(index.size()) == dim(), IndexError, "at(): got ", index.size(), " indices for a ", dim(),
              "-dim tensor of shape ", shape().str());
  int64_t off = 0;
  int d = 0;
  for (int64_t i : index) {
    const int64_t n = shape()[d];
    EMBER_CHECK(i >= -n && i < n, IndexError, "at(): index ", i, " is out of range for dim ", d, " of size ", n);
    off += (i < 0 ? i + n : i) * strides()[d];
    ++d;
  }
  if (device().is_cpu()) {
    const char* base = static_cast<const char*>(storage()->data());
    return read_as<T>(base + (offset() + off) * static_cast<int64_t>(element_size()), dtype());
  }
  return make_view(*this, Shape{}, Shape{}, offset() + off).item<T>();
}

template <class T>
std::vector<T> Tensor::to_vector() const {
  Tensor c = cpu().contiguous();
  std::vector<T> out(static_cast<size_t>(c.numel()));
  const char* p = static_cast<const char*>(c.data_ptr());
  const size_t es = c.element_size();
  for (size_t i = 0; i < out.size(); ++i) out[i] = read_as<T>(p + i * es, c.dtype());
  return out;
}

#define EMBER_INSTANTIATE_ACCESS(T)                               \
  template T Tensor::item<T>() const;                             \
  template T Tensor::at<T>(std::initializer_list<int64_t>) const; \
  template std::vector<T> Tensor::to_vector<T>() const;
EMBER_INSTANTIATE_ACCESS(float)
EMBER_INSTANTIATE_ACCESS(double)
EMBER_INSTANTIATE_ACCESS(int64_t)
EMBER_INSTANTIATE_ACCESS(int)
EMBER_INSTANTIATE_ACCESS(bool)
EMBER_INSTANTIATE_ACCESS(bfloat16)
EMBER_INSTANTIATE_ACCESS(float16)
#undef EMBER_INSTANTIATE_ACCESS

// ---- printing ---------------------------------------------------------------
namespace {

// PyTorch-like formatting: integers-valued floats as "1.", fixed 4 decimals in
// the ordinary range, scientific notation for very large or small magnitudes.
struct Formatter {
  enum Mode { Int, Bool, IntFloat, Fixed, Sci } mode = Fixed;
  int width = 1;

  std::string format(double v) const {
    std::ostringstream os;
    switch (mode) {
      case Bool:
        os << (v != 0 ? "True" : "False");
        break;
      case Int:
        os << static_cast<int64_t>(v);
        break;
      case IntFloat:
        if (std::isfinite(v))
          os << static_cast<int64_t>(v) << '.';
        else
          os << v;
        break;
      case Fixed:
        os << std::fixed << std::setprecision(4) << v;
        break;
      case Sci:
        os << std::scientific << std::setprecision(4) << v;
        break;
    }
    return os.str();
  }
};

struct Printer {
  const std::vector<double>& v;
  const Shape& shape;
  Formatter f;
  bool summarize;
  static constexpr int kEdge = 3;

  void print(std::ostream& os, int d, int64_t base, int indent) const {
    if (shape.size() == 0) {
      os << f.format(v[0]);
      return;
    }
    int64_t stride = 1;
    for (int i = d + 1; i < shape.size(); ++i) stride *= shape[i];
    const int64_t n = shape[d];
    os << '[';
    for (int64_t i = 0; i < n; ++i) {
      if (summarize && n > 2 * kEdge && i == kEdge) {
        os << "...";
        i = n - kEdge - 1;
        if (d + 1 < shape.size())
          os << ",\n" << std::string(indent + 1, ' ');
        else
          os << ", ";
        continue;
      }
      if (d + 1 == shape.size()) {
        std::string s = f.format(v[base + i]);
        os << std::string(std::max<int>(0, f.width - static_cast<int>(s.size())), ' ') << s;
      } else {
        print(os, d + 1, base + i * stride, indent + 1);
      }
      if (i + 1 < n) {
        if (d + 1 < shape.size())
          os << ',' << std::string(static_cast<size_t>(shape.size() - d - 1), '\n') << std::string(indent + 1, ' ');
        else
          os << ", ";
      }
    }
    os << ']';
  }
};

}  // namespace

std::string Tensor::str() const {
  if (!defined()) return "tensor(undefined)";
  std::vector<double> v = to_vector<double>();
  Formatter f;
  if (dtype() == DType::Bool)
    f.mode = Formatter::Bool;
  else if (dtype() == DType::Int64)
    f.mode = Formatter::Int;
  else {
    bool all_int = true;
    double max_abs = 0, min_abs = INFINITY;
    for (double x : v) {
      if (!std::isfinite(x)) continue;
      if (x != std::floor(x)) all_int = false;
      const double a = std::fabs(x);
      max_abs = std::max(max_abs, a);
      if (a > 0) min_abs = std::min(min_abs, a);
    }
    if (all_int && max_abs < 1e8)
      f.mode = Formatter::IntFloat;
    else if (max_abs >= 1e8 || (min_abs < 1e-4 && min_abs != INFINITY))
      f.mode = Formatter::Sci;
    else
      f.mode = Formatter::Fixed;
  }
  for (double x : v) f.width = std::max<int>(f.width, static_cast<int>(f.format(x).size()));
  std::ostringstream os;
  os << "tensor(";
  if (numel() == 0)
    os << "[]";
  else
    Printer{v, shape(), f, numel() > 1000}.print(os, 0, 0, 7);
  os << ", shape=" << shape().str() << ", dtype=" << dtype_name(dtype()) << ", device=" << device().str();
  if (grad_fn())
    os << ", grad_fn=<" << grad_fn()->name() << ">";
  else if (requires_grad())
    os << ", requires_grad=true";
  os << ')';
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.str(); }

// ---- autograd state ---------------------------------------------------------
bool Tensor::requires_grad() const {
  const auto& m = impl().autograd;
  return m && (m->requires_grad || m->grad_fn);
}

Tensor& Tensor::requires_grad_(bool on) {
  auto& m = impl().autograd;
  EMBER_CHECK(!(m && m->grad_fn), AutogradError,
              "requires_grad_(): only leaf tensors can change requires_grad; this one was made by '",
              m->grad_fn->name(), "' (use detach() to get a leaf)");
  EMBER_CHECK(!on || is_floating_point(), DTypeError,
              "requires_grad_(): only floating-point tensors can require gradients, got ", dtype_name(dtype()));
  if (!m) m = std::make_unique<autograd::AutogradMeta>();
  m->requires_grad = on;
  return *this;
}

const Tensor& Tensor::grad() const {
  static const Tensor undefined;
  const auto& m = impl().autograd;
  return m ? m->grad : undefined;
}

Tensor& Tensor::mutable_grad() {
  auto& m = impl().autograd;
  if (!m) m = std::make_unique<autograd::AutogradMeta>();
  return m->grad;
}

void Tensor::zero_grad(bool set_to_none) {
  auto& m = impl().autograd;
  if (!m || !m->grad.defined()) return;
  if (set_to_none)
    m->grad = Tensor();
  else
    m->grad.zero_();
}

void Tensor::retain_grad() {
  auto& m = impl().autograd;
  EMBER_CHECK(requires_grad(), AutogradError,
              "retain_grad(): the tensor does not require grad, so it will never get one");
  if (!m->grad_fn) return;  // leaves keep their grad anyway
  m->retains_grad = true;
  autograd::retain_output_grad(*m->grad_fn, m->output_nr, impl_ptr());
}

bool Tensor::is_leaf() const {
  const auto& m = impl().autograd;
  return !m || !m->grad_fn;
}

std::shared_ptr<autograd::Node> Tensor::grad_fn() const {
  const auto& m = impl().autograd;
  return m ? m->grad_fn : nullptr;
}

void Tensor::backward(const Tensor& grad, bool retain_graph) const {
  autograd::backward({*this}, {grad}, retain_graph);
}

Tensor Tensor::detach() const {
  return Tensor(std::make_shared<TensorImpl>(impl().storage, shape(), strides(), offset(), dtype()));
}

// ---- factories over raw memory ----------------------------------------------
Tensor empty(const Shape& shape, TensorOptions opts) { return empty_strided(shape, contiguous_strides(shape), opts); }

Tensor empty_strided(const Shape& shape, const Shape& strides, TensorOptions opts) {
  EMBER_CHECK(shape.size() == strides.size(), ShapeError, "empty_strided: shape ", shape.str(), " and strides ",
              strides.str(), " differ in length");
  int64_t extent = 1;  // 1 + largest reachable offset
  for (int i = 0; i < shape.size(); ++i) {
    EMBER_CHECK(shape[i] >= 0, ShapeError, "empty: negative size in shape ", shape.str());
    if (shape[i] == 0) extent = 0;
  }
  // Overflow-checked: a wrapped byte count would allocate a block smaller
  // than the tensor.
  int64_t nbytes = 0;
  bool overflow = false;
  if (extent)
    for (int i = 0; i < shape.size(); ++i) {
      int64_t span = 0;
      overflow |=
          __builtin_mul_overflow(shape[i] - 1, strides[i], &span) || __builtin_add_overflow(extent, span, &extent);
    }
  overflow |= __builtin_mul_overflow(extent, static_cast<int64_t>(itemsize(opts.dtype)), &nbytes);
  EMBER_CHECK(!overflow, ShapeError, "empty: shape ", shape.str(), " with strides ", strides.str(),
              " needs more bytes than a 64-bit size can hold");
  auto storage = std::make_shared<Storage>(static_cast<size_t>(nbytes), opts.device);
  Tensor t(std::make_shared<TensorImpl>(std::move(storage), shape, strides, 0, opts.dtype));
  if (opts.requires_grad) t.requires_grad_(true);
  return t;
}

Tensor empty_like(const Tensor& t) { return empty(t.shape(), TensorOptions(t.dtype(), t.device())); }

Tensor make_view(const Tensor& t, const Shape& shape, const Shape& strides, int64_t offset) {
  return Tensor(std::make_shared<TensorImpl>(t.storage(), shape, strides, offset, t.dtype()));
}

template <class T>
Tensor from_data(const T* data, const Shape& shape, TensorOptions opts) {
  Tensor host = empty(shape, TensorOptions(dtype_of_v<T>));
  if (host.numel()) std::memcpy(host.data_ptr(), data, static_cast<size_t>(host.numel()) * sizeof(T));
  Tensor t = host.to(opts.dtype).to(opts.device);
  if (opts.requires_grad) t.requires_grad_(true);
  return t;
}

template <class T>
Tensor from_vector(const std::vector<T>& values, const Shape& shape, TensorOptions opts) {
  EMBER_CHECK(static_cast<int64_t>(values.size()) == shape.numel(), ShapeError, "from_vector: ", values.size(),
              " values do not fill shape ", shape.str(), " (", shape.numel(), " elements)");
  if constexpr (std::is_same_v<T, bool>) {
    // std::vector<bool> is packed; unpack it first.
    std::vector<uint8_t> bytes(values.begin(), values.end());
    return from_data(reinterpret_cast<const bool*>(bytes.data()), shape, opts);
  } else {
    return from_data(values.data(), shape, opts);
  }
}

#define EMBER_INSTANTIATE_FROM(T)                                      \
  template Tensor from_data<T>(const T*, const Shape&, TensorOptions); \
  template Tensor from_vector<T>(const std::vector<T>&, const Shape&, TensorOptions);
EMBER_INSTANTIATE_FROM(float)
EMBER_INSTANTIATE_FROM(double)
EMBER_INSTANTIATE_FROM(int64_t)
EMBER_INSTANTIATE_FROM(bfloat16)
EMBER_INSTANTIATE_FROM(float16)
template Tensor from_vector<bool>(const std::vector<bool>&, const Shape&, TensorOptions);
template Tensor from_data<bool>(const bool*, const Shape&, TensorOptions);
#undef EMBER_INSTANTIATE_FROM

Tensor tensor(std::initializer_list<double> values, TensorOptions opts) {
  return from_vector(std::vector<double>(values), Shape{static_cast<int64_t>(values.size())}, opts);
}

Tensor tensor(std::initializer_list<std::initializer_list<double>> values, TensorOptions opts) {
  std::vector<double> flat;
  const int64_t rows = static_cast<int64_t>(values.size());
  const int64_t cols = rows ? static_cast<int64_t>(values.begin()->size()) : 0;
  for (const auto& r : values) {
    EMBER_CHECK(static_cast<int64_t>(r.size()) == cols, ShapeError, "tensor(): rows have different lengths (", cols,
                " and ", r.size(), ")");
    flat.insert(flat.end(), r.begin(), r.end());
  }
  return from_vector(flat, Shape{rows, cols}, opts);
}

Tensor tensor(std::initializer_list<std::initializer_list<std::initializer_list<double>>> values, TensorOptions opts) {
  std::vector<double> flat;
  const int64_t n0 = static_cast<int64_t>(values.size());
  int64_t n1 = -1, n2 = -1;
  for (const auto& m : values) {
    if (n1 < 0) n1 = static_cast<int64_t>(m.size());
    EMBER_CHECK(static_cast<int64_t>(m.size()) == n1, ShapeError, "tensor(): ragged nested lists");
    for (const auto& r : m) {
      if (n2 < 0) n2 = static_cast<int64_t>(r.size());
      EMBER_CHECK(static_cast<int64_t>(r.size()) == n2, ShapeError, "tensor(): ragged nested lists");
      flat.insert(flat.end(), r.begin(), r.end());
    }
  }
  return from_vector(flat, Shape{n0, std::max<int64_t>(n1, 0), std::max<int64_t>(n2, 0)}, opts);
}

Tensor scalar_tensor(double value, TensorOptions opts) {
  return from_vector(std::vector<double>{value}, Shape{}, opts);
}

}  // namespace ember
