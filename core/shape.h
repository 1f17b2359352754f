/// \file
/// Shape: a small fixed-capacity list of int64 used for sizes, strides and
/// dim lists. Tensors have at most kMaxDims dims, so shapes never touch the
/// heap, which keeps creating a tensor to one allocation for its metadata.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <ostream>
#include <string>
#include <vector>

#include <ember/core/error.h>

namespace ember {

/// The most dims a tensor can have (PyTorch allows 64); shapes hold them inline.
inline constexpr int kMaxDims = 8;

/// The sizes (or strides, or dims) of a tensor: at most kMaxDims int64 values, stored inline.
class Shape {
 public:
  Shape() = default;
  /// A shape with these entries; more than kMaxDims throws ShapeError.
  ///@{
  Shape(std::initializer_list<int64_t> dims) { assign(dims.begin(), dims.end()); }
  Shape(const std::vector<int64_t>& dims) { assign(dims.begin(), dims.end()); }  // NOLINT
  ///@}

  /// n copies of value.
  static Shape filled(int n, int64_t value) {
    Shape s;
    s.resize(n, value);
    return s;
  }

  /// Number of entries (the number of dims).
  int size() const { return n_; }
  /// True for the shape of a 0-dim (scalar) tensor.
  bool empty() const { return n_ == 0; }
  /// Entry i (unchecked).
  ///@{
  int64_t& operator[](int i) { return d_[i]; }
  int64_t operator[](int i) const { return d_[i]; }
  ///@}
  /// The last entry.
  int64_t back() const { return d_[n_ - 1]; }
  /// Iteration over the entries.
  ///@{
  const int64_t* begin() const { return d_.data(); }
  const int64_t* end() const { return d_.data() + n_; }
  int64_t* begin() { return d_.data(); }
  int64_t* end() { return d_.data() + n_; }
  ///@}
  /// Pointer to the first entry.
  const int64_t* data() const { return d_.data(); }

  /// Appends an entry; throws ShapeError beyond kMaxDims.
  void push_back(int64_t v) {
    EMBER_CHECK(n_ < kMaxDims, ShapeError, "tensors have at most ", kMaxDims, " dims");
    d_[n_++] = v;
  }
  /// Keeps the first n entries, filling new ones with value.
  void resize(int n, int64_t value = 0) {
    EMBER_CHECK(n >= 0 && n <= kMaxDims, ShapeError, "tensors have at most ", kMaxDims, " dims; got ", n);
    for (int i = n_; i < n; ++i) d_[i] = value;
    n_ = static_cast<uint8_t>(n);
  }
  /// Inserts v before entry pos.
  void insert(int pos, int64_t v) {
    push_back(0);
    for (int i = n_ - 1; i > pos; --i) d_[i] = d_[i - 1];
    d_[pos] = v;
  }
  /// Removes entry pos.
  void erase(int pos) {
    for (int i = pos; i + 1 < n_; ++i) d_[i] = d_[i + 1];
    --n_;
  }

  /// Product of the entries (1 for an empty shape: a scalar has one element).
  int64_t numel() const {
    int64_t p = 1;
    for (int i = 0; i < n_; ++i) p *= d_[i];
    return p;
  }

  /// The entries as a vector.
  std::vector<int64_t> vec() const { return std::vector<int64_t>(begin(), end()); }
  /// "[2, 3]": the form error messages use.
  std::string str() const;

  /// Same number of entries and equal entries.
  ///@{
  bool operator==(const Shape& o) const {
    if (n_ != o.n_) return false;
    for (int i = 0; i < n_; ++i)
      if (d_[i] != o.d_[i]) return false;
    return true;
  }
  bool operator!=(const Shape& o) const { return !(*this == o); }
  ///@}

 private:
  template <class It>
  void assign(It b, It e) {
    for (; b != e; ++b) push_back(*b);
  }
  std::array<int64_t, kMaxDims> d_{};
  uint8_t n_ = 0;
};

/// Prints str().
inline std::ostream& operator<<(std::ostream& os, const Shape& s) { return os << s.str(); }

/// Row-major (C-contiguous) strides for a shape.
Shape contiguous_strides(const Shape& shape);

/// Wraps a possibly negative dim into [0, ndim); throws IndexError naming op.
int wrap_dim(int64_t dim, int ndim, const char* op);

/// NumPy broadcasting of two shapes; throws ShapeError naming op and both shapes.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);

}  // namespace ember
