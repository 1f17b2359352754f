// CUDA kernel of ops/matmul.cpp: every product (mm, bmm, matmul, linear and
// their backward) arrives as one GemmDesc and goes to cuBLAS.
//
// cuBLAS is column-major; a row-major matrix is its transpose in column-major
// terms, so row-major C = op(A) op(B) is computed as column-major
// C^T = op(B)^T op(A)^T: operands swapped, m and n swapped, and each
// operand's transpose flag passed through unchanged (no copies). Batch dims
// that merge into one stride per operand (including stride 0 for a
// broadcast operand) become strided-batched dims; the largest is cuBLAS's
// batch (one cublas?gemmStridedBatched call) and any others are walked on
// the host around it. TF32 is off unless cuda::set_allow_tf32(true)
// (float32 products only).
//
// bfloat16 and float16 operands go to cublasGemmStridedBatchedEx with
// CUBLAS_COMPUTE_32F: products accumulated in float32 (tensor cores where
// the GPU has them), C of the operands' dtype rounded once, or float32, and
// alpha, beta in float32, as PyTorch's CUDA matmul does by default (it allows
// reduced-precision reductions in fp16 only on request; Ember never does).
#include <climits>
#include <utility>

#include <ember/core/dtype_dispatch.h>
#include <ember/cuda/common.h>
#include <ember/ops/copy.h>
#include <ember/ops/half_ops.h>
#include <ember/ops/matmul.h>

namespace ember::cuda {
namespace {

cublasStatus_t gemm_batched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                            const float* alpha, const float* A, int lda, long long sa, const float* B, int ldb,
                            long long sb, const float* beta, float* C, int ldc, long long sc, int batch) {
  return cublasSgemmStridedBatched(h, ta, tb, m, n, k, alpha, A, lda, sa, B, ldb, sb, beta, C, ldc, sc, batch);
}
cublasStatus_t gemm_batched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                            const double* alpha, const double* A, int lda, long long sa, const double* B, int ldb,
                            long long sb, const double* beta, double* C, int ldc, long long sc, int batch) {
  return cublasDgemmStridedBatched(h, ta, tb, m, n, k, alpha, A, lda, sa, B, ldb, sb, beta, C, ldc, sc, batch);
}

cudaDataType cuda_data_type(DType dt) {
  switch (dt) {
    case DType::BFloat16:
      return CUDA_R_16BF;
    case DType::Float16:
      return CUDA_R_16F;
    default:
      return CUDA_R_32F;
  }
}

