/// \file
/// Tensor: a cheap, shared handle onto a strided view of a Storage.
///
/// A Tensor is one shared_ptr to a TensorImpl holding shape, strides, offset
/// (in elements), dtype and the storage; copying a Tensor copies the handle,
/// never the data (as in PyTorch). Views (transpose, narrow, expand, ...) make
/// a new TensorImpl over the same Storage. Autograd state lives in an optional
/// AutogradMeta, allocated only for tensors that take part in autograd, so a
/// plain tensor costs nothing for it.
///
/// The view methods and the conversions declared here are implemented in
/// ops/ (ops/view.cpp, ops/copy.cpp) because they are differentiable ops
/// with their own kernels; the rest is in core/tensor.cpp.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ember/core/device.h>
#include <ember/core/dtype.h>
#include <ember/core/error.h>
#include <ember/core/shape.h>
#include <ember/core/storage.h>

namespace ember {

namespace autograd {
class Node;
struct AutogradMeta;
}  // namespace autograd

/// What a Tensor handle points to: a view (shape, strides, offset, dtype) of a Storage, plus autograd's data.
struct TensorImpl {
  std::shared_ptr<Storage> storage;                  ///< the memory, shared with every view
  Shape shape;                                       ///< sizes, outermost first
  Shape strides;                                     ///< in elements
  int64_t offset = 0;                                ///< in elements
  DType dtype = DType::Float32;                      ///< element type
  std::unique_ptr<autograd::AutogradMeta> autograd;  ///< null unless autograd touched it

  /// A view of s with this geometry and dtype.
  TensorImpl(std::shared_ptr<Storage> s, const Shape& sh, const Shape& st, int64_t off, DType dt);
  ~TensorImpl();
};

/// An n-dimensional strided array on a device: a shared handle (copying a Tensor shares the data, as in
/// PyTorch; clone() copies it). Ops are free functions (ops/); autograd records them when an input
/// requires grad.
class Tensor {
 public:
  Tensor() = default;  ///< undefined: defined() is false
  /// A handle to impl.
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // ---- metadata -------------------------------------------------------------
  /// False for a default-constructed (undefined) tensor.
  bool defined() const { return impl_ != nullptr; }
  /// Sizes, outermost first.
  const Shape& shape() const { return impl().shape; }
  /// Strides in elements, one per dim.
  const Shape& strides() const { return impl().strides; }
  /// Number of dims (0 for a scalar).
  int dim() const { return impl().shape.size(); }
  int64_t size(int64_t dim) const;  ///< negative dims count from the end
  /// Stride of one dim, in elements (negative dims count from the end).
  int64_t stride(int64_t dim) const;
  /// Number of elements (1 for a 0-dim tensor).
  int64_t numel() const { return impl().shape.numel(); }
  /// Position of the first element in the storage, in elements.
  int64_t offset() const { return impl().offset; }
  /// Element type.
  DType dtype() const { return impl().dtype; }
  /// Where the data lives.
  Device device() const { return impl().storage->device(); }
  /// Row-major with no gaps (size-1 dims may have any stride).
  bool is_contiguous() const;
  /// float32 or float64.
  bool is_floating_point() const { return is_floating(dtype()); }
  /// Bytes per element.
  size_t element_size() const { return itemsize(dtype()); }
  /// The memory shared with every view of this tensor.
  const std::shared_ptr<Storage>& storage() const { return impl().storage; }
  /// Identity of the underlying TensorImpl (two handles to one tensor).
  ///@{
  bool is_same(const Tensor& o) const { return impl_ == o.impl_; }
  TensorImpl* unsafe_impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  ///@}

  /// Pointer to the first element. The typed form checks the dtype.
  ///@{
  void* data_ptr() const;
  template <class T>
  T* data() const {
    EMBER_CHECK(dtype() == dtype_of_v<T>, DTypeError, "data<", dtype_name(dtype_of_v<T>),
                ">() called on a tensor of dtype ", dtype_name(dtype()));
    return static_cast<T*>(data_ptr());
  }
  ///@}

