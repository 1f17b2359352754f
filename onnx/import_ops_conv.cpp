// ONNX import: the sliding-window ops, Conv, ConvTranspose, ConvInteger, QLinearConv,
// MaxPool, MaxUnpool, AveragePool and the global pools, over any number of
// spatial dims.
//
// Ember's conv2d and max_pool2d cover the common 2-D cases; everything else
// (1-D and 3-D, groups, dilations, ceil_mode, asymmetric pads) goes through
// one composed form: the padded input's windows are gathered as strided
// slices, one per kernel position, stacked into (N, C, K, *out) (im2col),
// and then contracted with the weight (a batched matmul over the groups) or
// reduced (max, sum). Slices, stack and matmul all differentiate, so
// gradients flow through every form.
#include <algorithm>
#include <limits>

#include <ember/onnx/import_helpers.h>
#include <ember/onnx/import_math.h>
#include <ember/onnx/import_ops.h>
#include <ember/ops/conv.h>
#include <ember/ops/elementwise.h>
#include <ember/ops/factory.h>
#include <ember/ops/indexing.h>
#include <ember/ops/join.h>
#include <ember/ops/matmul.h>
#include <ember/ops/pool.h>
#include <ember/ops/reduce.h>

namespace ember::onnx::detail {

namespace {

using Ints = std::vector<int64_t>;

// Where each window of each spatial dim sits.
struct Window {
  int64_t nd = 0;            // spatial dims
  Ints kernel, stride, dil;  // per spatial dim
  Ints pad_begin, pad_end;   // the declared (or auto) pads
  Ints extra_end;            // further padding ceil_mode's last window needs
  Ints out;                  // output sizes
  int64_t positions() const {
    int64_t k = 1;
    for (int64_t v : kernel) k *= v;
    return k;
  }
};

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The most elements a padded input, window stack or output may have here (2^34): beyond it attributes
// describe no real model, and allocating would only exhaust memory.
void check_elements(const NodeArgs& a, double n, const char* what) {
  if (!(n <= static_cast<double>(int64_t{1} << 34)))
    a.invalid(ember::detail::cat_str(what, " would hold ", n, " elements, more than Ember allocates for one op"));
}

double product(const Ints& v) {
  double p = 1;
  for (int64_t x : v) p *= static_cast<double>(x);
  return p;
}

// An ints attribute whose values are sizes, strides or pads: at most 2^40 in magnitude, so that no
// arithmetic on them overflows.
Ints size_ints(const NodeArgs& a, const char* name, const Ints& fallback) {
  Ints v = a.has_attr(name) ? a.attr_ints(name) : fallback;
  for (int64_t x : v)
    if (x > (int64_t{1} << 40) || x < -(int64_t{1} << 40))
      a.invalid(ember::detail::cat_str("attribute '", name, "' holds ", x, ", out of range"));
  return v;
}
Ints size_ints(const NodeArgs& a, const char* name) {
  if (!a.has_attr(name)) a.invalid(ember::detail::cat_str("attribute '", name, "' is required but not given"));
  return size_ints(a, name, {});
}

Ints attr_per_dim(const NodeArgs& a, const char* name, int64_t nd, int64_t fallback) {
  Ints v = size_ints(a, name, Ints(nd, fallback));
  if (static_cast<int64_t>(v.size()) != nd)
    a.invalid(ember::detail::cat_str("attribute '", name, "' has ", v.size(), " values for ", nd, " spatial dims"));
  return v;
}

// The spatial sizes d1, ... of x (N, C, d1, ...).
Ints spatial(const Tensor& x) {
  Ints s;
  for (int64_t i = 2; i < x.dim(); ++i) s.push_back(x.size(i));
  return s;
}

// The geometry of a Conv or pool node over x (N, C, d1, ...).
Window geometry(const NodeArgs& a, const Tensor& x, const Ints& kernel, bool ceil_mode) {
  const Ints in = spatial(x);
  Window w;
  w.nd = static_cast<int64_t>(in.size());
  w.kernel = kernel;
  if (static_cast<int64_t>(kernel.size()) != w.nd) a.invalid("kernel_shape does not match the input's rank");
  w.stride = attr_per_dim(a, "strides", w.nd, 1);
  w.dil = attr_per_dim(a, "dilations", w.nd, 1);
  const std::string auto_pad = a.attr_string("auto_pad", "NOTSET");
  Ints pads = size_ints(a, "pads", Ints(2 * w.nd, 0));
  if (static_cast<int64_t>(pads.size()) != 2 * w.nd) a.invalid("pads must hold a begin and an end per spatial dim");
  w.pad_begin.assign(pads.begin(), pads.begin() + w.nd);
  w.pad_end.assign(pads.begin() + w.nd, pads.end());
  w.out.resize(w.nd);
  w.extra_end.assign(w.nd, 0);
  for (int64_t d = 0; d < w.nd; ++d) {
    if (w.kernel[d] < 1 || w.stride[d] < 1 || w.dil[d] < 1)
      a.invalid("kernel sizes, strides and dilations must be positive");
    check_elements(a, static_cast<double>(w.kernel[d]) * static_cast<double>(w.dil[d]), "the dilated kernel");
    const int64_t keff = (w.kernel[d] - 1) * w.dil[d] + 1;
    if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      // out = ceil(in / stride), the padding split evenly with the odd one at the end (UPPER) or the start.
      w.out[d] = ceil_div(in[d], w.stride[d]);
      const int64_t total = std::max<int64_t>((w.out[d] - 1) * w.stride[d] + keff - in[d], 0);
      w.pad_begin[d] = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
      w.pad_end[d] = total - w.pad_begin[d];
    } else {
      if (auto_pad == "VALID")
        w.pad_begin[d] = w.pad_end[d] = 0;
      else if (auto_pad != "NOTSET")
        a.invalid("auto_pad '" + auto_pad + "' is not one of NOTSET, SAME_UPPER, SAME_LOWER, VALID");
      if (w.pad_begin[d] < 0 || w.pad_end[d] < 0) a.unsupported("negative pads");
      check_elements(a, static_cast<double>(w.pad_begin[d]) + static_cast<double>(w.pad_end[d]), "the padding");
      const int64_t span = in[d] + w.pad_begin[d] + w.pad_end[d] - keff;
      if (span < 0) a.invalid("the kernel is larger than the padded input");
      w.out[d] = (ceil_mode ? ceil_div(span, w.stride[d]) : span / w.stride[d]) + 1;
      // As PyTorch: a last window that would start in the end padding is dropped.
      if (ceil_mode && (w.out[d] - 1) * w.stride[d] >= in[d] + w.pad_begin[d]) --w.out[d];
    }
    w.extra_end[d] =
        std::max<int64_t>(0, (w.out[d] - 1) * w.stride[d] + keff - (in[d] + w.pad_begin[d] + w.pad_end[d]));
  }
  double padded = static_cast<double>(x.size(0)) * static_cast<double>(x.size(1));
  for (int64_t d = 0; d < w.nd; ++d)
    padded *= static_cast<double>(in[d] + w.pad_begin[d] + w.pad_end[d] + w.extra_end[d]);
  check_elements(a, padded, "the padded input");
  return w;
}

// x padded on its trailing nd dims by begin[d] and end[d] (+ extra[d]) with value.
Tensor pad_spatial(const Tensor& x, const Ints& begin, const Ints& end, const Ints& extra, double value) {
  const int64_t nd = static_cast<int64_t>(begin.size());
  std::vector<int64_t> pads;
  bool any = false;
  for (int64_t i = nd - 1; i >= 0; --i) {  // pad() lists the last dim first
    const int64_t e = end[i] + (extra.empty() ? 0 : extra[i]);
    pads.push_back(begin[i]);
    pads.push_back(e);
    any = any || begin[i] || e;
  }
  return any ? pad(x, pads, value) : x;
}

// The windows of a padded xp (N, C, *sp) as (N, C, K, *out), kernel positions in row-major order.
Tensor windows(const NodeArgs& a, const Tensor& xp, const Window& w) {
  check_elements(a, static_cast<double>(xp.size(0) * xp.size(1)) * product(w.out) * product(w.kernel),
                 "the stack of windows");
  std::vector<Tensor> views;
  Ints k(w.nd, 0);
  for (int64_t p = 0; p < w.positions(); ++p) {
    Tensor v = xp;
    for (int64_t d = 0; d < w.nd; ++d) {
      const int64_t start = k[d] * w.dil[d];
      v = v.slice(2 + d, start, start + (w.out[d] - 1) * w.stride[d] + 1, w.stride[d]);
    }
    views.push_back(v);
    for (int64_t d = w.nd - 1; d >= 0 && ++k[d] == w.kernel[d]; --d) k[d] = 0;  // next position
  }
  return stack(views, 2);
}

bool all_ones(const Ints& v) {
  return std::all_of(v.begin(), v.end(), [](int64_t x) { return x == 1; });
}

// Convolution of x (N, C, *in) with weight (O, C / group, *k), plus bias (O) when defined.
Tensor convolve(const NodeArgs& a, const Tensor& x, const Tensor& weight, const Tensor& bias, const Window& w,
                int64_t group) {
  const int64_t n = x.size(0), c = x.size(1), o = weight.size(0);
  if (group < 1 || c % group || o % group || weight.size(1) * group != c)
    a.invalid(ember::detail::cat_str("X has ", c, " channels and W ", weight.shape(), " for group ", group));
  if (w.nd == 2 && group == 1 && all_ones(w.dil) && x.is_floating_point()) {
    const bool sym = w.pad_begin == w.pad_end;
    const Tensor xp = sym ? x : pad_spatial(x, w.pad_begin, w.pad_end, {}, 0.0);
    const std::array<int64_t, 2> padding = {sym ? w.pad_begin[0] : 0, sym ? w.pad_begin[1] : 0};
    return conv2d(xp, weight, bias, {w.stride[0], w.stride[1]}, padding);
  }
  const Tensor cols = windows(a, pad_spatial(x, w.pad_begin, w.pad_end, {}, 0.0), w);  // (N, C, K, *out)
  int64_t l = 1;
  for (int64_t v : w.out) l *= v;
  const int64_t ck = c / group * w.positions();
  Tensor y = matmul(weight.reshape({group, o / group, ck}), cols.reshape({n, group, ck, l}));  // (N, G, O/G, L)
  Ints shape = {n, o};
  shape.insert(shape.end(), w.out.begin(), w.out.end());
  y = y.reshape(Shape(shape));
  if (bias.defined()) {
    Ints bs(w.nd + 1, 1);
    bs[0] = o;
    y = add(y, bias.reshape(Shape(bs)));
  }
  return y;
}

Ints kernel_of(const NodeArgs& a, const Tensor& weight) {
  Ints k = spatial(weight);
  if (a.has_attr("kernel_shape") && size_ints(a, "kernel_shape") != k) a.invalid("kernel_shape disagrees with W");
  return k;
}

std::vector<Tensor> conv_op(const NodeArgs& a) {
  const Tensor &x = a.input(0), &weight = a.input(1);
  if (x.dim() < 3 || weight.dim() != x.dim()) a.invalid("X and W must both be (N, C, d1, ...) of one rank");
  if (!x.is_floating_point()) a.unsupported("integer inputs (ConvInteger takes those)");
  const Window w = geometry(a, x, kernel_of(a, weight), false);
  return {convolve(a, x, weight, a.has_input(2) ? a.input(2) : Tensor(), w, a.attr_int("group", 1))};
}

// ConvInteger: (x - x_zero_point) conv (w - w_zero_point), exactly, as int32 values (held in int64).
std::vector<Tensor> conv_integer_op(const NodeArgs& a) {
  Tensor x = a.input(0).to(kFloat64), weight = a.input(1).to(kFloat64);
  if (x.dim() < 3 || weight.dim() != x.dim()) a.invalid("X and W must both be (N, C, d1, ...) of one rank");
  if (a.has_input(2)) x = sub(x, a.input(2).to(kFloat64));
  if (a.has_input(3)) {  // a scalar, or one per output channel
    const Tensor wz = a.input(3).to(kFloat64);
    Ints s(weight.dim(), 1);
    s[0] = wz.numel();
    weight = sub(weight, wz.numel() > 1 ? wz.reshape(Shape(s)) : wz.reshape(Shape{}));
  }
  const Window w = geometry(a, x, kernel_of(a, weight), false);
  return {convolve(a, x, weight, Tensor(), w, a.attr_int("group", 1)).to(kInt64)};
}

// QLinearConv: the integer convolution of (x - x_zero_point) and (w - w_zero_point), plus the int32 bias,
// requantized: y = saturate(round(acc x_scale w_scale / y_scale) + y_zero_point), rounding halves to even and
// saturating to y_zero_point's type (int8, else uint8). w_scale and w_zero_point are one value or one per output
// channel.
std::vector<Tensor> qlinear_conv_op(const NodeArgs& a) {
  auto per_out = [&](size_t i, int64_t rank) {
    const Tensor v = a.input(i).to(kFloat64);
    if (v.numel() == 1) return v.reshape(Shape{});
    Ints s(rank, 1);
    s[rank > 3 ? 1 : 0] = v.numel();
    return v.reshape(Shape(s));
  };
  Tensor x = sub(a.input(0).to(kFloat64), a.input(2).to(kFloat64).reshape(Shape{}));
  Tensor weight = a.input(3).to(kFloat64);
  if (x.dim() < 3 || weight.dim() != x.dim()) a.invalid("x and w must both be (N, C, d1, ...) of one rank");
  // (O, C/G, *k): a per-channel zero point lies along dim 0 of w, a per-channel scale along dim 1 of y.
  Ints wz(weight.dim(), 1);
  const Tensor wzp = a.input(5).to(kFloat64);
  wz[0] = wzp.numel();
  weight = sub(weight, wzp.numel() > 1 ? wzp.reshape(Shape(wz)) : wzp.reshape(Shape{}));
  const Window w = geometry(a, x, kernel_of(a, weight), false);
  const Tensor bias = a.has_input(8) ? a.input(8).to(kFloat64) : Tensor();
  const Tensor acc = convolve(a, x, weight, bias, w, a.attr_int("group", 1));
  Tensor scale = mul(a.input(1).to(kFloat64).reshape(Shape{}), per_out(4, acc.dim()));
  scale = div(scale, a.input(6).to(kFloat64).reshape(Shape{}));
  const bool int8 = a.input_type(7) == ::onnx::TensorProto::INT8;
  const Tensor q = add(run_unary<fn::Round>(mul(acc, scale)), a.input(7).to(kFloat64).reshape(Shape{}));
  return {clamp(q, int8 ? -128.0 : 0.0, int8 ? 127.0 : 255.0).to(kInt64)};
}

// x (.., n, ..) with stride - 1 zeros inserted between neighbours along dim: length (n - 1) stride + 1.
Tensor dilate(const Tensor& x, int64_t dim, int64_t stride) {
  if (stride == 1 || x.size(dim) == 0) return x;
  std::vector<Tensor> parts = {x};
  const Tensor z = zeros_like(x);
  for (int64_t i = 1; i < stride; ++i) parts.push_back(z);
  Tensor y = stack(parts, dim + 1);  // (.., n, stride, ..)
  Shape s = x.shape();
  s[static_cast<int>(dim)] *= stride;
  return y.reshape(s).narrow(dim, 0, (x.size(dim) - 1) * stride + 1);
}

// ConvTranspose, the adjoint of Conv: the input dilated by the stride, padded
// by keff - 1 on each side, convolved (stride 1) with the kernel flipped and
// its in/out channels swapped per group; this is the full output of size
// (in - 1) stride + keff, which output_padding extends at the end and the
// pads crop.
std::vector<Tensor> conv_transpose_op(const NodeArgs& a) {
  const Tensor &x = a.input(0), &weight = a.input(1);
  if (x.dim() < 3 || weight.dim() != x.dim()) a.invalid("X and W must both be (N, C, d1, ...) of one rank");
  if (!x.is_floating_point()) a.unsupported("integer inputs");
  const int64_t nd = x.dim() - 2, group = a.attr_int("group", 1), c = x.size(1);
  if (group < 1 || c % group || weight.size(0) != c) a.invalid("W's first dim must be X's channels");
  const Ints in = spatial(x), kernel = kernel_of(a, weight);
  const Ints stride = attr_per_dim(a, "strides", nd, 1), dil = attr_per_dim(a, "dilations", nd, 1);
  const Ints out_pad = attr_per_dim(a, "output_padding", nd, 0);
  Ints pads = size_ints(a, "pads", Ints(2 * nd, 0));
  if (static_cast<int64_t>(pads.size()) != 2 * nd) a.invalid("pads must hold a begin and an end per spatial dim");
  const std::string auto_pad = a.attr_string("auto_pad", "NOTSET");
  Ints full(nd), begin(nd), end(nd);
  double dilated = static_cast<double>(x.size(0) * c);
  for (int64_t d = 0; d < nd; ++d) {
    if (stride[d] < 1 || dil[d] < 1 || out_pad[d] < 0) a.invalid("strides and dilations must be positive");
    check_elements(a, static_cast<double>(kernel[d]) * static_cast<double>(dil[d]) + out_pad[d], "the dilated kernel");
    dilated *= static_cast<double>(in[d]) * static_cast<double>(stride[d]) + 2.0 * kernel[d] * dil[d];
    check_elements(a, dilated, "the dilated input");
    const int64_t keff = (kernel[d] - 1) * dil[d] + 1;
    full[d] = (in[d] - 1) * stride[d] + keff + out_pad[d];
    begin[d] = pads[d];
    end[d] = pads[nd + d];
    // A requested output size (output_shape, or in * stride for SAME_*) sets the pads; the odd one goes to
    // the end for SAME_UPPER, to the start otherwise.
    int64_t target = -1;
    if (a.has_attr("output_shape")) {
      const Ints os = size_ints(a, "output_shape");
      if (static_cast<int64_t>(os.size()) < nd) a.invalid("output_shape has fewer entries than spatial dims");
      target = os[os.size() - nd + d];
      check_elements(a, static_cast<double>(target), "output_shape");
    } else if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      target = in[d] * stride[d];
    }
    if (target >= 0) {
      // A target beyond the full output extends it at the end, as output_padding does.
      if (target > full[d]) full[d] = target;
      const int64_t total = full[d] - target;
      begin[d] = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
      end[d] = total - begin[d];
    } else if (auto_pad == "VALID") {
      begin[d] = end[d] = 0;
    }
    if (begin[d] < 0 || end[d] < 0 || begin[d] + end[d] > full[d]) a.invalid("pads out of range");
  }
  // (C, O/G, *k) -> (O, C/G, *k), flipped along every spatial dim.
  const int64_t og = weight.size(1), cg = c / group;
  Ints ws = {group, cg, og};
  ws.insert(ws.end(), kernel.begin(), kernel.end());
  Ints cs = {group * og, cg};
  cs.insert(cs.end(), kernel.begin(), kernel.end());
  Tensor wf = weight.reshape(Shape(ws)).transpose(1, 2).reshape(Shape(cs));
  for (int64_t d = 0; d < nd; ++d)
    wf = index_select(wf, 2 + d, arange(kernel[d] - 1, -1, -1, TensorOptions(kInt64, wf.device())));
  Tensor xd = x;
  for (int64_t d = 0; d < nd; ++d) xd = dilate(xd, 2 + d, stride[d]);
  Window w;
  w.nd = nd;
  w.kernel = kernel;
  w.stride.assign(nd, 1);
  w.dil = dil;
  w.extra_end.assign(nd, 0);
  for (int64_t d = 0; d < nd; ++d) {
    const int64_t keff = (kernel[d] - 1) * dil[d] + 1;
    w.pad_begin.push_back(keff - 1);
    w.pad_end.push_back(full[d] - (in[d] - 1) * stride[d] - 1);
    w.out.push_back(full[d]);
  }
  Tensor y = convolve(a, xd, wf, a.has_input(2) ? a.input(2) : Tensor(), w, group);
  for (int64_t d = 0; d < nd; ++d) y = y.narrow(2 + d, begin[d], full[d] - begin[d] - end[d]);
  return {y};
}

