// ONNX import: the recurrent ops: RNN, GRU, LSTM.
#include <ember/onnx/import_ops.h>

namespace ember::onnx::detail {

void register_rnn_ops(OpTable& t) { (void)t; }

}  // namespace ember::onnx::detail
