// ONNX import: the recurrent ops RNN, GRU and LSTM, run step by step with
// Ember's ops (matmul, sigmoid, tanh, ...) so they differentiate.
//
// Shapes (layout 0; layout 1 swaps the sequence and batch dims of X and Y
// and puts the batch first in the states):
//   X (T, B, I); W (D, G H, I); R (D, G H, H); B (D, 2 G H) = [Wb, Rb];
//   sequence_lens (B); initial_h, initial_c (D, B, H); P (D, 3 H);
//   Y (T, D, B, H); Y_h, Y_c (D, B, H)
// with D directions (forward, reverse, or both) and G gates in ONNX's order:
// RNN i; GRU z, r, h; LSTM i, o, f, c. The input projection X W^T + Wb is
// one matmul over all steps; each step adds H R^T. A batch entry b with
// sequence_lens[b] = L only runs the steps t < L: the state is held and Y
// is 0 elsewhere, so the reverse direction starts at t = L - 1.
#include <algorithm>
#include <cctype>

#include <ember/onnx/import_ops.h>
#include <ember/ops/activation.h>
#include <ember/ops/elementwise.h>
#include <ember/ops/factory.h>
#include <ember/ops/join.h>
#include <ember/ops/matmul.h>

namespace ember::onnx::detail {

namespace {

enum class Cell { Rnn, Gru, Lstm };

// One activation of the `activations` attribute, with its alpha and beta.
struct Activation {
  std::string name;
  double alpha = 0, beta = 0;
  Tensor operator()(const Tensor& x) const {
    if (name == "sigmoid") return sigmoid(x);
    if (name == "tanh") return tanh(x);
    if (name == "relu") return relu(x);
    if (name == "leakyrelu") return where(ge(x, 0.0), x, mul(x, alpha));
    if (name == "thresholdedrelu") return where(gt(x, alpha), x, 0.0);
    if (name == "scaledtanh") return mul(tanh(mul(x, beta)), alpha);
    if (name == "hardsigmoid") return clamp(add(mul(x, alpha), beta), 0.0, 1.0);
    if (name == "elu") return where(ge(x, 0.0), x, mul(sub(exp(x), 1.0), alpha));
    if (name == "softsign") return div(x, add(abs(x), 1.0));
    if (name == "softplus") return softplus(x);
    return add(mul(x, alpha), beta);  // affine
  }
};

// The node's activations, `per_dir` for each of D directions; alphas and
// betas are taken in order by the activations that use them (their ops'
// defaults when the lists run out), as onnxruntime does.
std::vector<Activation> activations(const NodeArgs& a, Cell cell, int64_t dirs) {
  const std::vector<std::string> defaults = cell == Cell::Rnn   ? std::vector<std::string>{"Tanh"}
                                            : cell == Cell::Gru ? std::vector<std::string>{"Sigmoid", "Tanh"}
                                                                : std::vector<std::string>{"Sigmoid", "Tanh", "Tanh"};
  const size_t per_dir = defaults.size();
  std::vector<std::string> names;
  if (a.has_attr("activations")) {
    for (const auto& s : a.proto().attribute())
      if (s.name() == "activations") names.assign(s.strings().begin(), s.strings().end());
    // One direction's list serves both when only it is given.
    if (names.size() == per_dir && dirs == 2) names.insert(names.end(), names.begin(), names.end());
    if (names.size() != per_dir * dirs)
      a.invalid(ember::detail::cat_str("activations lists ", names.size(), " functions, expected ", per_dir * dirs));
  } else {
    for (int64_t d = 0; d < dirs; ++d) names.insert(names.end(), defaults.begin(), defaults.end());
  }
  const std::vector<float> alphas = a.attr_floats("activation_alpha", {});
  const std::vector<float> betas = a.attr_floats("activation_beta", {});
  size_t ai = 0, bi = 0;
  std::vector<Activation> out;
  for (const auto& n : names) {
    Activation f;
    for (char c : n) f.name += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    static const std::vector<std::string> known = {"sigmoid",         "tanh",        "relu",  "leakyrelu",
                                                   "thresholdedrelu", "scaledtanh",  "elu",   "softsign",
                                                   "softplus",        "hardsigmoid", "affine"};
    if (std::find(known.begin(), known.end(), f.name) == known.end()) a.unsupported("activation '" + n + "'");
    // Which of alpha and beta the function takes, and their defaults.
    double da = 0, db = 0;
    bool ta = false, tb = false;
    if (f.name == "leakyrelu") ta = true, da = 0.01;
    if (f.name == "thresholdedrelu" || f.name == "elu") ta = true, da = 1.0;
    if (f.name == "scaledtanh" || f.name == "affine") ta = tb = true, da = 1.0, db = f.name == "affine" ? 0.0 : 1.0;
    if (f.name == "hardsigmoid") ta = tb = true, da = 0.2, db = 0.5;
    f.alpha = ta && ai < alphas.size() ? alphas[ai++] : da;
    f.beta = tb && bi < betas.size() ? betas[bi++] : db;
    out.push_back(f);
  }
  return out;
}

std::vector<Tensor> recurrent(const NodeArgs& a, Cell cell) {
  const int64_t gates = cell == Cell::Rnn ? 1 : cell == Cell::Gru ? 3 : 4;
  const bool batch_first = a.attr_int("layout", 0) != 0;
  Tensor x = a.input(0);
  if (x.dim() != 3) a.invalid("X must be 3-D");
  if (batch_first) x = x.transpose(0, 1);  // (T, B, I)
  const Tensor &w = a.input(1), &r = a.input(2);
  const std::string direction = a.attr_string("direction", "forward");
  if (direction != "forward" && direction != "reverse" && direction != "bidirectional")
    a.invalid("direction '" + direction + "' is not forward, reverse or bidirectional");
  const int64_t dirs = direction == "bidirectional" ? 2 : 1;
  const int64_t t_len = x.size(0), batch = x.size(1), hidden = r.size(-1);
  if (a.has_attr("hidden_size") && a.attr_int("hidden_size") != hidden) a.invalid("hidden_size disagrees with R");
  if (w.dim() != 3 || r.dim() != 3 || w.size(0) != dirs || r.size(0) != dirs || w.size(1) != gates * hidden ||
      r.size(1) != gates * hidden || w.size(2) != x.size(2))
    a.invalid(ember::detail::cat_str("W ", w.shape(), " and R ", r.shape(), " do not fit X ", x.shape(), ", ", dirs,
                                     " direction(s) and hidden size ", hidden));
  const auto acts = activations(a, cell, dirs);
  const size_t per_dir = acts.size() / dirs;
  const double clip = a.attr_float("clip", 0.0f);
  const bool linear_before_reset = a.attr_int("linear_before_reset", 0) != 0;
  const bool input_forget = a.attr_int("input_forget", 0) != 0;
  const TensorOptions opts(x.dtype(), x.device());
  // The states in (D, B, H); layout 1 gives them as (B, D, H).
  auto state_input = [&](size_t i) {
    if (!a.has_input(i)) return zeros({dirs, batch, hidden}, opts);
    return batch_first ? a.input(i).transpose(0, 1) : a.input(i);
  };
  const Tensor h0 = state_input(5);
  const Tensor c0 = cell == Cell::Lstm ? state_input(6) : Tensor();
  // valid[t]: (B, 1) bool, whether step t is inside entry b's sequence; undefined when all are.
  std::vector<Tensor> valid(t_len);
  if (a.has_input(4)) {
    const Tensor lens = a.input(4).to(kInt64).to(x.device()).reshape({batch, 1});
    for (int64_t t = 0; t < t_len; ++t) valid[t] = gt(lens, static_cast<double>(t));
  }
  std::vector<Tensor> ys, hs, cs;
  for (int64_t d = 0; d < dirs; ++d) {
    const bool rev = direction == "reverse" || d == 1;
    const Activation &f = acts[d * per_dir], &g = acts[d * per_dir + (per_dir > 1 ? 1 : 0)],
                     &h_act = acts[d * per_dir + (per_dir > 2 ? 2 : 0)];
    const Tensor wd = w.select(0, d), rd = r.select(0, d);
    Tensor wb, rb;
    if (a.has_input(3)) {
      const Tensor bd = a.input(3).select(0, d);
      wb = bd.narrow(0, 0, gates * hidden);
      rb = bd.narrow(0, gates * hidden, gates * hidden);
    }
    // X W^T + Wb for every step at once: (T, B, G H).
    Tensor xw = matmul(x, wd.t());
    if (wb.defined()) xw = add(xw, wb);
    // GRU's h gate treats R h differently from the z and r gates: R and Rb split as [z r] and h.
    Tensor r_main = rd, rb_main = rb, r_h, rb_h;
    if (cell == Cell::Gru) {
      r_main = rd.narrow(0, 0, 2 * hidden);
      r_h = rd.narrow(0, 2 * hidden, hidden);
      if (rb.defined()) {
        rb_main = rb.narrow(0, 0, 2 * hidden);
        rb_h = rb.narrow(0, 2 * hidden, hidden);
      }
    }
    Tensor p_i, p_o, p_f;
    if (cell == Cell::Lstm && a.has_input(7)) {
      const Tensor p = a.input(7).select(0, d);
      p_i = p.narrow(0, 0, hidden), p_o = p.narrow(0, hidden, hidden), p_f = p.narrow(0, 2 * hidden, hidden);
    }
    auto clipped = [&](const Tensor& v) { return clip > 0 ? clamp(v, -clip, clip) : v; };
    Tensor h = h0.select(0, d), c = c0.defined() ? c0.select(0, d) : Tensor();
    std::vector<Tensor> y(t_len);
    for (int64_t s = 0; s < t_len; ++s) {
      const int64_t t = rev ? t_len - 1 - s : s;
      const Tensor xt = xw.select(0, t);
      Tensor hr = matmul(h, r_main.t());
      if (rb_main.defined()) hr = add(hr, rb_main);
      Tensor h_new, c_new;
      if (cell == Cell::Rnn) {
        h_new = f(clipped(add(xt, hr)));
      } else if (cell == Cell::Gru) {
        const Tensor zr = add(xt.narrow(1, 0, 2 * hidden), hr);
        const Tensor z = f(clipped(zr.narrow(1, 0, hidden))), rg = f(clipped(zr.narrow(1, hidden, hidden)));
        Tensor rh;
        if (linear_before_reset) {  // r (.) (H R_h^T + Rb_h)
          rh = matmul(h, r_h.t());
          if (rb_h.defined()) rh = add(rh, rb_h);
          rh = mul(rg, rh);
        } else {  // (r (.) H) R_h^T + Rb_h
          rh = matmul(mul(rg, h), r_h.t());
          if (rb_h.defined()) rh = add(rh, rb_h);
        }
        const Tensor hh = g(clipped(add(xt.narrow(1, 2 * hidden, hidden), rh)));
        h_new = add(mul(sub(1.0, z), hh), mul(z, h));  // (1 - z) (.) h~ + z (.) H
      } else {
        const Tensor pre = add(xt, hr);
        Tensor pi = pre.narrow(1, 0, hidden), po = pre.narrow(1, hidden, hidden),
               pf = pre.narrow(1, 2 * hidden, hidden), pc = pre.narrow(1, 3 * hidden, hidden);
        if (p_i.defined()) pi = add(pi, mul(p_i, c)), pf = add(pf, mul(p_f, c));
        const Tensor ig = f(clipped(pi));
        const Tensor fg = input_forget ? sub(1.0, ig) : f(clipped(pf));
        c_new = add(mul(fg, c), mul(ig, g(clipped(pc))));
        if (p_o.defined()) po = add(po, mul(p_o, c_new));
        h_new = mul(f(clipped(po)), h_act(c_new));
      }
      if (valid[t].defined()) {
        y[t] = mul(h_new, valid[t].to(h_new.dtype()));
        h = where(valid[t], h_new, h);
        if (c_new.defined()) c = where(valid[t], c_new, c);
      } else {
        y[t] = h_new;
        h = h_new;
        c = c_new;
      }
    }
    ys.push_back(t_len ? stack(y, 0) : zeros({0, batch, hidden}, opts));  // (T, B, H)
    hs.push_back(h);
    if (c.defined()) cs.push_back(c);
  }
  Tensor y_all = stack(ys, 1), y_h = stack(hs, 0);  // (T, D, B, H), (D, B, H)
  Tensor y_c = cs.empty() ? Tensor() : stack(cs, 0);
  if (batch_first) {
    y_all = y_all.permute({2, 0, 1, 3});
    y_h = y_h.transpose(0, 1);
    if (y_c.defined()) y_c = y_c.transpose(0, 1);
  }
  if (cell == Cell::Lstm) return {y_all, y_h, y_c};
  return {y_all, y_h};
}

std::vector<Tensor> rnn_op(const NodeArgs& a) { return recurrent(a, Cell::Rnn); }
std::vector<Tensor> gru_op(const NodeArgs& a) { return recurrent(a, Cell::Gru); }
std::vector<Tensor> lstm_op(const NodeArgs& a) { return recurrent(a, Cell::Lstm); }

}  // namespace

void register_rnn_ops(OpTable& t) {
  t.add("RNN", rnn_op);
  t.add("GRU", gru_op);
  t.add("LSTM", lstm_op);
}

}  // namespace ember::onnx::detail