bool pool_ceil(const NodeArgs& a) { return a.attr_int("ceil_mode", 0) != 0; }

// The lowest value of x's dtype, the padding a max never picks.
double lowest(const Tensor& x) {
  return x.is_floating_point() ? -std::numeric_limits<double>::infinity() : -4611686018427387904.0;  // -2^62
}

// MaxPool, with the optional Indices output: the flat position of each
// maximum in X, ((n C + c) H + h) W + w (storage_order 0) or with the
// spatial dims in column-major order (storage_order 1).
std::vector<Tensor> max_pool_op(const NodeArgs& a) {
  const Tensor& x = a.input(0);
  if (x.dim() < 3) a.invalid("X must be (N, C, d1, ...)");
  const Window w = geometry(a, x, size_ints(a, "kernel_shape"), pool_ceil(a));
  const bool want_indices = a.wants_output(1);
  const bool sym_small =
      w.nd == 2 && w.pad_begin == w.pad_end && 2 * w.pad_begin[0] <= w.kernel[0] && 2 * w.pad_begin[1] <= w.kernel[1];
  if (!want_indices && sym_small && all_ones(w.dil) && w.extra_end == Ints{0, 0} && x.is_floating_point())
    return {max_pool2d(x, {w.kernel[0], w.kernel[1]}, {w.stride[0], w.stride[1]}, {w.pad_begin[0], w.pad_begin[1]})};
  const Tensor cols = windows(a, pad_spatial(x, w.pad_begin, w.pad_end, w.extra_end, lowest(x)), w);
  const Tensor y = amax(cols, {2});
  if (!want_indices) return {y};
  // Window position k of each maximum -> its coordinates in X -> the flat index, on the host.
  const bool col_major = a.attr_int("storage_order", 0) != 0;
  const auto k = argmax(cols, 2).cpu().contiguous().to_vector<int64_t>();
  const Ints in = spatial(x);
  int64_t plane = 1, outs = 1;
  for (int64_t d = 0; d < w.nd; ++d) plane *= in[d], outs *= w.out[d];
  std::vector<int64_t> idx(k.size());
  Ints opos(w.nd), kpos(w.nd);
  for (size_t i = 0; i < k.size(); ++i) {
    int64_t r = static_cast<int64_t>(i) % outs, kk = k[i];
    for (int64_t d = w.nd - 1; d >= 0; --d) {
      opos[d] = r % w.out[d], r /= w.out[d];
      kpos[d] = kk % w.kernel[d], kk /= w.kernel[d];
    }
    int64_t flat = 0;
    for (int64_t j = 0; j < w.nd; ++j) {
      const int64_t d = col_major ? w.nd - 1 - j : j;
      flat = flat * in[d] + (opos[d] * w.stride[d] + kpos[d] * w.dil[d] - w.pad_begin[d]);
    }
    idx[i] = static_cast<int64_t>(i) / outs * plane + flat;
  }
  return {y, from_vector(idx, y.shape()).to(x.device())};
}

