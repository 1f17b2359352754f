// ONNX import: MatMul/Gemm/Det and their integer forms, the normalisations (BatchNormalization,
// InstanceNormalization, LayerNormalization, LRN, MeanVarianceNormalization),
// Softmax/LogSoftmax/Hardmax, Dropout and Einsum, composed from Ember's ops
// so they differentiate. Convolutions and pools are in import_ops_conv.cpp,
// the losses in import_ops_loss.cpp, Resize in import_ops_resize.cpp,
// GridSample, RoiAlign and NonMaxSuppression in import_ops_detection.cpp.
#include <algorithm>
#include <cctype>

#include <ember/onnx/import_helpers.h>
#include <ember/onnx/import_math.h>
#include <ember/onnx/import_ops.h>
#include <ember/ops/activation.h>
#include <ember/ops/elementwise.h>
#include <ember/ops/factory.h>
#include <ember/ops/indexing.h>
#include <ember/ops/join.h>
#include <ember/ops/matmul.h>
#include <ember/ops/norm.h>
#include <ember/ops/reduce.h>
#include <ember/ops/softmax.h>

namespace ember::onnx::detail {

namespace {

// A product of integer tensors: Ember's GEMM is floating, so through float64 (exact below 2^53).
Tensor matmul_any(const Tensor& a, const Tensor& b) {
  if (a.is_floating_point() && b.is_floating_point()) return matmul(a, b);
  return matmul(a.to(kFloat64), b.to(kFloat64)).to(a.is_floating_point() ? a.dtype() : b.dtype());
}

std::vector<Tensor> matmul_op(const NodeArgs& a) { return {matmul_any(a.input(0), a.input(1))}; }

// MatMulInteger: (A - a_zero_point) (B - b_zero_point) exactly, as int32 values (held in int64); A's zero
// point is a scalar or one per row, B's a scalar or one per column.
std::vector<Tensor> matmul_integer_op(const NodeArgs& a) {
  Tensor A = a.input(0).to(kFloat64), B = a.input(1).to(kFloat64);
  if (a.has_input(2)) {
    const Tensor z = a.input(2).to(kFloat64);
    A = sub(A, z.numel() > 1 ? z.reshape({-1, 1}) : z.reshape(Shape{}));
  }
  if (a.has_input(3)) {
    const Tensor z = a.input(3).to(kFloat64);
    B = sub(B, z.numel() > 1 ? z.reshape({-1}) : z.reshape(Shape{}));
  }
  return {matmul(A, B).to(kInt64)};
}

// QLinearMatMul: (a - a_zero_point) (b - b_zero_point) requantized, y = saturate(round(acc a_scale b_scale /
// y_scale) + y_zero_point), halves to even, saturating to y_zero_point's type (int8, else uint8). A's scale and
// zero point are one value or one per row, b's one value or one per column.
std::vector<Tensor> qlinear_matmul_op(const NodeArgs& a) {
  auto rows = [&](size_t i) {
    const Tensor v = a.input(i).to(kFloat64);
    return v.numel() > 1 ? v.reshape({-1, 1}) : v.reshape(Shape{});
  };
  auto cols = [&](size_t i) {
    const Tensor v = a.input(i).to(kFloat64);
    return v.numel() > 1 ? v.reshape({-1}) : v.reshape(Shape{});
  };
  const Tensor acc = matmul(sub(a.input(0).to(kFloat64), rows(2)), sub(a.input(3).to(kFloat64), cols(5)));
  const Tensor scale = div(mul(rows(1), cols(4)), a.input(6).to(kFloat64).reshape(Shape{}));
  const bool int8 = a.input_type(7) == ::onnx::TensorProto::INT8;
  const Tensor q = add(run_unary<fn::Round>(mul(acc, scale)), a.input(7).to(kFloat64).reshape(Shape{}));
  return {clamp(q, int8 ? -128.0 : 0.0, int8 ? 127.0 : 255.0).to(kInt64)};
}

// Det of each trailing (n, n) matrix: Gaussian elimination with partial
// pivoting (the pivot rows chosen on the host), the determinant the product
// of the pivots and the sign of the row swaps; every step is an Ember op, so
// it differentiates.
Tensor det_one(Tensor m) {
  const int64_t n = m.size(0);
  Tensor det = ones({}, TensorOptions(m.dtype(), m.device()));
  double sign = 1;
  for (int64_t k = 0; k < n; ++k) {
    const auto col = m.narrow(0, k, n - k).select(1, k).cpu().to(kFloat64).to_vector<double>();
    int64_t p = 0;
    for (int64_t i = 1; i < n - k; ++i)
      if (std::abs(col[i]) > std::abs(col[p])) p = i;
    if (col[p] == 0) return mul(det, 0.0);  // singular
    if (p != 0) {
      std::vector<int64_t> perm(n);
      for (int64_t i = 0; i < n; ++i) perm[i] = i;
      std::swap(perm[k], perm[k + p]);
      m = index_select(m, 0, from_vector(perm, Shape{n}).to(m.device()));
      sign = -sign;
    }
    const Tensor pivot = m.select(0, k).select(0, k);
    det = mul(det, pivot);
    if (k + 1 < n) {
      const Tensor below = m.narrow(0, k + 1, n - k - 1);
      const Tensor factors = div(below.select(1, k), pivot).unsqueeze(1);
      m = cat({m.narrow(0, 0, k + 1), sub(below, mul(factors, m.select(0, k).unsqueeze(0)))}, 0);
    }
  }
  return sign < 0 ? neg(det) : det;
}

std::vector<Tensor> det_op(const NodeArgs& a) {
  const Tensor& x = a.input(0);
  if (x.dim() < 2 || x.size(-1) != x.size(-2)) a.invalid(ember::detail::cat_str("X ", x.shape(), " is not square"));
  if (!x.is_floating_point()) a.unsupported("integer inputs");
  const int64_t n = x.size(-1);
  const Tensor batch = x.reshape({-1, n, n});
  std::vector<Tensor> dets;
  for (int64_t b = 0; b < batch.size(0); ++b) dets.push_back(det_one(batch.select(0, b)));
  Shape out;
  for (int64_t d = 0; d + 2 < x.dim(); ++d) out.push_back(x.size(d));
  return {dets.empty() ? zeros(out, TensorOptions(x.dtype(), x.device())) : stack(dets, 0).reshape(out)};
}

// Y = alpha op(A) op(B) + beta C, op transposing when transA / transB; C broadcasts to (M, N).
std::vector<Tensor> gemm_op(const NodeArgs& a) {
  Tensor A = a.input(0), B = a.input(1);
  if (A.dim() != 2 || B.dim() != 2) a.invalid("A and B must be 2-D");
  if (a.attr_int("transA", 0)) A = A.t();
  if (a.attr_int("transB", 0)) B = B.t();
  const double alpha = a.attr_float("alpha", 1.0f), beta = a.attr_float("beta", 1.0f);
  Tensor y = matmul_any(A, B);
  if (alpha != 1.0) y = mul(y, alpha);
  if (a.has_input(2) && beta != 0.0) {
    const Tensor& c = a.input(2);
    y = add(y, beta == 1.0 ? c : mul(c, beta));
  }
  return {y};
}

// A per-channel vector (C) shaped to broadcast against (N, C, d1, ...) of rank `rank`.
Tensor per_channel(const Tensor& v, int64_t rank) {
  std::vector<int64_t> s(std::max<int64_t>(rank - 1, 1), 1);
  s[0] = v.numel();
  return v.reshape(Shape(s));
}

// The dims of x other than the channel dim 1.
Shape all_but_channel(const Tensor& x) {
  Shape d;
  for (int64_t i = 0; i < x.dim(); ++i)
    if (i != 1) d.push_back(i);
  return d;
}

// Inference: y = (x - mean) / sqrt(var + eps) * scale + B with the given
// statistics. Training (training_mode, opset 14+): the batch's mean and
// biased variance normalise, and the running statistics come out as
// input * momentum + batch * (1 - momentum).
std::vector<Tensor> batch_norm_op(const NodeArgs& a) {
  const Tensor& x = a.input(0);
  if (x.dim() < 2) a.invalid("X must have a channel dim");
  // Before opset 9, spatial = 0 gave statistics and parameters per element of (C, d1, ...), not per channel.
  const bool spatial = a.opset() >= 9 || a.attr_int("spatial", 1) != 0;
  const int64_t r = x.dim();
  auto param = [&](size_t i) { return spatial ? per_channel(a.input(i), r) : a.input(i); };
  const Tensor scale = param(1), bias = param(2);
  const double eps = a.attr_float("epsilon", 1e-5f);
  // Before opset 7 is_test defaulted to 0 (training); files of that age set it to 1 for inference, and an
  // absent one is read as inference too, as onnxruntime runs them.
  const bool training = a.attr_int("training_mode", 0) != 0 || (a.opset() < 7 && a.attr_int("is_test", 1) == 0);
  if (!training) {
    const Tensor inv = rsqrt(add(param(4), eps));
    return {add(mul(mul(sub(x, param(3)), inv), scale), bias)};
  }
  const double momentum = a.attr_float("momentum", 0.9f);
  const Shape dims = spatial ? all_but_channel(x) : Shape{0};
  const Tensor m = mean(x, dims, true);
  const Tensor v = mean(square(sub(x, m)), dims, true);
  const Tensor y = add(mul(mul(sub(x, m), rsqrt(add(v, eps))), scale), bias);
  const Tensor rm = add(mul(a.input(3), momentum), mul(m.reshape(a.input(3).shape()), 1.0 - momentum));
  const Tensor rv = add(mul(a.input(4), momentum), mul(v.reshape(a.input(4).shape()), 1.0 - momentum));
  return {y, rm, rv};
}

// y = scale (x - mean) / sqrt(var + eps) + B, statistics per (n, c) over the spatial dims.
std::vector<Tensor> instance_norm_op(const NodeArgs& a) {
  const Tensor& x = a.input(0);
  if (x.dim() < 3) a.invalid("X must be (N, C, d1, ...)");
  Shape dims;
  for (int64_t i = 2; i < x.dim(); ++i) dims.push_back(i);
  const double eps = a.attr_float("epsilon", 1e-5f);
  const Tensor m = mean(x, dims, true);
  const Tensor v = mean(square(sub(x, m)), dims, true);
  const Tensor y = mul(sub(x, m), rsqrt(add(v, eps)));
  return {add(mul(y, per_channel(a.input(1), x.dim())), per_channel(a.input(2), x.dim()))};
}

// Normalises over the dims from `axis` on: Y = (X - mean) / sqrt(var + eps)
// * Scale + B, with Mean and InvStdDev (X's shape with those dims 1) as the
// optional outputs. Ember's fused layer_norm when only Y is wanted.
std::vector<Tensor> layer_norm_op(const NodeArgs& a) {
  const Tensor& x = a.input(0);
  const int64_t axis = norm_axis(a, a.attr_int("axis", -1), x.dim());
  const double eps = a.attr_float("epsilon", 1e-5f);
  const Tensor& scale = a.input(1);
  const Tensor bias = a.has_input(2) ? a.input(2) : Tensor();
  Shape norm_shape, dims;
  for (int64_t i = axis; i < x.dim(); ++i) {
    norm_shape.push_back(x.size(i));
    dims.push_back(i);
  }
  const bool fused_ok = scale.shape() == norm_shape && (!bias.defined() || bias.shape() == norm_shape);
  if (!a.wants_output(1) && !a.wants_output(2) && fused_ok && x.is_floating_point())
    return {layer_norm(x, norm_shape, scale, bias, eps)};
  const Tensor m = mean(x, dims, true);
  const Tensor inv = rsqrt(add(mean(square(sub(x, m)), dims, true), eps));
  Tensor y = mul(mul(sub(x, m), inv), scale);
  if (bias.defined()) y = add(y, bias);
  return {y, m, inv};
}

// Softmax-like ops: from opset 13 along `axis` (default -1); before, x is
// viewed as 2-D [prod(shape[:axis]), prod(shape[axis:])] (default axis 1)
// and the op runs along its rows.
template <class F>
Tensor along_axis(const NodeArgs& a, F&& f) {
  const Tensor& x = a.input(0);
  if (a.opset() >= 13) {
    const int64_t axis = a.attr_int("axis", -1);
    if (x.dim() == 0) {  // a scalar as one row of one
      if (axis != 0 && axis != -1) a.invalid(ember::detail::cat_str("axis ", axis, " is out of range for rank 0"));
      return f(x.reshape({1}), 0).reshape(x.shape());
    }
    return f(x, norm_axis(a, axis, x.dim()));
  }
  const int64_t axis = norm_axis(a, a.attr_int("axis", 1), x.dim());
  int64_t outer = 1;
  for (int64_t i = 0; i < axis; ++i) outer *= x.size(i);
  return f(x.reshape({outer, -1}), 1).reshape(x.shape());
}

std::vector<Tensor> softmax_op(const NodeArgs& a) {
  return {along_axis(a, [](const Tensor& x, int64_t d) { return softmax(x, d); })};
}
std::vector<Tensor> log_softmax_op(const NodeArgs& a) {
  return {along_axis(a, [](const Tensor& x, int64_t d) { return log_softmax(x, d); })};
}
// 1 at the first largest value along the axis, 0 elsewhere.
std::vector<Tensor> hardmax_op(const NodeArgs& a) {
  return {along_axis(a, [](const Tensor& x, int64_t d) {
    std::vector<int64_t> s(x.dim(), 1);
    s[d] = x.size(d);
    const Tensor pos = arange(x.size(d), TensorOptions(kInt64, x.device())).reshape(Shape(s));
    return eq(pos, argmax(x, d, true)).to(x.dtype());
  })};
}

// Inference (the default): the input and an all-true mask. Training with
// ratio r > 0: elements kept with probability 1 - r, scaled by 1 / (1 - r).
std::vector<Tensor> dropout_op(const NodeArgs& a) {
  const Tensor& x = a.input(0);
  double ratio = 0.5;
  bool training = false;
  if (a.opset() >= 12) {
    if (a.has_input(1)) ratio = a.input(1).item<double>();
    if (a.has_input(2)) training = a.input(2).item<double>() != 0;
  } else {
    ratio = a.attr_float("ratio", 0.5f);
    if (a.opset() < 7) training = a.attr_int("is_test", 0) == 0;
  }
  if (ratio < 0 || ratio >= 1) a.invalid(ember::detail::cat_str("ratio ", ratio, " is not in [0, 1)"));
  if (!training || ratio == 0) return {x, ones(x.shape(), TensorOptions(kBool, x.device()))};
  const Tensor keep = ge(rand(x.shape(), TensorOptions(kFloat32, x.device())), ratio);
  return {mul(mul(x, keep.to(x.dtype())), 1.0 / (1.0 - ratio)), keep};
}

// LRN across channels: y = x / (bias + alpha / size * sum of x^2 over the
// channels c - floor((size - 1) / 2) ... c + ceil((size - 1) / 2))^beta.
std::vector<Tensor> lrn_op(const NodeArgs& a) {
  const Tensor& x = a.input(0);
  if (x.dim() < 3) a.invalid("X must be (N, C, d1, ...)");
  const int64_t size = a.attr_int("size");
  if (size < 1) a.invalid("size must be positive");
  const double alpha = a.attr_float("alpha", 1e-4f), beta = a.attr_float("beta", 0.75f),
               bias = a.attr_float("bias", 1.0f);
  const int64_t c = x.size(1), before = (size - 1) / 2, after = size - 1 - before;
  // Channels padded with zeros, then the shifted views summed; shifts past every channel add only zeros.
  const int64_t pb = std::min(before, c), pa = std::min(after, c);
  std::vector<int64_t> pads(2 * (x.dim() - 1), 0);
  pads[pads.size() - 2] = pb;
  pads[pads.size() - 1] = pa;
  const Tensor sq = pad(square(x), pads, 0.0);
  Tensor s = sq.narrow(1, 0, c);
  for (int64_t i = 1; i < pb + pa + 1; ++i) s = add(s, sq.narrow(1, i, c));
  return {mul(x, pow(add(mul(s, alpha / static_cast<double>(size)), bias), -beta))};
}

// (X - E[X]) / sqrt(E[(X - E[X])^2] + 1e-9) over `axes` (default 0, 2, 3), as ONNX's function body.
std::vector<Tensor> mvn_op(const NodeArgs& a) {
  const Tensor& x = a.input(0);
  std::vector<int64_t> axes = a.attr_ints("axes", {0, 2, 3});
  for (auto& ax : axes) ax = norm_axis(a, ax, x.dim());
  const Tensor m = mean(x, Shape(axes), true);
  const Tensor d = sub(x, m);
  return {div(d, sqrt(add(mean(square(d), Shape(axes), true), 1e-9)))};
}

// ---- Einsum ----------------------------------------------------------------
// Operands are contracted pairwise, left to right: each first loses its
// repeated letters (a diagonal: times the identity, summed) and the letters
// nothing later needs (summed), then a pair becomes one batched matmul,
// [batch..., left, contracted] @ [batch..., contracted, right]. Ellipsis dims
// are named by the characters '0'..'7', aligned to the right.

struct Term {
  std::string letters;
  Tensor t;
};

// t with the repeated letters of term reduced to their diagonal and the letters not in `needed` summed.
Term prepare(const NodeArgs& a, Term term, const std::string& needed) {
  for (size_t i = 0; i < term.letters.size(); ++i)
    for (size_t j = term.letters.size() - 1; j > i; --j) {
      if (term.letters[j] != term.letters[i]) continue;
      const int64_t n = term.t.size(static_cast<int64_t>(i));
      if (term.t.size(static_cast<int64_t>(j)) != n) a.invalid("a repeated subscript with two sizes");
      std::vector<int64_t> s(term.t.dim(), 1);
      s[i] = s[j] = n;
      const Tensor e = eye(n, TensorOptions(term.t.dtype(), term.t.device())).reshape(Shape(s));
      term.t = sum(mul(term.t, e), {static_cast<int64_t>(j)});
      term.letters.erase(j, 1);
    }
  Shape drop;
  std::string kept;
  for (size_t i = 0; i < term.letters.size(); ++i) {
    if (needed.find(term.letters[i]) == std::string::npos)
      drop.push_back(static_cast<int64_t>(i));
    else
      kept += term.letters[i];
  }
  if (!drop.empty()) term.t = sum(term.t, drop);
  term.letters = kept;
  return term;
}

// The product of two prepared terms, keeping the letters in `needed`.
Term contract(const Term& x, const Term& y, const std::string& needed) {
  std::string batch, left, con, right;
  for (char c : x.letters) {
    const bool in_y = y.letters.find(c) != std::string::npos;
    if (!in_y)
      left += c;
    else if (needed.find(c) != std::string::npos)
      batch += c;
    else
      con += c;
  }
  for (char c : y.letters)
    if (x.letters.find(c) == std::string::npos) right += c;
  auto arrange = [](const Term& t, const std::string& order) {
    std::vector<int64_t> perm;
    for (char c : order) perm.push_back(static_cast<int64_t>(t.letters.find(c)));
    return t.t.permute(Shape(perm));
  };
  auto size_of = [](const Term& t, char c) { return t.t.size(static_cast<int64_t>(t.letters.find(c))); };
  auto product = [&](const Term& t, const std::string& ls) {
    int64_t p = 1;
    for (char c : ls) p *= size_of(t, c);
    return p;
  };
  std::vector<int64_t> xs, ys, out;
  for (char c : batch) {
    xs.push_back(size_of(x, c));
    ys.push_back(size_of(y, c));
    out.push_back(std::max(size_of(x, c), size_of(y, c)));
  }
  xs.push_back(product(x, left));
  xs.push_back(product(x, con));
  ys.push_back(product(y, con));
  ys.push_back(product(y, right));
  for (char c : left) out.push_back(size_of(x, c));
  for (char c : right) out.push_back(size_of(y, c));
  const Tensor p =
      matmul_any(arrange(x, batch + left + con).reshape(Shape(xs)), arrange(y, batch + con + right).reshape(Shape(ys)));
  return {batch + left + right, p.reshape(Shape(out))};
}

std::vector<Tensor> einsum_op(const NodeArgs& a) {
  std::string eq;
  for (char c : a.attr_string("equation"))
    if (c != ' ') eq += c;
  const size_t arrow = eq.find("->");
  std::string lhs = eq.substr(0, arrow);
  std::vector<std::string> terms(1);
  for (char c : lhs) {
    if (c == ',')
      terms.emplace_back();
    else
      terms.back() += c;
  }
  if (terms.size() != a.num_inputs()) a.invalid("the equation names a different number of operands than the node has");
  // Subscripts are letters, with at most one "..." per term.
  auto check_term = [&](const std::string& t) {
    const size_t dots = t.find("...");
    for (size_t i = 0; i < t.size(); ++i) {
      if (dots != std::string::npos && i >= dots && i < dots + 3) continue;
      if (!std::isalpha(static_cast<unsigned char>(t[i])))
        a.invalid("equation '" + a.attr_string("equation") + "': subscripts must be letters and one '...'");
    }
  };
  for (const auto& t : terms) check_term(t);
  if (arrow != std::string::npos) check_term(eq.substr(arrow + 2));
  // Ellipses become the names '0'.. of their dims, aligned right across the operands.
  int64_t ell = 0;
  std::vector<Term> ops;
  for (size_t i = 0; i < terms.size(); ++i) {
    const Tensor& t = a.input(i);
    const size_t dots = terms[i].find("...");
    const int64_t named = static_cast<int64_t>(terms[i].size()) - (dots == std::string::npos ? 0 : 3);
    const int64_t n_ell = t.dim() - named;
    if (dots == std::string::npos ? n_ell != 0 : n_ell < 0)
      a.invalid("operand " + std::to_string(i) + " has a rank other than its subscripts '" + terms[i] + "' say");
    ell = std::max(ell, n_ell);
    ops.push_back({terms[i], t});
  }
  if (ell > 8) a.unsupported("more than 8 ellipsis dims");
  auto expand_dots = [&](std::string s, int64_t n) {
    const size_t dots = s.find("...");
    if (dots == std::string::npos) return s;
    std::string names;
    for (int64_t k = ell - n; k < ell; ++k) names += static_cast<char>('0' + k);
    return s.replace(dots, 3, names);
  };
  for (size_t i = 0; i < ops.size(); ++i) {
    const size_t dots = terms[i].find("...");
    ops[i].letters = expand_dots(
        terms[i], dots == std::string::npos ? 0 : ops[i].t.dim() - (static_cast<int64_t>(terms[i].size()) - 3));
  }
  std::string out;
  if (arrow != std::string::npos) {
    out = expand_dots(eq.substr(arrow + 2), ell);
  } else {  // implicit: the ellipsis dims, then the letters used once, in alphabetical order
    for (int64_t k = 0; k < ell; ++k) out += static_cast<char>('0' + k);
    std::string once;
    for (char c = 'A'; c <= 'z'; ++c) {
      int n = 0;
      for (const auto& o : ops) n += static_cast<int>(std::count(o.letters.begin(), o.letters.end(), c));
      if (n == 1 && std::isalpha(static_cast<unsigned char>(c))) once += c;
    }
    out += once;
  }
  // Left to right: what the pair keeps is what the output or a later operand names.
  auto needed_after = [&](size_t i) {
    std::string n = out;
    for (size_t j = i + 1; j < ops.size(); ++j) n += ops[j].letters;
    return n;
  };
  Term acc = prepare(a, ops[0], needed_after(0) + (ops.size() > 1 ? ops[1].letters : ""));
  for (size_t i = 1; i < ops.size(); ++i) {
    const std::string keep = needed_after(i);
    acc = contract(acc, prepare(a, ops[i], keep + acc.letters), keep);
  }
  acc = prepare(a, acc, out);
  std::vector<int64_t> perm;
  for (char c : out) {
    const size_t p = acc.letters.find(c);
    if (p == std::string::npos) a.invalid(std::string("output subscript '") + c + "' names no input dim");
    perm.push_back(static_cast<int64_t>(p));
  }
  return {acc.t.permute(Shape(perm))};
}

}  // namespace

void register_nn_ops(OpTable& t) {
  t.add("MatMul", matmul_op);
  t.add("Gemm", gemm_op);
  t.add("MatMulInteger", matmul_integer_op);
  t.add("QLinearMatMul", qlinear_matmul_op);
  t.add("Det", det_op);
  t.add("BatchNormalization", batch_norm_op);
  t.add("InstanceNormalization", instance_norm_op);
  t.add("LayerNormalization", layer_norm_op);
  t.add("Softmax", softmax_op);
  t.add("LogSoftmax", log_softmax_op);
  t.add("Hardmax", hardmax_op);
  t.add("Dropout", dropout_op);
  t.add("LRN", lrn_op);
  t.add("MeanVarianceNormalization", mvn_op);
  t.add("Einsum", einsum_op);
}

}  // namespace ember::onnx::detail
