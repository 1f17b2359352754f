// Shape helpers: printing, contiguous strides, dim wrapping and broadcasting.
#include <ember/core/shape.h>

#include <algorithm>
#include <sstream>

namespace ember {

std::string Shape::str() const {
  std::ostringstream os;
  os << '[';
  for (int i = 0; i < n_; ++i) os << (i ? ", " : "") << d_[i];
  os << ']';
  return os.str();
}

Shape contiguous_strides(const Shape& shape) {
  Shape st = Shape::filled(shape.size(), 1);
  for (int i = shape.size() - 2; i >= 0; --i)
    // A shape whose element count overflows int64 would otherwise overflow
    // here (undefined behaviour; found under the fuzz build with a crafted
    // safetensors header, tests/test_checkpoint.cpp).
    EMBER_CHECK(!__builtin_mul_overflow(st[i + 1], std::max<int64_t>(shape[i + 1], 1), &st[i]), ShapeError, "shape ",
                shape.str(), " has more elements than a 64-bit index can address");
  return st;
}

int wrap_dim(int64_t dim, int ndim, const char* op) {
  // A 0-dim tensor accepts dim 0 and -1, as in PyTorch.
  const int64_t n = ndim == 0 ? 1 : ndim;
  EMBER_CHECK(dim >= -n && dim < n, IndexError, op, ": dim ", dim, " is out of range for a ", ndim,
              "-dim tensor (expected in [", -n, ", ", n - 1, "])");
  return static_cast<int>(dim < 0 ? dim + n : dim);
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  const int n = std::max(a.size(), b.size());
  Shape out = Shape::filled(n, 1);
  for (int i = 0; i < n; ++i) {
    const int ia = a.size() - n + i, ib = b.size() - n + i;
    const int64_t da = ia >= 0 ? a[ia] : 1, db = ib >= 0 ? b[ib] : 1;
    EMBER_CHECK(da == db || da == 1 || db == 1, ShapeError, op, ": shapes ", a.str(), " and ", b.str(),
                " cannot be broadcast together (dim ", i - n, ": ", da, " vs ", db, ")");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

}  // namespace ember
