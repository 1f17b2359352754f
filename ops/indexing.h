/// \file
/// Indexing ops: picking elements or rows of a tensor by int64 indices, and
/// their adjoint, adding values into a tensor at indices.
///
/// The pairs are each other's backward: index_select <-> index_add and
/// gather <-> scatter_add; embedding is index_select of rows with a
/// padding row that receives no gradient. Indices are always int64 and are
/// checked against the indexed size before any kernel runs, so a bad index is
/// an IndexError naming the op, the value and the size, never a wild read.
/// Adding kernels are deterministic: each destination element is written by
/// one thread, which sums its contributions in index order.
#pragma once

#include <cstdint>
#include <optional>

#include <ember/core/dispatch.h>
#include <ember/core/tensor.h>

namespace ember {

/// out = x with dim `dim` replaced by index.numel() entries: out[..., k, ...] =
/// x[..., index[k], ...]. index is int64, 1-D (or 0-dim, one entry), values in
/// [0, x.size(dim)). Differentiable in x.
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);

/// out = x + src added at index along dim: out[..., index[k], ...] += src[..., k, ...]
/// (torch.index_add). src has x's shape except src.size(dim) == index.numel().
/// Differentiable in x and src.
Tensor index_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);

/// torch.gather: out has index's shape and out[i][j][k] = x[index[i][j][k]][j][k]
/// for dim = 0 (likewise for other dims). index has x's number of dims and
/// index.size(d) <= x.size(d) for d != dim. Differentiable in x.
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);

/// torch.scatter_add: out = x, then out[index[i][j][k]][j][k] += src[i][j][k]
/// for dim = 0 over every position of index. index.size(d) <= src.size(d) for
/// all d and <= x.size(d) for d != dim; src has x's dtype. Differentiable in x
/// and src.
Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);

/// self[..., index[k], ...] = src[..., k, ...] along dim, in place
/// (torch.Tensor.index_copy_): src has self's shape except src.size(dim) ==
/// index.numel(), and self's dtype and device; for a repeated index the
/// last k wins. Only the indexed slices are read or written, whatever self's
/// size (a KV cache's new row). Not differentiable: refused while grad mode
/// is on and self or src requires grad. Indices are checked on the host
/// (IndexError) before the kernel runs; inside a CUDA graph capture the
/// kernel itself reports a bad index to the graph's error record (no extra
/// launch) and writes nothing for it.
Tensor& index_copy_(Tensor& self, int64_t dim, const Tensor& index, const Tensor& src);

/// Rows of weight [V, D] picked by int64 indices of any shape: the result has
/// shape indices.shape + [D] (torch.nn.functional.embedding). The gradient of
/// weight adds each output row's gradient into the row it came from; the row
/// padding_idx (negative counts from V, as in PyTorch) receives none.
Tensor embedding(const Tensor& weight, const Tensor& indices, std::optional<int64_t> padding_idx = std::nullopt);

/// int64 one-hot encoding: shape indices.shape + [num_classes], 1 at each
/// index. num_classes = -1 uses max(indices) + 1. Not differentiable.
Tensor one_hot(const Tensor& indices, int64_t num_classes = -1);

// ---- kernel tables (backends register here) ---------------------------------
// All tensors are contiguous; index tensors are int64.

/// What index_check_kernel finds.
struct IndexCheckResult {
  int64_t bad_pos = -1;  ///< position of the first bad entry, or -1
  int64_t count = 0;     ///< entries that are not `ignore`; -1 where unknown on the host
  /// count as a 0-d int64 tensor on the index's device, where a backend
  /// counts there (CUDA); undefined otherwise. Inside a CUDA graph capture
  /// only this count exists (count is -1), and bad entries are reported
  /// after each replay instead (core/cuda_graph.h).
  Tensor count_device;
};
/// Scans index for an entry outside [0, size) that is not `ignore` (when
/// has_ignore). Returns the position of the first such entry, or -1; sets
/// count to the number of entries that are not `ignore`.
extern KernelTable<IndexCheckResult(const Tensor& index, int64_t size, bool has_ignore, int64_t ignore)>
    index_check_kernel;
/// The largest entry of a non-empty index tensor.
extern KernelTable<int64_t(const Tensor& index)> index_max_kernel;
/// out3[a, k, b] = x3[a, index[k], b]; any dtype.
extern KernelTable<void(const Tensor& x3, const Tensor& index, Tensor& out3)> index_select_kernel;
/// out3[a, index[k], b] += src3[a, k, b], in increasing k for each destination;
/// the destination row skip (when >= 0) is left untouched.
extern KernelTable<void(Tensor& out3, const Tensor& index, const Tensor& src3, int64_t skip)> index_add_kernel;
/// out = gather(x, dim, index); out has index's shape. Any dtype.
extern KernelTable<void(const Tensor& x, int64_t dim, const Tensor& index, Tensor& out)> gather_kernel;
/// self3[a, index[k], b] = src3[a, k, b], in increasing k; both 3-D views
/// with any strides (self3 written in place); an index outside
/// [0, self3.size(1)) writes nothing. Any dtype.
extern KernelTable<void(Tensor& self3, const Tensor& index, const Tensor& src3)> index_copy_kernel;
/// out[... index[p] along dim ...] += src[p] for every p; src has index's shape.
extern KernelTable<void(Tensor& out, int64_t dim, const Tensor& index, const Tensor& src)> scatter_add_kernel;
/// out (int64, zeroed by the kernel) [M, C]: out[m, index[m]] = 1.
extern KernelTable<void(const Tensor& index, Tensor& out)> one_hot_kernel;

/// Runs index_check_kernel on index (int64, any layout). Returns the value of
/// the first entry outside [0, size) other than ignore_index, if any; count
/// (when given) receives the number of entries that are not ignore_index.
/// Callers throw IndexError with their own message.
/// count_device (when given) receives IndexCheckResult::count_device.
std::optional<int64_t> find_bad_index(const Tensor& index, int64_t size, std::optional<int64_t> ignore_index = {},
                                      int64_t* count = nullptr, Tensor* count_device = nullptr);

}  // namespace ember
