// The importer's op table: every group's registration, once.
#include <ember/onnx/import_ops.h>

namespace ember::onnx::detail {

const OpTable& op_table() {
  static const OpTable table = [] {
    OpTable t;
    register_elementwise_ops(t);
    register_activation_ops(t);
    register_tensor_ops(t);
    register_indexing_ops(t);
    register_quantize_ops(t);
    register_signal_ops(t);
    register_detection_ops(t);
    register_text_ops(t);
    register_reduce_ops(t);
    register_nn_ops(t);
    register_conv_ops(t);
    register_loss_ops(t);
    register_resize_ops(t);
    register_sampling_ops(t);
    register_rnn_ops(t);
    return t;
  }();
  return table;
}

}  // namespace ember::onnx::detail
