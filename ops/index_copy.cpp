// index_copy_ (ops/indexing.h): slices of src written into self at int64
// indices along a dim, in place, touching only the indexed slices; its CPU
// kernel (cuda/indexing.cu has the CUDA one). What a KV cache needs to take
// a new row at a position held in device memory: one launch, no read of the
// rest of the cache.
#include <ember/core/autograd.h>
#include <ember/core/cuda_graph.h>
#include <ember/core/dtype_dispatch.h>
#include <ember/ops/indexing.h>
#include <ember/ops/pointwise.h>

#include <algorithm>

namespace ember {

decltype(index_copy_kernel) index_copy_kernel("index_copy");

namespace {

// self3[a, index[k], b] = src3[a, k, b] on strided views; later k win.
void cpu_index_copy(Tensor& self3, const Tensor& index, const Tensor& src3) {
  const int64_t A = self3.size(0), N = self3.size(1), B = self3.size(2), K = index.numel();
  const int64_t* idx = index.data<int64_t>();
  dispatch_all(self3.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* out = static_cast<T*>(self3.data_ptr());
    const T* src = static_cast<const T*>(src3.data_ptr());
    const int64_t o0 = self3.stride(0), o1 = self3.stride(1), o2 = self3.stride(2);
    const int64_t s0 = src3.stride(0), s1 = src3.stride(1), s2 = src3.stride(2);
    for (int64_t a = 0; a < A; ++a)
      for (int64_t k = 0; k < K; ++k) {
        const int64_t n = idx[k];
        if (n < 0 || n >= N) continue;
        for (int64_t b = 0; b < B; ++b) out[a * o0 + n * o1 + b * o2] = src[a * s0 + k * s1 + b * s2];
      }
  });
}
EMBER_REGISTER_KERNEL(index_copy_kernel, CPU, cpu_index_copy);

// x as an [A, x.size(d), B] view of its own memory (the dims before d and
// after it each merged), or undefined where its strides allow none.
Tensor view_3d(const Tensor& x, int d) {
  int64_t A = 1, B = 1;
  for (int i = 0; i < d; ++i) A *= x.size(i);
  for (int i = d + 1; i < x.dim(); ++i) B *= x.size(i);
  try {
    return x.detach().view({A, x.size(d), B});
  } catch (const ShapeError&) {
    return Tensor();
  }
}

}  // namespace

Tensor& index_copy_(Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) {
  EMBER_CHECK(self.defined() && index.defined() && src.defined(), ValueError, "index_copy_: got an undefined tensor");
  const int d = wrap_dim(dim, std::max(self.dim(), 1), "index_copy_");
  EMBER_CHECK(index.dtype() == DType::Int64, DTypeError, "index_copy_: index must be an int64 tensor, got ",
              dtype_name(index.dtype()), " (index shape ", index.shape().str(), ")");
  EMBER_CHECK(index.dim() <= 1, ShapeError, "index_copy_: index must be 0-D or 1-D, got ", index.shape().str());
  check_same_device("index_copy_", self, index);
  check_same_device("index_copy_", self, src);
  EMBER_CHECK(src.dtype() == self.dtype(), DTypeError, "index_copy_: src (", dtype_name(src.dtype()),
              ") must have self's dtype (", dtype_name(self.dtype()), ")");
  EMBER_CHECK(!(autograd::grad_enabled() && (self.requires_grad() || src.requires_grad())), AutogradError,
              "index_copy_: not differentiable; self ", self.shape().str(), " or src ", src.shape().str(),
              " requires grad (wrap the update in NoGradGuard)");
  // A 0-D self is a 1-D self of one entry, as in PyTorch.
  const Tensor s = self.dim() == 0 ? self.view({1}) : self;
  const Tensor sr = src.dim() == 0 ? src.view({1}) : src;
  bool fits = sr.dim() == s.dim() && sr.size(d) == index.numel();
  for (int i = 0; fits && i < s.dim(); ++i) fits = i == d || sr.size(i) == s.size(i);
  EMBER_CHECK(fits, ShapeError, "index_copy_: src ", src.shape().str(), " must be self ", self.shape().str(),
              " with dim ", d, " of index.numel() = ", index.numel(), " entries");
  if (index.numel() == 0 || s.numel() == 0) return self;
  const int64_t N = s.size(d);
  const Tensor idx = index.contiguous().view({index.numel()});
  // Inside a capture nothing can be read back: the kernel reports a bad
  // index to the graph's error record instead, and replay() throws.
  if (!is_capturing(self.device()))
    if (auto bad = find_bad_index(idx, N))
      EMBER_CHECK(false, IndexError, "index_copy_: index ", *bad, " is out of range for dim ", d, " with size ", N,
                  " (self shape ", self.shape().str(), ")");
  Tensor src3 = view_3d(sr, d);
  if (!src3.defined()) src3 = view_3d(sr.contiguous(), d);
  Tensor self3 = view_3d(s, d);
  if (self3.defined()) {
    index_copy_kernel(self.device(), self3, idx, src3);
  } else {  // strides that merge into no 3-D view: through a contiguous copy
    Tensor c = s.contiguous();
    Tensor c3 = view_3d(c, d);
    index_copy_kernel(self.device(), c3, idx, src3);
    Tensor target = s;
    target.copy_(c);
  }
  self.bump_version();
  return self;
}

}  // namespace ember