  // ---- values ---------------------------------------------------------------
  /// The single value of a one-element tensor (copied to the host if needed).
  template <class T = double>
  T item() const;
  /// The element at a full index, e.g. t.at<float>({1, 2}).
  template <class T = double>
  T at(std::initializer_list<int64_t> index) const;
  /// All elements in row-major order, converted to T.
  template <class T>
  std::vector<T> to_vector() const;
  std::string str() const;  ///< like PyTorch's repr; also operator<<

  // ---- views (share storage, no copy) ---------------------------------------
  // Views share this tensor's storage (and version counter): writing through
  // one is seen by the other. All are differentiable.
  Tensor view(const Shape& shape) const;     ///< throws if strides forbid a view
  Tensor reshape(const Shape& shape) const;  ///< view when possible, else a copy
  /// Swaps two dims.
  Tensor transpose(int64_t dim0, int64_t dim1) const;
  Tensor t() const;  ///< transpose of a 2-D tensor (a 1-D tensor is returned as is)
  /// Reorders the dims: result dim i is this tensor's dim dims[i].
  Tensor permute(const Shape& dims) const;
  /// length entries of dim from start.
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  /// Entries start, start + step, ... before end of dim (negative start/end count from the end).
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;
  /// Entry index of dim, which is removed.
  Tensor select(int64_t dim, int64_t index) const;
  /// select(0, index).
  Tensor operator[](int64_t index) const { return select(0, index); }
  /// A size-1 dim inserted at dim.
  Tensor unsqueeze(int64_t dim) const;
  /// Without its size-1 dims (all of them, or dim if it has size 1).
  ///@{
  Tensor squeeze() const;
  Tensor squeeze(int64_t dim) const;
  ///@}
  Tensor expand(const Shape& shape) const;  ///< -1 keeps a size
  /// expand(other.shape()).
  Tensor expand_as(const Tensor& other) const { return expand(other.shape()); }
  /// Dims start_dim..end_dim merged into one.
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  /// dim split into sizes (one entry may be -1).
  Tensor unflatten(int64_t dim, const Shape& sizes) const;

  // ---- copies and conversions -----------------------------------------------
  Tensor contiguous() const;  ///< this tensor when already contiguous
  /// A contiguous copy with its own storage (differentiable).
  Tensor clone() const;
  Tensor to(DType dtype) const;    ///< differentiable between floating dtypes
  Tensor to(Device device) const;  ///< differentiable
  /// to(the CPU).
  Tensor cpu() const { return to(Device(DeviceType::CPU)); }

  // ---- reductions as methods, as libtorch's (ops/reduce.h) ------------------
  /// sum(*this), sum(*this, dims, keepdim).
  ///@{
  Tensor sum() const;
  Tensor sum(const Shape& dims, bool keepdim = false) const;
  ///@}
  /// mean(*this), mean(*this, dims, keepdim).
  ///@{
  Tensor mean() const;
  Tensor mean(const Shape& dims, bool keepdim = false) const;
  ///@}
  /// argmax(*this) (the flat index), argmax(*this, dim, keepdim).
  ///@{
  Tensor argmax() const;
  Tensor argmax(int64_t dim, bool keepdim = false) const;
  ///@}

  // ---- in place (bump the version counter) ----------------------------------
  // Not recorded by autograd: on a tensor that requires grad they throw
  // AutogradError unless grad mode is off (NoGradGuard).
  /// Sets every element to value.
  Tensor& fill_(double value);
  /// fill_(0).
  Tensor& zero_() { return fill_(0.0); }
  Tensor& copy_(const Tensor& src);  ///< src broadcast to this shape, any dtype/device
  /// The storage's version counter, which in-place writes bump (SavedTensor compares it).
  ///@{
  void bump_version() const { impl().storage->bump_version(); }
  uint64_t version() const { return impl().storage->version(); }
  ///@}

