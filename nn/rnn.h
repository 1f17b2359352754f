/// \file
/// Recurrent layers with torch.nn's semantics, options and parameter names:
/// GRU, LSTM (multi-layer, bidirectional, dropout between layers,
/// batch_first, optional initial states) and the single-step GRUCell and
/// LSTMCell.
///
/// Gate orders and formulas are PyTorch's, so weights carry over by name:
/// \code
///   GRU  (gates r, z, n stacked in weight_ih/weight_hh rows):
///     r = sigmoid(W_ir x + b_ir + W_hr h + b_hr)
///     z = sigmoid(W_iz x + b_iz + W_hz h + b_hz)
///     n = tanh(W_in x + b_in + r * (W_hn h + b_hn))
///     h' = (1 - z) * n + z * h
///   LSTM (gates i, f, g, o):
///     i, f, o = sigmoid(...), g = tanh(...),  c' = f * c + i * g,  h' = o * tanh(c')
/// \endcode
/// Every weight and bias starts U(-1/sqrt(hidden_size), 1/sqrt(hidden_size)).
///
/// Variable-length batches: pass int64 `lengths` (batch,) instead of packing.
/// Steps t >= lengths[b] leave sequence b's state unchanged (state = mask ?
/// new : old), so the final state is the state after its last valid step, as
/// with PyTorch's packed sequences; the outputs there are zero (as
/// pad_packed_sequence gives), and the reverse direction of a bidirectional
/// layer starts at each sequence's last valid step.
///
/// Everything is composed from Ember's ops, so autograd differentiates it.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ember/nn/layers.h>

namespace ember::nn {

/// GRU and LSTM options, as PyTorch's constructor arguments.
struct RNNOptions {
  int64_t num_layers = 1;      ///< stacked layers
  bool bias = true;            ///< b_ih and b_hh in every layer
  bool batch_first = false;    ///< input/output (batch, seq, feature); states stay (layers*dirs, batch, hidden)
  double dropout = 0.0;        ///< on the outputs of every layer but the last, in training mode
  bool bidirectional = false;  ///< a second, reverse-direction pass per layer
};

/// h and c of an LSTM, each (num_layers * num_directions, batch, hidden_size)
/// (or without the batch dim for unbatched input). Undefined means zeros.
struct LSTMState {
  ///@{
  Tensor h, c;  ///< hidden and cell state
  ///@}
};

/// What GRU and LSTM share: options, the parameters of every (layer,
/// direction) and the checks on inputs and initial states.
class RNNBase : public Module {
 public:
  /// Registers the parameters of every (layer, direction) with PyTorch's
  /// names and initialisation; gates: 3 (GRU) or 4 (LSTM).
  RNNBase(int64_t input_size, int64_t hidden_size, RNNOptions opts, int gates, TensorOptions topts);
  std::string extra_repr() const override;
  ///@{
  int64_t input_size, hidden_size;  ///< the sizes of an input step and of the state
  ///@}
  RNNOptions opts;  ///< the options given
  /// 2 when bidirectional, else 1.
  int64_t num_directions() const { return opts.bidirectional ? 2 : 1; }
  /// The parameters of one (layer, direction), in PyTorch's order: weight_ih,
  /// weight_hh, bias_ih, bias_hh (biases undefined without bias).
  struct Weights {
    ///@{
    Tensor w_ih, w_hh, b_ih, b_hh;  ///< (gates H, in), (gates H, H), (gates H), (gates H)
    ///@}
  };
  /// The parameters of layer `layer`, direction `direction` (1 = reverse).
  const Weights& weights(int64_t layer, int64_t direction) const { return w_[layer * num_directions() + direction]; }

 protected:
  /// The input as (seq, batch, feature) and whether it had a batch dim;
  /// checks the feature size and the lengths.
  Tensor prepare_input(const std::string& op, const Tensor& input, bool& batched, const Tensor& lengths) const;
  /// An initial state (zeros when undefined), checked against
  /// (layers*dirs, batch, hidden); returned with a batch dim.
  Tensor prepare_state(const std::string& op, const std::string& name, const Tensor& state, const Tensor& x,
                       bool batched) const;
  /// An output or a final state in the caller's layout: batch first when
  /// batch_first, without the batch dim for unbatched input.
  ///@{
  Tensor finish_output(const Tensor& out, bool batched) const;
  Tensor finish_state(const Tensor& state, bool batched) const;
  ///@}