void cuda_gemm(const GemmDesc& d) {
  for (int64_t v : {d.m, d.n, d.k, d.lda, d.ldb, d.ldc})
    EMBER_CHECK(v <= INT_MAX, ValueError, "matmul: size ", v, " exceeds the 32-bit range of cuBLAS (m=", d.m,
                ", n=", d.n, ", k=", d.k, ")");
  // Merge batch dims: dim i folds into dim i-1 when every operand's stride
  // of i-1 equals stride(i) * size(i).
  int nb = 0;
  int64_t size[kMaxDims], sa[kMaxDims], sb[kMaxDims], sc[kMaxDims];
  for (int i = 0; i < d.batch.size(); ++i) {
    if (d.batch[i] == 1) continue;
    if (nb > 0 && sa[nb - 1] == d.a_batch_strides[i] * d.batch[i] && sb[nb - 1] == d.b_batch_strides[i] * d.batch[i] &&
        sc[nb - 1] == d.c_batch_strides[i] * d.batch[i]) {
      size[nb - 1] *= d.batch[i];
      sa[nb - 1] = d.a_batch_strides[i];
      sb[nb - 1] = d.b_batch_strides[i];
      sc[nb - 1] = d.c_batch_strides[i];
      continue;
    }
    size[nb] = d.batch[i];
    sa[nb] = d.a_batch_strides[i];
    sb[nb] = d.b_batch_strides[i];
    sc[nb] = d.c_batch_strides[i];
    ++nb;
  }
  // cuBLAS's batch is the largest remaining dim and the others loop here:
  // attention's per-head views (N, H, L, D) of an (N, L, H*D) tensor do not
  // merge, and looping over the H heads (4) with the N sequences (256) as
  // the batch costs 4 calls instead of 256 (measured on an H200: a ViT
  // training step was launch-bound, 27 ms, on such loops).
  if (nb > 1) {
    int j = 0;
    for (int i = 1; i < nb; ++i)
      if (size[i] > size[j]) j = i;
    std::swap(size[j], size[nb - 1]);
    std::swap(sa[j], sa[nb - 1]);
    std::swap(sb[j], sb[nb - 1]);
    std::swap(sc[j], sc[nb - 1]);
  }
  const int64_t inner = nb ? size[nb - 1] : 1;
  EMBER_CHECK(inner <= INT_MAX, ValueError, "matmul: batch of ", inner, " exceeds cuBLAS's 32-bit range");
  int64_t outer = 1;
  for (int i = 0; i + 1 < nb; ++i) outer *= size[i];
  const int dev = d.c.device().index;
  cublasHandle_t h = cublas_handle(dev);
  const cublasOperation_t op_a = d.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = d.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  // The bias broadcast into every row of every C_i by the copy kernel (in C's
  // dtype), then the product accumulated onto it (beta = 1).
  double beta_d = d.beta;
  if (d.bias.defined()) {
    Shape shape = d.batch, cs = d.c_batch_strides;
    shape.push_back(d.m);
    shape.push_back(d.n);
    cs.push_back(d.ldc);
    cs.push_back(1);
    Shape bs = Shape::filled(shape.size(), 0);
    bs[bs.size() - 1] = 1;
    Tensor cv = make_view(d.c, shape, cs, d.c.offset());
    copy_kernel(d.c.device(), make_view(d.bias, shape, bs, d.bias.offset()), cv);
    beta_d = 1;
  }
  // The outer batch dims' element offsets of A, B, C for index o.
  const auto offsets = [&](int64_t o, int64_t& oa, int64_t& ob, int64_t& oc) {
    int64_t rest = o;
    oa = ob = oc = 0;
    for (int i = nb - 2; i >= 0; --i) {
      const int64_t idx = rest % size[i];
      rest /= size[i];
      oa += idx * sa[i];
      ob += idx * sb[i];
      oc += idx * sc[i];
    }
  };
  const long long ia = nb ? sa[nb - 1] : 0, ib = nb ? sb[nb - 1] : 0, ic = nb ? sc[nb - 1] : 0;
  if (is_half(d.a.dtype())) {
    EMBER_CHECK(d.b.dtype() == d.a.dtype() && (d.c.dtype() == d.a.dtype() || d.c.dtype() == DType::Float32), DTypeError,
                "matmul: 16-bit operands of one dtype with a result of that dtype or float32 expected, got ",
                dtype_name(d.a.dtype()), ", ", dtype_name(d.b.dtype()), " -> ", dtype_name(d.c.dtype()));
    const float alpha = static_cast<float>(d.alpha), beta = static_cast<float>(beta_d);
    const cudaDataType in_t = cuda_data_type(d.a.dtype()), out_t = cuda_data_type(d.c.dtype());
    const int64_t es = 2, cs = static_cast<int64_t>(d.c.element_size());
    const char* A = static_cast<const char*>(d.a.data_ptr());
    const char* B = static_cast<const char*>(d.b.data_ptr());
    char* C = static_cast<char*>(d.c.data_ptr());
    for (int64_t o = 0; o < outer; ++o) {
      int64_t oa, ob, oc;
      offsets(o, oa, ob, oc);
      // Column-major: C^T [n x m] = op(B)^T [n x k] @ op(A)^T [k x m].
      profiler::add_device_launch();
      EMBER_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
          h, op_b, op_a, static_cast<int>(d.n), static_cast<int>(d.m), static_cast<int>(d.k), &alpha, B + ob * es, in_t,
          static_cast<int>(d.ldb), ib, A + oa * es, in_t, static_cast<int>(d.lda), ia, &beta, C + oc * cs, out_t,
          static_cast<int>(d.ldc), ic, static_cast<int>(inner), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    }
    return;
  }
  dispatch_floating(d.c.dtype(), "matmul", [&](auto tag) {
    using T = decltype(tag);
    const T* A = static_cast<const T*>(d.a.data_ptr());
    const T* B = static_cast<const T*>(d.b.data_ptr());
    T* C = static_cast<T*>(d.c.data_ptr());
    const T alpha = static_cast<T>(d.alpha);
    const T beta = static_cast<T>(beta_d);
    for (int64_t o = 0; o < outer; ++o) {
      int64_t oa, ob, oc;
      offsets(o, oa, ob, oc);
      // Column-major: C^T [n x m] = op(B)^T [n x k] @ op(A)^T [k x m].
      profiler::add_device_launch();
      EMBER_CUBLAS_CHECK(gemm_batched(h, op_b, op_a, static_cast<int>(d.n), static_cast<int>(d.m),
                                      static_cast<int>(d.k), &alpha, B + ob, static_cast<int>(d.ldb), ib, A + oa,
                                      static_cast<int>(d.lda), ia, &beta, C + oc, static_cast<int>(d.ldc), ic,
                                      static_cast<int>(inner)));
    }
  });
}

}  // namespace

EMBER_REGISTER_KERNEL(gemm_kernel, CUDA, cuda_gemm);
// 16-bit GemmDescs welcome: ops/matmul.cpp may ask takes_half(gemm_kernel, device).
EMBER_REGISTER_HALF_KERNEL(gemm_kernel, CUDA);

}  // namespace ember::cuda