  // ---- autograd -------------------------------------------------------------
  /// True for a leaf marked with requires_grad_() and for any result of an op
  /// recorded on such tensors.
  bool requires_grad() const;
  /// Marks a leaf as needing a gradient. Only floating tensors can.
  Tensor& requires_grad_(bool on = true);
  /// The accumulated gradient (undefined until a backward reaches this leaf).
  const Tensor& grad() const;
  /// The gradient slot itself (optimizers and the engine write it).
  Tensor& mutable_grad();
  /// Clears the gradient: to undefined, or to zeros when not set_to_none.
  void zero_grad(bool set_to_none = true);
  /// Keep the gradient of a non-leaf tensor in grad() after backward.
  void retain_grad();
  /// No grad_fn: made by the user, not by a recorded op.
  bool is_leaf() const;
  /// The node of the op that made this tensor (null for leaves).
  std::shared_ptr<autograd::Node> grad_fn() const;
  /// Back-propagates from this tensor. Without grad, it must have one element.
  void backward(const Tensor& grad = Tensor(), bool retain_graph = false) const;
  /// A tensor sharing this one's data, cut off from the graph.
  Tensor detach() const;

 private:
  TensorImpl& impl() const {
    EMBER_CHECK(impl_ != nullptr, ValueError, "operation on an undefined tensor");
    return *impl_;
  }
  std::shared_ptr<TensorImpl> impl_;
};

/// Prints t.str().
std::ostream& operator<<(std::ostream& os, const Tensor& t);

/// Named tensors in a fixed order: module weights, optimizer and scheduler
/// state, checkpoint contents.
using StateDict = std::vector<std::pair<std::string, Tensor>>;

// ---- construction -----------------------------------------------------------
/// Options for factories, in PyTorch's spirit: empty({2, 3}, kFloat64).
struct TensorOptions {
  DType dtype = DType::Float32;  ///< element type
  Device device = kCPU;          ///< where the memory lives
  bool requires_grad = false;    ///< make the result a leaf that requires grad
  TensorOptions() = default;
  /// Options with this dtype, device, or both (the rest default).
  ///@{
  TensorOptions(DType d) : dtype(d) {}    // NOLINT: implicit so a dtype alone works
  TensorOptions(Device d) : device(d) {}  // NOLINT
  TensorOptions(DType d, Device dev) : dtype(d), device(dev) {}
  ///@}
  /// A copy with requires_grad set.
  TensorOptions with_requires_grad(bool r = true) const {
    TensorOptions o = *this;
    o.requires_grad = r;
    return o;
  }
};

/// Uninitialised memory, contiguous.
Tensor empty(const Shape& shape, TensorOptions opts = {});
/// A tensor with the given shape and strides over fresh storage of the right size.
///@{
Tensor empty_strided(const Shape& shape, const Shape& strides, TensorOptions opts = {});
Tensor empty_like(const Tensor& t);
///@}
/// A new tensor viewing t's storage with the given geometry (no autograd).
Tensor make_view(const Tensor& t, const Shape& shape, const Shape& strides, int64_t offset);

/// Copies host data into a new tensor (of the dtype of T unless opts says else).
///@{
template <class T>
Tensor from_vector(const std::vector<T>& values, const Shape& shape, TensorOptions opts);
template <class T>
Tensor from_vector(const std::vector<T>& values, const Shape& shape) {
  return from_vector(values, shape, TensorOptions(dtype_of_v<T>));
}
template <class T>
Tensor from_vector(const std::vector<T>& values) {
  return from_vector(values, Shape{static_cast<int64_t>(values.size())});
}
template <class T>
Tensor from_data(const T* data, const Shape& shape, TensorOptions opts = TensorOptions(dtype_of_v<T>));
///@}
/// A nested-list literal: tensor({{1, 2}, {3, 4}}) is a 2x2 float32 tensor.
///@{
Tensor tensor(std::initializer_list<double> values, TensorOptions opts = {});
Tensor tensor(std::initializer_list<std::initializer_list<double>> values, TensorOptions opts = {});
Tensor tensor(std::initializer_list<std::initializer_list<std::initializer_list<double>>> values,
              TensorOptions opts = {});
///@}
/// A 0-dim tensor holding one value.
Tensor scalar_tensor(double value, TensorOptions opts = {});

}  // namespace ember