// AveragePool: window sums over the count of positions counted, which are
// the input's (count_include_pad 0, the default) or the input's and the
// declared pads' (1); positions beyond them that ceil_mode adds never count.
std::vector<Tensor> average_pool_op(const NodeArgs& a) {
  const Tensor& x = a.input(0);
  if (x.dim() < 3) a.invalid("X must be (N, C, d1, ...)");
  if (!x.is_floating_point()) a.unsupported("integer inputs");
  const Window w = geometry(a, x, size_ints(a, "kernel_shape"), pool_ceil(a));
  const bool include_pad = a.attr_int("count_include_pad", 0) != 0;
  const bool no_pads = std::all_of(w.pad_begin.begin(), w.pad_begin.end(), [](int64_t v) { return v == 0; }) &&
                       std::all_of(w.pad_end.begin(), w.pad_end.end(), [](int64_t v) { return v == 0; });
  const bool no_extra = std::all_of(w.extra_end.begin(), w.extra_end.end(), [](int64_t v) { return v == 0; });
  if (w.nd == 2 && all_ones(w.dil) && no_extra && w.pad_begin == w.pad_end && 2 * w.pad_begin[0] <= w.kernel[0] &&
      2 * w.pad_begin[1] <= w.kernel[1] && (include_pad || no_pads))
    return {
        avg_pool2d(x, {w.kernel[0], w.kernel[1]}, {w.stride[0], w.stride[1]}, {w.pad_begin[0], w.pad_begin[1]}, true)};
  const Tensor s = sum(windows(a, pad_spatial(x, w.pad_begin, w.pad_end, w.extra_end, 0.0), w), {2});
  if (no_extra && (include_pad || no_pads)) return {div(s, static_cast<double>(w.positions()))};
  Ints ones_shape = {1, 1};
  const Ints in = spatial(x);
  ones_shape.insert(ones_shape.end(), in.begin(), in.end());
  Tensor mask = ones(Shape(ones_shape), TensorOptions(x.dtype(), x.device()));
  mask = include_pad
             ? pad_spatial(pad_spatial(mask, w.pad_begin, w.pad_end, {}, 1.0), Ints(w.nd, 0), w.extra_end, {}, 0.0)
             : pad_spatial(mask, w.pad_begin, w.pad_end, w.extra_end, 0.0);
  return {div(s, sum(windows(a, mask, w), {2}))};
}