 private:
  std::vector<Weights> w_;
  int gates_;
};

/// Returns (output, h_n): output (seq, batch, num_directions * hidden_size)
/// (batch first with batch_first), h_n (num_layers * num_directions, batch,
/// hidden_size). Unbatched input (seq, input_size) gives unbatched results.
class GRU : public RNNBase {
 public:
  /// A GRU from input_size to hidden_size features per direction.
  GRU(int64_t input_size, int64_t hidden_size, RNNOptions opts = {}, TensorOptions topts = {});
  /// input (seq, batch, input_size), h0 as h_n (zeros when undefined);
  /// lengths (batch) int64: sequence b's valid steps (its state is kept and
  /// its outputs are zero past them, as pack_padded_sequence gives).
  std::pair<Tensor, Tensor> forward(const Tensor& input, const Tensor& h0, const Tensor& lengths = Tensor());
  Tensor forward(const Tensor& input) override { return forward(input, Tensor()).first; }
  std::string type_name() const override { return "GRU"; }
};

/// Returns (output, {h_n, c_n}), shapes as GRU's.
class LSTM : public RNNBase {
 public:
  /// An LSTM from input_size to hidden_size features per direction.
  LSTM(int64_t input_size, int64_t hidden_size, RNNOptions opts = {}, TensorOptions topts = {});
  /// As GRU::forward, with an (h0, c0) state.
  std::pair<Tensor, LSTMState> forward(const Tensor& input, const LSTMState& state, const Tensor& lengths = Tensor());
  Tensor forward(const Tensor& input) override { return forward(input, LSTMState{}).first; }
  std::string type_name() const override { return "LSTM"; }
};

/// One GRU step: x (batch, input_size) or (input_size), h the same with
/// hidden_size (zeros when undefined) -> h'. Parameters weight_ih (3H, I),
/// weight_hh (3H, H), bias_ih, bias_hh (3H).
class GRUCell : public Module {
 public:
  /// A cell from input_size to hidden_size, PyTorch's initialisation.
  GRUCell(int64_t input_size, int64_t hidden_size, bool bias = true, TensorOptions topts = {});
  /// h' from x and h.
  Tensor forward(const Tensor& x, const Tensor& h);
  Tensor forward(const Tensor& x) override { return forward(x, Tensor()); }
  std::string type_name() const override { return "GRUCell"; }
  std::string extra_repr() const override;
  ///@{
  int64_t input_size, hidden_size;  ///< the sizes of x and h
  ///@}
  ///@{
  Tensor weight_ih, weight_hh, bias_ih, bias_hh;  ///< the parameters (biases undefined without bias)
  ///@}
};

/// One LSTM step: (x, {h, c}) -> {h', c'}; parameters as GRUCell's with 4H rows.
class LSTMCell : public Module {
 public:
  /// A cell from input_size to hidden_size, PyTorch's initialisation.
  LSTMCell(int64_t input_size, int64_t hidden_size, bool bias = true, TensorOptions topts = {});
  /// {h', c'} from x and {h, c}.
  LSTMState forward(const Tensor& x, const LSTMState& state);
  Tensor forward(const Tensor& x) override { return forward(x, LSTMState{}).h; }
  std::string type_name() const override { return "LSTMCell"; }
  std::string extra_repr() const override;
  ///@{
  int64_t input_size, hidden_size;  ///< the sizes of x and h
  ///@}
  ///@{
  Tensor weight_ih, weight_hh, bias_ih, bias_hh;  ///< the parameters (biases undefined without bias)
  ///@}
};

/// The step functions behind the layers and cells, for models that drive the
/// recurrence themselves (a decoder feeding attention back in). gi is the
/// input projection W_ih x + b_ih (batch, gates * H), computed by the caller
/// (for a whole sequence at once when the inputs are known in advance).
///@{
Tensor gru_step(const Tensor& gi, const Tensor& h, const Tensor& w_hh, const Tensor& b_hh);
LSTMState lstm_step(const Tensor& gi, const LSTMState& state, const Tensor& w_hh, const Tensor& b_hh);
///@}

}  // namespace ember::nn
