// ONNX import: Resize (opsets 10 to 13+) and Upsample, nearest, linear and
// cubic, over any axes, as ONNX's reference computes them.
//
// The interpolation is separable: one axis at a time, each output index o
// maps to a coordinate x in the input (coordinate_transformation_mode) and
// reads n taps around it (1 for nearest, 2 for linear, 4 for cubic) with
// weights. The taps are worked out on the host; on the device an axis is
// sum_k index_select(x, axis, tap_k) * weight_k, so gradients reach the
// input. Taps beyond the edge read the edge (the reference pads by
// repeating it); exclude_outside gives them weight 0 and renormalises.
// tf_crop_and_resize gives an output whose coordinate falls outside the
// input extrapolation_value: weights 0 plus that value, which the later
// axes carry through unchanged since their weights sum to 1.
#include <algorithm>
#include <cmath>

#include <ember/onnx/import_ops.h>
#include <ember/ops/elementwise.h>
#include <ember/ops/factory.h>
#include <ember/ops/indexing.h>

namespace ember::onnx::detail {

namespace {

struct Options {
  std::string mode = "nearest";      // nearest, linear, cubic
  std::string coord = "half_pixel";  // coordinate_transformation_mode
  std::string nearest = "round_prefer_floor";
  double cubic_a = -0.75;
  bool exclude_outside = false;
  double extrapolation = 0.0;
};

// The taps of one axis: for output index o, taps[o * n + k] with weight[o * n + k]; outside[o] for
// tf_crop_and_resize's extrapolated outputs.
struct Taps {
  int64_t n = 1;
  std::vector<int64_t> index;
  std::vector<double> weight;
  std::vector<bool> outside;
  bool any_outside = false;
};

// The input coordinate of output index o (the reference's _interpolate_1d_with_x).
double source_coord(const Options& op, int64_t o, int64_t in, int64_t out, double scale, double roi_start,
                    double roi_end, bool& outside) {
  const double x = static_cast<double>(o);
  const double out_w = scale * static_cast<double>(in);  // the unrounded output length, as the reference uses
  outside = false;
  const std::string& m = op.coord;
  if (m == "align_corners") return out_w == 1 ? 0.0 : x * (in - 1) / (out_w - 1);
  if (m == "asymmetric") return x / scale;
  if (m == "tf_half_pixel_for_nn") return (x + 0.5) / scale;
  if (m == "pytorch_half_pixel") return out == 1 ? -0.5 : (x + 0.5) / scale - 0.5;
  if (m == "tf_crop_and_resize") {
    double xo =
        out_w == 1 ? (roi_end - roi_start) * (in - 1) / 2.0 : x * (roi_end - roi_start) * (in - 1) / (out_w - 1);
    xo += roi_start * (in - 1);
    outside = xo < 0 || xo > static_cast<double>(in - 1);
    return xo;
  }
  return (x + 0.5) / scale - 0.5;  // half_pixel
}

Taps taps_for(const Options& op, int64_t in, int64_t out, double scale, double roi_start, double roi_end) {
  Taps t;
  t.n = op.mode == "nearest" ? 1 : op.mode == "linear" ? 2 : 4;
  for (int64_t o = 0; o < out; ++o) {
    bool outside = false;
    const double x = source_coord(op, o, in, out, scale, roi_start, roi_end, outside);
    t.outside.push_back(outside);
    t.any_outside = t.any_outside || outside;
    // The left neighbour and the distance from it, in (0, 1]: an integer x counts as 1 past x - 1.
    const double fl = std::floor(x);
    const bool whole = x == fl;
    const int64_t base = static_cast<int64_t>(fl) - (whole ? 1 : 0);
    const double r = whole ? 1.0 : x - fl;
    std::vector<int64_t> idx;
    std::vector<double> w;
    if (op.mode == "nearest") {
      bool right = true;  // an integer x is x itself
      if (!whole) {
        if (op.nearest == "round_prefer_floor")
          right = r > 0.5;
        else if (op.nearest == "round_prefer_ceil")
          right = r >= 0.5;
        else if (op.nearest == "floor")
          right = false;
        else
          right = true;  // ceil
      }
      idx = {base + (right ? 1 : 0)};
      w = {1.0};
    } else if (op.mode == "linear") {
      idx = {base, base + 1};
      w = {1 - r, r};
    } else {
      const double A = op.cubic_a, s = r + 1, u = 1 - r, v = 2 - r;
      idx = {base - 1, base, base + 1, base + 2};
      w = {((A * s - 5 * A) * s + 8 * A) * s - 4 * A, ((A + 2) * r - (A + 3)) * r * r + 1,
           ((A + 2) * u - (A + 3)) * u * u + 1, ((A * v - 5 * A) * v + 8 * A) * v - 4 * A};
    }
    if (op.exclude_outside) {
      double total = 0;
      for (size_t k = 0; k < idx.size(); ++k) {
        if (idx[k] < 0 || idx[k] >= in) w[k] = 0;
        total += w[k];
      }
      for (auto& v : w) v /= total;
    }
    for (size_t k = 0; k < idx.size(); ++k) {
      t.index.push_back(std::min(std::max<int64_t>(idx[k], 0), in - 1));
      t.weight.push_back(outside ? 0.0 : w[k]);
    }
  }
  return t;
}

// Whether the taps read every input index once with weight 1, in order.
bool is_identity(const Taps& t, int64_t in, int64_t out) {
  if (in != out || t.any_outside) return false;
  for (int64_t o = 0; o < out; ++o)
    for (int64_t k = 0; k < t.n; ++k) {
      const double w = t.weight[o * t.n + k];
      if (w != 0 && (w != 1 || t.index[o * t.n + k] != o)) return false;
    }
  return true;
}

Tensor resize_axis(const Tensor& x, int64_t axis, const Taps& t, int64_t out, double extrapolation) {
  std::vector<int64_t> bshape(x.dim(), 1);
  bshape[axis] = out;
  Tensor y;
  for (int64_t k = 0; k < t.n; ++k) {
    std::vector<int64_t> idx(out);
    std::vector<double> w(out);
    bool all_one = true;
    for (int64_t o = 0; o < out; ++o) {
      idx[o] = t.index[o * t.n + k];
      w[o] = t.weight[o * t.n + k];
      all_one = all_one && w[o] == 1.0;
    }
    Tensor part = index_select(x, axis, from_vector(idx, Shape{out}).to(x.device()));
    if (!all_one) part = mul(part, from_vector(w, Shape(bshape)).to(x.dtype()).to(x.device()));
    y = y.defined() ? add(y, part) : part;
  }
  if (t.any_outside) {
    std::vector<double> e(out);
    for (int64_t o = 0; o < out; ++o) e[o] = t.outside[o] ? extrapolation : 0.0;
    y = add(y, from_vector(e, Shape(bshape)).to(x.dtype()).to(x.device()));
  }
  return y;
}

std::vector<double> floats_input(const NodeArgs& a, size_t i) {
  if (!a.has_input(i)) return {};
  return a.input(i).cpu().to(kFloat64).to_vector<double>();
}

Tensor resize(const NodeArgs& a, const Tensor& x, Options op, std::vector<double> scales, std::vector<int64_t> sizes,
              const std::vector<double>& roi) {
  const int64_t r = x.dim();
  if (op.mode != "nearest" && op.mode != "linear" && op.mode != "cubic")
    a.invalid("mode '" + op.mode + "' is not nearest, linear or cubic");
  static const std::vector<std::string> coords = {"half_pixel", "pytorch_half_pixel",   "align_corners",
                                                  "asymmetric", "tf_half_pixel_for_nn", "tf_crop_and_resize"};
  if (std::find(coords.begin(), coords.end(), op.coord) == coords.end())
    a.unsupported("coordinate_transformation_mode '" + op.coord + "'");
  if (op.nearest != "round_prefer_floor" && op.nearest != "round_prefer_ceil" && op.nearest != "floor" &&
      op.nearest != "ceil")
    a.invalid("nearest_mode '" + op.nearest + "' is not round_prefer_floor, round_prefer_ceil, floor or ceil");
  if (!sizes.empty()) {
    if (static_cast<int64_t>(sizes.size()) != r) a.invalid("sizes must have one entry per dim of X");
    scales.assign(r, 0);
    for (int64_t d = 0; d < r; ++d) {
      if (sizes[d] < 0) a.invalid("negative sizes");
      scales[d] = static_cast<double>(sizes[d]) / static_cast<double>(x.size(d));
    }
  } else {
    if (static_cast<int64_t>(scales.size()) != r) a.invalid("scales must have one entry per dim of X");
    sizes.assign(r, 0);
    for (int64_t d = 0; d < r; ++d) {
      if (!(scales[d] > 0)) a.invalid("scales must be positive");
      sizes[d] = static_cast<int64_t>(std::floor(scales[d] * static_cast<double>(x.size(d))));
    }
  }
  if (op.coord == "tf_crop_and_resize" && static_cast<int64_t>(roi.size()) != 2 * r)
    a.invalid("tf_crop_and_resize needs roi with a start and an end per dim of X");
  Tensor y = x;
  if (!x.is_floating_point() && op.mode != "nearest") y = y.to(kFloat32);
  for (int64_t d = 0; d < r; ++d) {
    const double rs = roi.size() == static_cast<size_t>(2 * r) ? roi[d] : 0.0;
    const double re = roi.size() == static_cast<size_t>(2 * r) ? roi[r + d] : 1.0;
    const Taps t = taps_for(op, x.size(d), sizes[d], scales[d], rs, re);
    if (is_identity(t, x.size(d), sizes[d])) continue;
    if (x.size(d) == 0) a.invalid("resizing an empty dim");
    y = resize_axis(y, d, t, sizes[d], op.extrapolation);
  }
  return y.dtype() == x.dtype() ? y : y.to(x.dtype());
}

Options options(const NodeArgs& a) {
  Options op;
  op.mode = a.attr_string("mode", "nearest");
  if (a.op_type() == "Upsample" || a.opset() < 11) {
    // Upsample and Resize-10: asymmetric coordinates, the nearest index rounded down.
    op.coord = "asymmetric";
    op.nearest = "floor";
    if (op.mode == "bilinear") op.mode = "linear";
    return op;
  }
  op.coord = a.attr_string("coordinate_transformation_mode", "half_pixel");
  op.nearest = a.attr_string("nearest_mode", "round_prefer_floor");
  op.cubic_a = a.attr_float("cubic_coeff_a", -0.75f);
  op.exclude_outside = a.attr_int("exclude_outside", 0) != 0;
  op.extrapolation = a.attr_float("extrapolation_value", 0.0f);
  return op;
}

// Resize: X, roi, scales, sizes from opset 11 (roi ignored unless tf_crop_and_resize); X, scales at 10.
std::vector<Tensor> resize_op(const NodeArgs& a) {
  const Tensor& x = a.input(0);
  if (a.has_attr("antialias") && a.attr_int("antialias")) a.unsupported("antialias");
  if (a.has_attr("axes")) a.unsupported("the axes attribute");
  if (a.has_attr("keep_aspect_ratio_policy") && a.attr_string("keep_aspect_ratio_policy") != "stretch")
    a.unsupported("keep_aspect_ratio_policy other than stretch");
  if (a.opset() < 11) return {resize(a, x, options(a), floats_input(a, 1), {}, {})};
  std::vector<int64_t> sizes;
  if (a.has_input(3) && a.input(3).numel() > 0) sizes = a.ints_input(3);
  std::vector<double> scales = floats_input(a, 2);
  if (sizes.empty() && scales.empty()) a.invalid("one of scales and sizes must be given");
  if (!sizes.empty() && !scales.empty()) a.invalid("only one of scales and sizes may be given");
  return {resize(a, x, options(a), scales, sizes, floats_input(a, 1))};
}

// Upsample (opsets 7 to 9): scales as an attribute (7) or the second input (9).
std::vector<Tensor> upsample_op(const NodeArgs& a) {
  std::vector<double> scales;
  if (a.has_input(1))
    scales = floats_input(a, 1);
  else
    for (float s : a.attr_floats("scales")) scales.push_back(s);
  return {resize(a, a.input(0), options(a), scales, {}, {})};
}

}  // namespace

void register_resize_ops(OpTable& t) {
  t.add("Resize", resize_op);
  t.add("Upsample", upsample_op);
}

}  // namespace ember::onnx::detail