Shape spatial_dims(const NodeArgs& a, const Tensor& x) {
  if (x.dim() < 3) a.invalid("X must be (N, C, d1, ...)");
  Shape d;
  for (int64_t i = 2; i < x.dim(); ++i) d.push_back(i);
  return d;
}
std::vector<Tensor> global_average_pool_op(const NodeArgs& a) {
  return {mean(a.input(0), spatial_dims(a, a.input(0)), true)};
}
std::vector<Tensor> global_max_pool_op(const NodeArgs& a) {
  return {amax(a.input(0), spatial_dims(a, a.input(0)), true)};
}

// MaxUnpool: X's values put back at MaxPool's Indices (flat positions in the
// whole output) of a zero tensor of the pooled input's size, (in - 1) stride
// + kernel - pads, which output_shape may enlarge; the scatter differentiates in X.
std::vector<Tensor> max_unpool_op(const NodeArgs& a) {
  const Tensor &x = a.input(0), &indices = a.input(1);
  if (x.dim() < 3) a.invalid("X must be (N, C, d1, ...)");
  if (indices.shape() != x.shape() || indices.dtype() != kInt64) a.invalid("I must be integer indices of X's shape");
  const int64_t nd = x.dim() - 2;
  const Ints kernel = size_ints(a, "kernel_shape");
  if (static_cast<int64_t>(kernel.size()) != nd) a.invalid("kernel_shape does not match the input's rank");
  const Ints stride = attr_per_dim(a, "strides", nd, 1);
  const Ints pads = size_ints(a, "pads", Ints(2 * nd, 0));
  if (static_cast<int64_t>(pads.size()) != 2 * nd) a.invalid("pads must hold a begin and an end per spatial dim");
  Ints shape = {x.size(0), x.size(1)};
  for (int64_t d = 0; d < nd; ++d)
    shape.push_back((x.size(2 + d) - 1) * stride[d] + kernel[d] - pads[d] - pads[nd + d]);
  for (int64_t d = 0; d < nd; ++d)
    if (kernel[d] < 1 || stride[d] < 1 || shape[2 + d] < 0) a.invalid("kernel_shape, strides or pads out of range");
  check_elements(a, product(shape), "the output");
  int64_t total = 1;
  for (int64_t v : shape) total *= v;
  if (auto bad = find_bad_index(indices, total))
    a.invalid(ember::detail::cat_str("index ", *bad, " is out of range for an output of ", total, " elements"));
  const Tensor flat = zeros({total}, TensorOptions(x.dtype(), x.device()));
  const Tensor y = scatter_add(flat, 0, indices.reshape({-1}), x.reshape({-1})).reshape(Shape(shape));
  if (!a.has_input(2)) return {y};
  // A larger output_shape keeps the indices' positions (counted in the default shape) and adds zeros at the end.
  const Ints want = a.ints_input(2);
  if (static_cast<int64_t>(want.size()) != x.dim()) a.invalid("output_shape must have X's rank");
  Ints extra(nd, 0);
  check_elements(a, product(want), "output_shape");
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (want[d] < shape[d] || (d < 2 && want[d] != shape[d]))
      a.unsupported(
          ember::detail::cat_str("an output_shape ", Shape(want), " smaller than the unpooled ", Shape(shape)));
    if (d >= 2) extra[d - 2] = want[d] - shape[d];
  }
  return {pad_spatial(y, Ints(nd, 0), extra, {}, 0.0)};
}

}  // namespace

void register_conv_ops(OpTable& t) {
  t.add("Conv", conv_op);
  t.add("ConvInteger", conv_integer_op);
  t.add("QLinearConv", qlinear_conv_op);
  t.add("ConvTranspose", conv_transpose_op);
  t.add("MaxPool", max_pool_op);
  t.add("AveragePool", average_pool_op);
  t.add("GlobalAveragePool", global_average_pool_op);
  t.add("GlobalMaxPool", global_max_pool_op);
  t.add("MaxUnpool", max_unpool_op);
}

}  // namespace ember::onnx::detail
