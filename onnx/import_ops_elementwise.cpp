// ONNX import: arithmetic, math, comparison, logic and activation ops.
#include <ember/onnx/import_ops.h>

namespace ember::onnx::detail {

void register_elementwise_ops(OpTable& t) { (void)t; }

}  // namespace ember::onnx::detail
