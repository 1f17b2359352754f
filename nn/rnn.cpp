// GRU, LSTM and their cells, composed from ops so autograd differentiates
// them (see rnn.h for the formulas).
//
// The fast way to run a recurrence on a CPU: the input projection
// W_ih x_t + b_ih does not depend on the state, so it is one GEMM over all
// time steps, (seq * batch, in) x (in, gates * H); only the hidden
// projection W_hh h_{t-1} + b_hh (a small GEMM) and the gate arithmetic run
// once per step.
#include <ember/nn/rnn.h>

#include <cmath>

#include <ember/nn/init.h>
#include <ember/ops/activation.h>
#include <ember/ops/dropout.h>
#include <ember/ops/elementwise.h>
#include <ember/ops/factory.h>
#include <ember/ops/join.h>
#include <ember/ops/matmul.h>

namespace ember::nn {

// ---- step functions ---------------------------------------------------------
// The gate blocks are taken apart with split/chunk, which record one graph
// node for all pieces (backward is one cat), not one per narrow view (each
// of which would write a zero-filled gradient of the whole block).
Tensor gru_step(const Tensor& gi, const Tensor& h, const Tensor& w_hh, const Tensor& b_hh) {
  const int64_t H = h.size(-1), d = gi.dim() - 1;
  const std::vector<Tensor> i = split(gi, {2 * H, H}, d);                     // [r z | n] of W_i x + b_i
  const std::vector<Tensor> g = split(linear(h, w_hh, b_hh), {2 * H, H}, d);  // [r z | n] of W_h h + b_h
  // r and z in one add and one sigmoid over the first 2H columns.
  const std::vector<Tensor> rz = chunk(sigmoid(add(i[0], g[0])), 2, d);
  // n = tanh(W_in x + b_in + r * (W_hn h + b_hn)): the reset gate scales the
  // hidden projection including its bias (PyTorch's and cuDNN's form).
  const Tensor n = tanh(add(i[1], mul(rz[0], g[1])));
  // h' = (1 - z) n + z h = n + z (h - n): one op fewer.
  return add(n, mul(rz[1], sub(h, n)));
}

LSTMState lstm_step(const Tensor& gi, const LSTMState& s, const Tensor& w_hh, const Tensor& b_hh) {
  const int64_t H = s.h.size(-1), d = gi.dim() - 1;
  const std::vector<Tensor> gates = split(add(gi, linear(s.h, w_hh, b_hh)), {2 * H, H, H}, d);  // [i f | g | o]
  const std::vector<Tensor> if_ = chunk(sigmoid(gates[0]), 2, d);
  const Tensor g = tanh(gates[1]);
  const Tensor o = sigmoid(gates[2]);
  const Tensor c = add(mul(if_[1], s.c), mul(if_[0], g));  // c' = f c + i g
  return {mul(o, tanh(c)), c};                             // h' = o tanh(c')
}

// ---- shared layer machinery ---------------------------------------------------
RNNBase::RNNBase(int64_t in, int64_t hidden, RNNOptions o, int gates, TensorOptions topts)
    : input_size(in), hidden_size(hidden), opts(o), gates_(gates) {
  const std::string kind = gates == 3 ? "GRU" : "LSTM";
  EMBER_CHECK(in > 0 && hidden > 0, ValueError, kind, ": input_size and hidden_size must be positive, got ", in,
              " and ", hidden);
  EMBER_CHECK(o.num_layers > 0, ValueError, kind, ": num_layers must be positive, got ", o.num_layers);
  EMBER_CHECK(o.dropout >= 0 && o.dropout <= 1, ValueError, kind, ": dropout must be in [0, 1], got ", o.dropout);
  const TensorOptions t(topts.dtype, topts.device);
  const double bound = 1.0 / std::sqrt(static_cast<double>(hidden));
  auto param = [&](const std::string& name, const Shape& shape) {
    Tensor p = empty(shape, t);
    init::uniform_(p, -bound, bound);
    return register_parameter(name, p);
  };
  // PyTorch's order: layer by layer, forward then reverse, and within one
  // (layer, direction) weight_ih, weight_hh, bias_ih, bias_hh.
  for (int64_t l = 0; l < o.num_layers; ++l) {
    const int64_t layer_in = l == 0 ? in : hidden * num_directions();
    for (int64_t d = 0; d < num_directions(); ++d) {
      const std::string sfx = "_l" + std::to_string(l) + (d == 1 ? "_reverse" : "");
      Weights w;
      w.w_ih = param("weight_ih" + sfx, {gates * hidden, layer_in});
      w.w_hh = param("weight_hh" + sfx, {gates * hidden, hidden});
      if (o.bias) {
        w.b_ih = param("bias_ih" + sfx, {gates * hidden});
        w.b_hh = param("bias_hh" + sfx, {gates * hidden});
      }
      w_.push_back(w);
    }
  }
}

Tensor RNNBase::prepare_input(const std::string& op, const Tensor& input, bool& batched, const Tensor& lengths) const {
  EMBER_CHECK(input.dim() == 2 || input.dim() == 3, ShapeError, op,
              ": expected input of 3 dims (batched) or 2 (unbatched), got ", input.shape().str());
  batched = input.dim() == 3;
  const Tensor x = !batched ? input.unsqueeze(1) : opts.batch_first ? input.transpose(0, 1) : input;
  EMBER_CHECK(x.size(2) == input_size, ShapeError, op, ": input ", input.shape().str(), " has ", x.size(2),
              " features, expected input_size ", input_size);
  EMBER_CHECK(x.is_floating_point(), DTypeError, op, ": input must be floating point");
  if (lengths.defined()) {
    EMBER_CHECK(lengths.dtype() == DType::Int64 && lengths.dim() == 1 && lengths.size(0) == x.size(1), ShapeError, op,
                ": lengths must be int64 of shape (", x.size(1), "), got ", lengths.shape().str());
    for (int64_t n : lengths.to_vector<int64_t>())
      EMBER_CHECK(n >= 0 && n <= x.size(0), ValueError, op, ": length ", n, " is outside [0, ", x.size(0), "]");
  }
  return x;
}

Tensor RNNBase::prepare_state(const std::string& op, const std::string& name, const Tensor& state, const Tensor& x,
                              bool batched) const {
  const Shape want{opts.num_layers * num_directions(), x.size(1), hidden_size};
  if (!state.defined()) return zeros(want, TensorOptions(x.dtype(), x.device()));
  const Tensor s = batched ? state : state.unsqueeze(1);
  EMBER_CHECK(s.dim() == 3 && s.shape() == want, ShapeError, op, ": ", name, " has shape ", state.shape().str(),
              ", expected ", (batched ? want : Shape{want[0], want[2]}).str());
  return s;
}

Tensor RNNBase::finish_output(const Tensor& out, bool batched) const {
  if (!batched) return out.squeeze(1);
  return opts.batch_first ? out.transpose(0, 1) : out;
}

Tensor RNNBase::finish_state(const Tensor& state, bool batched) const { return batched ? state : state.squeeze(1); }

namespace {

// Per step, the (batch, 1) "still running" mask, or undefined when every
// sequence is still running at that step (no masking op needed there).
std::vector<Tensor> step_masks(const Tensor& lengths, int64_t T) {
  std::vector<Tensor> masks(static_cast<size_t>(T));
  if (!lengths.defined()) return masks;
  const std::vector<int64_t> lens = lengths.to_vector<int64_t>();
  const Tensor all =
      lt(arange(0, static_cast<double>(T), 1, TensorOptions(DType::Int64, lengths.device())).unsqueeze(1),
         lengths.unsqueeze(0))
          .unsqueeze(2);  // (T, batch, 1)
  for (int64_t t = 0; t < T; ++t)
    for (int64_t n : lens)
      if (n <= t) {
        masks[static_cast<size_t>(t)] = all.select(0, t);
        break;
      }
  return masks;
}

// One direction of one layer over the whole sequence. gi: the input
// projection of every step (seq, batch, gates * H). Returns the outputs
// (seq, batch, H) and the final state.
std::pair<Tensor, LSTMState> run_direction(const Tensor& gi, LSTMState s, const RNNBase::Weights& w, bool reverse,
                                           bool lstm, const std::vector<Tensor>& masks) {
  const int64_t T = gi.size(0);
  // The steps as one split (one graph node; per-step select views would each
  // send back a zero-filled gradient of the whole sequence).
  const std::vector<Tensor> steps = split(gi, 1, 0);
  std::vector<Tensor> outs(static_cast<size_t>(T));
  for (int64_t k = 0; k < T; ++k) {
    const int64_t t = reverse ? T - 1 - k : k;
    const Tensor& m = masks[static_cast<size_t>(t)];
    const Tensor x = steps[static_cast<size_t>(t)].squeeze(0);
    if (lstm) {
      LSTMState n = lstm_step(x, s, w.w_hh, w.b_hh);
      // Padded steps keep the old state: state_t = mask ? new : old.
      s = m.defined() ? LSTMState{where(m, n.h, s.h), where(m, n.c, s.c)} : n;
    } else {
      const Tensor h = gru_step(x, s.h, w.w_hh, w.b_hh);
      s.h = m.defined() ? where(m, h, s.h) : h;
    }
    outs[static_cast<size_t>(t)] = s.h;
  }
  return {stack(outs, 0), s};
}

// The layers and directions of GRU (c0 undefined) and LSTM. Returns the
// output (seq, batch, dirs * H) and the stacked final h (and c).
struct StackResult {
  Tensor out, h, c;
};
StackResult run_stack(const RNNBase& m, Tensor x, const Tensor& h0, const Tensor& c0, const Tensor& lengths, bool lstm,
                      bool training) {
  const std::vector<Tensor> masks = step_masks(lengths, x.size(0));
  const int64_t L = m.opts.num_layers, D = m.num_directions();
  std::vector<Tensor> hs, cs;
  for (int64_t l = 0; l < L; ++l) {
    if (l > 0 && training && m.opts.dropout > 0) x = dropout(x, m.opts.dropout, true);
    std::vector<Tensor> outs;
    for (int64_t d = 0; d < D; ++d) {
      const RNNBase::Weights& w = m.weights(l, d);
      const Tensor gi = linear(x, w.w_ih, w.b_ih);  // every step's input projection: one GEMM
      LSTMState s{h0.select(0, l * D + d), lstm ? c0.select(0, l * D + d) : Tensor()};
      auto [out, last] = run_direction(gi, s, w, d == 1, lstm, masks);
      outs.push_back(out);
      hs.push_back(last.h);
      if (lstm) cs.push_back(last.c);
    }
    x = D == 1 ? outs[0] : cat(outs, 2);
  }
  // Outputs at padded steps are zero, as pad_packed_sequence gives.
  if (lengths.defined()) {
    bool padded = false;
    for (const Tensor& mk : masks) padded = padded || mk.defined();
    if (padded) {
      const Tensor keep =
          lt(arange(0, static_cast<double>(x.size(0)), 1, TensorOptions(DType::Int64, lengths.device())).unsqueeze(1),
             lengths.unsqueeze(0))
              .unsqueeze(2);
      x = where(keep, x, 0.0);
    }
  }
  return {x, stack(hs, 0), lstm ? stack(cs, 0) : Tensor()};
}

}  // namespace

// ---- GRU and LSTM -------------------------------------------------------------
GRU::GRU(int64_t in, int64_t hidden, RNNOptions o, TensorOptions t) : RNNBase(in, hidden, o, 3, t) {}

std::pair<Tensor, Tensor> GRU::forward(const Tensor& input, const Tensor& h0, const Tensor& lengths) {
  bool batched = true;
  const Tensor x = prepare_input("GRU", input, batched, lengths);
  const Tensor h = prepare_state("GRU", "h0", h0, x, batched);
  const StackResult r = run_stack(*this, x, h, Tensor(), lengths, false, is_training());
  return {finish_output(r.out, batched), finish_state(r.h, batched)};
}

LSTM::LSTM(int64_t in, int64_t hidden, RNNOptions o, TensorOptions t) : RNNBase(in, hidden, o, 4, t) {}

std::pair<Tensor, LSTMState> LSTM::forward(const Tensor& input, const LSTMState& state, const Tensor& lengths) {
  bool batched = true;
  const Tensor x = prepare_input("LSTM", input, batched, lengths);
  const Tensor h = prepare_state("LSTM", "h0", state.h, x, batched);
  const Tensor c = prepare_state("LSTM", "c0", state.c, x, batched);
  const StackResult r = run_stack(*this, x, h, c, lengths, true, is_training());
  return {finish_output(r.out, batched), LSTMState{finish_state(r.h, batched), finish_state(r.c, batched)}};
}

// ---- cells --------------------------------------------------------------------
namespace {
void register_cell(Module& m, int64_t in, int64_t hidden, int gates, bool bias, TensorOptions topts, Tensor& w_ih,
                   Tensor& w_hh, Tensor& b_ih, Tensor& b_hh, const std::string& kind) {
  EMBER_CHECK(in > 0 && hidden > 0, ValueError, kind, ": input_size and hidden_size must be positive, got ", in,
              " and ", hidden);
  const TensorOptions t(topts.dtype, topts.device);
  const double bound = 1.0 / std::sqrt(static_cast<double>(hidden));
  auto param = [&](const std::string& name, const Shape& shape) {
    Tensor p = empty(shape, t);
    init::uniform_(p, -bound, bound);
    return m.register_parameter(name, p);
  };
  w_ih = param("weight_ih", {gates * hidden, in});
  w_hh = param("weight_hh", {gates * hidden, hidden});
  if (bias) {
    b_ih = param("bias_ih", {gates * hidden});
    b_hh = param("bias_hh", {gates * hidden});
  }
}

Tensor cell_state(const std::string& kind, const Tensor& s, const Tensor& x, int64_t hidden) {
  Shape want = x.shape();
  want[want.size() - 1] = hidden;
  if (!s.defined()) return zeros(want, TensorOptions(x.dtype(), x.device()));
  EMBER_CHECK(s.shape() == want, ShapeError, kind, ": state has shape ", s.shape().str(), ", expected ", want.str());
  return s;
}

void check_cell_input(const std::string& kind, const Tensor& x, int64_t in) {
  EMBER_CHECK((x.dim() == 1 || x.dim() == 2) && x.size(-1) == in, ShapeError, kind, ": expected input (batch, ", in,
              ") or (", in, "), got ", x.shape().str());
}
}  // namespace

GRUCell::GRUCell(int64_t in, int64_t hidden, bool bias, TensorOptions t) : input_size(in), hidden_size(hidden) {
  register_cell(*this, in, hidden, 3, bias, t, weight_ih, weight_hh, bias_ih, bias_hh, "GRUCell");
}

Tensor GRUCell::forward(const Tensor& x, const Tensor& h) {
  check_cell_input("GRUCell", x, input_size);
  return gru_step(linear(x, weight_ih, bias_ih), cell_state("GRUCell", h, x, hidden_size), weight_hh, bias_hh);
}

LSTMCell::LSTMCell(int64_t in, int64_t hidden, bool bias, TensorOptions t) : input_size(in), hidden_size(hidden) {
  register_cell(*this, in, hidden, 4, bias, t, weight_ih, weight_hh, bias_ih, bias_hh, "LSTMCell");
}

LSTMState LSTMCell::forward(const Tensor& x, const LSTMState& s) {
  check_cell_input("LSTMCell", x, input_size);
  const LSTMState st{cell_state("LSTMCell", s.h, x, hidden_size), cell_state("LSTMCell", s.c, x, hidden_size)};
  return lstm_step(linear(x, weight_ih, bias_ih), st, weight_hh, bias_hh);
}

}  // namespace ember::nn
