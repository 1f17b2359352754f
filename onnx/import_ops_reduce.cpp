// ONNX import: reductions, arg max/min, cumulative ops and top-k.
#include <ember/onnx/import_ops.h>

namespace ember::onnx::detail {

void register_reduce_ops(OpTable& t) { (void)t; }

}  // namespace ember::onnx::detail
