// ONNX import: the sampling ops GridSample and RoiAlign.
//
// GridSample and RoiAlign read the input at fractional positions. Where and
// with which weights is worked out on the host (the positions depend on the
// grid's or the boxes' values); the reading is one index_select of the
// input's rows (N H W, C) and a weighted sum on the device, so gradients
// reach X (not the grid or the boxes, which only steer the sampling).
#include <algorithm>
#include <cmath>
#include <limits>

#include <ember/onnx/import_ops.h>
#include <ember/ops/elementwise.h>
#include <ember/ops/factory.h>
#include <ember/ops/indexing.h>
#include <ember/ops/reduce.h>

namespace ember::onnx::detail {

namespace {

// A pixel coordinate as an integer index; NaN and values far outside any image become -1 (outside).
int64_t to_index(double v) { return std::isfinite(v) && std::fabs(v) < 1e9 ? static_cast<int64_t>(v) : -1; }

// x (N, C, H, W) as rows (N H W, C): row (n H + h) W + w holds the pixel's channels.
Tensor pixel_rows(const Tensor& x) { return x.permute({0, 2, 3, 1}).reshape({-1, x.size(1)}); }

// Taps gathered and weighted: (O, n, C) for O = idx.size() / n outputs of n taps each.
Tensor gather_taps(const Tensor& rows, const std::vector<int64_t>& idx, const std::vector<double>& w, int64_t n) {
  const int64_t total = static_cast<int64_t>(idx.size());
  const Tensor picked = index_select(rows, 0, from_vector(idx, Shape{total}).to(rows.device()));
  const Tensor weights = from_vector(w, Shape{total, 1}).to(rows.dtype()).to(rows.device());
  return mul(picked, weights).reshape({total / n, n, rows.size(1)});
}

// ---- GridSample (opset 16, PyTorch's grid_sample) ----------------------------

// PyTorch's reflect_coordinates: x folded into [low, high] = [twice_low / 2, twice_high / 2].
double reflect(double x, double twice_low, double twice_high) {
  if (twice_low == twice_high) return 0;
  // NaN and +-inf fold to NaN (as in PyTorch, without its float-to-int
  // conversion of them, which C++ leaves undefined).
  if (!std::isfinite(x)) return std::numeric_limits<double>::quiet_NaN();
  const double lo = twice_low / 2, span = (twice_high - twice_low) / 2;
  x = std::fabs(x - lo);
  const double extra = std::fmod(x, span);
  // The parity of the folds, in double: a coordinate far outside the image
  // makes more folds than an integer holds.
  const double flips = std::floor(x / span);
  return std::fmod(flips, 2.0) == 0 ? extra + lo : span - extra + lo;
}

struct GridOptions {
  std::string mode, padding;
  bool align = false;
};

// A normalised coordinate in [-1, 1] as a pixel coordinate along a dim of `size`.
double unnormalize(double v, int64_t size, bool align) {
  return align ? (v + 1) / 2 * static_cast<double>(size - 1) : ((v + 1) * static_cast<double>(size) - 1) / 2;
}

// The padding mode applied to a pixel coordinate (PyTorch's compute_coordinates).
double pad_coord(double x, int64_t size, const GridOptions& g) {
  const double hi = static_cast<double>(size - 1);
  if (g.padding == "border") return std::min(std::max(x, 0.0), hi);
  if (g.padding == "reflection") {
    x = g.align ? reflect(x, 0, 2 * hi) : reflect(x, -1, 2 * static_cast<double>(size) - 1);
    return std::min(std::max(x, 0.0), hi);
  }
  return x;
}

// Keys' cubic convolution weights (A = -0.75) of the taps at floor - 1 .. floor + 2, t the distance from floor.
void cubic_weights(double t, double* w) {
  const double A = -0.75;
  auto near = [&](double x) { return ((A + 2) * x - (A + 3)) * x * x + 1; };
  auto far = [&](double x) { return ((A * x - 5 * A) * x + 8 * A) * x - 4 * A; };
  w[0] = far(t + 1), w[1] = near(t), w[2] = near(1 - t), w[3] = far(2 - t);
}

std::vector<Tensor> grid_sample_op(const NodeArgs& a) {
  const Tensor &x = a.input(0), &grid = a.input(1);
  if (x.dim() != 4 || grid.dim() != 4 || grid.size(0) != x.size(0) || grid.size(3) != 2)
    a.unsupported(ember::detail::cat_str("X ", x.shape(), " with grid ", grid.shape(),
                                         " (only 2-D sampling: X (N, C, H, W), grid (N, H_out, W_out, 2))"));
  GridOptions g{a.attr_string("mode", "bilinear"), a.attr_string("padding_mode", "zeros"),
                a.attr_int("align_corners", 0) != 0};
  if (g.mode == "linear") g.mode = "bilinear";
  if (g.mode == "cubic") g.mode = "bicubic";
  if (g.mode != "bilinear" && g.mode != "nearest" && g.mode != "bicubic")
    a.invalid("mode '" + g.mode + "' is not bilinear, nearest or bicubic");
  if (g.padding != "zeros" && g.padding != "border" && g.padding != "reflection")
    a.invalid("padding_mode '" + g.padding + "' is not zeros, border or reflection");
  const int64_t n = x.size(0), c = x.size(1), h = x.size(2), w = x.size(3), ho = grid.size(1), wo = grid.size(2);
  const auto gv = grid.cpu().to(kFloat64).contiguous().to_vector<double>();
  const int64_t taps = g.mode == "nearest" ? 1 : g.mode == "bilinear" ? 4 : 16;
  std::vector<int64_t> idx;
  std::vector<double> wt;
  idx.reserve(n * ho * wo * taps);
  wt.reserve(n * ho * wo * taps);
  // A tap at integer pixel (yi, xi): zero weight outside the image.
  auto tap = [&](int64_t b, int64_t yi, int64_t xi, double weight) {
    const bool in = yi >= 0 && yi < h && xi >= 0 && xi < w;
    idx.push_back(in ? (b * h + yi) * w + xi : 0);
    wt.push_back(in ? weight : 0.0);
  };
  for (int64_t b = 0; b < n; ++b)
    for (int64_t p = 0; p < ho * wo; ++p) {
      const double gx = gv[(b * ho * wo + p) * 2], gy = gv[(b * ho * wo + p) * 2 + 1];
      double ix = unnormalize(gx, w, g.align), iy = unnormalize(gy, h, g.align);
      if (g.mode == "bicubic") {
        // Taps around the raw coordinate, each moved by the padding mode on its own.
        if (!std::isfinite(ix) || !std::isfinite(iy)) ix = iy = -1e9;  // reads nothing (zeros) or the edge
        const double fx = std::floor(std::max(std::min(ix, 1e9), -1e9)),
                     fy = std::floor(std::max(std::min(iy, 1e9), -1e9));
        double wx[4], wy[4];
        cubic_weights(ix - fx, wx);
        cubic_weights(iy - fy, wy);
        for (int i = 0; i < 4; ++i)
          for (int j = 0; j < 4; ++j) {
            const double ty = pad_coord(fy - 1 + i, h, g), tx = pad_coord(fx - 1 + j, w, g);
            tap(b, to_index(ty), to_index(tx), wy[i] * wx[j]);
          }
        continue;
      }
      ix = pad_coord(ix, w, g), iy = pad_coord(iy, h, g);
      if (g.mode == "nearest") {
        tap(b, to_index(std::nearbyint(iy)), to_index(std::nearbyint(ix)), 1.0);
        continue;
      }
      const double x0 = std::floor(ix), y0 = std::floor(iy), lx = ix - x0, ly = iy - y0;
      const int64_t xi = to_index(x0), yi = to_index(y0);
      tap(b, yi, xi, (1 - ly) * (1 - lx));
      tap(b, yi, xi + 1, (1 - ly) * lx);
      tap(b, yi + 1, xi, ly * (1 - lx));
      tap(b, yi + 1, xi + 1, ly * lx);
    }
  const Tensor y = sum(gather_taps(pixel_rows(x), idx, wt, taps), {1});  // (N Ho Wo, C)
  return {y.reshape({n, ho, wo, c}).permute({0, 3, 1, 2}).contiguous()};
}

// The most bilinear taps RoiAlign lists on the host.
constexpr int64_t kMaxTaps = int64_t{1} << 28;

// ---- RoiAlign ------------------------------------------------------------------

// Each output bin averages (or, mode "max", takes the largest of) a grid of
// samples, each a bilinear read of its 4 neighbours; as onnxruntime, "max"
// compares the 4 weighted neighbours rather than interpolated values.
std::vector<Tensor> roi_align_op(const NodeArgs& a) {
  const Tensor &x = a.input(0), &rois = a.input(1);
  if (x.dim() != 4) a.invalid("X must be (N, C, H, W)");
  if (rois.dim() != 2 || rois.size(1) != 4) a.invalid("rois must be (num_rois, 4)");
  const auto bidx = a.ints_input(2);
  const int64_t num = rois.size(0), c = x.size(1), h = x.size(2), w = x.size(3);
  if (static_cast<int64_t>(bidx.size()) != num) a.invalid("batch_indices must hold one index per roi");
  const std::string mode = a.attr_string("mode", "avg");
  if (mode != "avg" && mode != "max") a.invalid("mode '" + mode + "' is not avg or max");
  // Opset 16 added half_pixel (its default); before, the coordinates were taken as they are.
  const bool half_pixel =
      a.opset() >= 16 && a.attr_string("coordinate_transformation_mode", "half_pixel") == "half_pixel";
  const int64_t ph = a.attr_int("output_height", 1), pw = a.attr_int("output_width", 1);
  const int64_t ratio = a.attr_int("sampling_ratio", 0);
  const double scale = a.attr_float("spatial_scale", 1.0f);
  if (ph < 1 || pw < 1 || static_cast<double>(ph) * static_cast<double>(pw) > static_cast<double>(kMaxTaps))
    a.invalid(ember::detail::cat_str("output size ", ph, " x ", pw, " is not positive or too large"));
  const auto rv = rois.cpu().to(kFloat64).contiguous().to_vector<double>();
  // Per roi: its sample grid; every bin is padded to the most samples any roi has.
  struct Roi {
    double y0, x0, bh, bw;
    int64_t gh, gw;
  };
  std::vector<Roi> rs(num);
  int64_t max_samples = 1;
  for (int64_t r = 0; r < num; ++r) {
    if (bidx[r] < 0 || bidx[r] >= x.size(0))
      a.invalid(ember::detail::cat_str("batch index ", bidx[r], " is out of range"));
    const double off = half_pixel ? 0.5 : 0.0;
    const double x0 = rv[r * 4] * scale - off, y0 = rv[r * 4 + 1] * scale - off;
    double rw = rv[r * 4 + 2] * scale - off - x0, rh = rv[r * 4 + 3] * scale - off - y0;
    if (!half_pixel) rw = std::max(rw, 1.0), rh = std::max(rh, 1.0);  // malformed rois forced to 1x1
    Roi& q = rs[r];
    q.y0 = y0, q.x0 = x0, q.bh = rh / static_cast<double>(ph), q.bw = rw / static_cast<double>(pw);
    if (!std::isfinite(x0) || !std::isfinite(y0) || !std::isfinite(rw) || !std::isfinite(rh))
      a.invalid(ember::detail::cat_str("roi ", r, " holds a value that is not finite"));
    const double gh = ratio > 0 ? ratio : std::ceil(rh / static_cast<double>(ph));
    const double gw = ratio > 0 ? ratio : std::ceil(rw / static_cast<double>(pw));
    if (gh * gw > static_cast<double>(kMaxTaps))
      a.invalid(ember::detail::cat_str("roi ", r, " needs a sampling grid of ", gh, " x ", gw, " per bin"));
    q.gh = std::max<int64_t>(static_cast<int64_t>(gh), 0), q.gw = std::max<int64_t>(static_cast<int64_t>(gw), 0);
    max_samples = std::max(max_samples, q.gh * q.gw);
  }
  const int64_t taps = 4 * max_samples;
  if (static_cast<double>(taps) * static_cast<double>(num) * static_cast<double>(ph * pw) >
      static_cast<double>(kMaxTaps))
    a.invalid("the rois, output size and sampling grids need too many samples");
  std::vector<int64_t> idx;
  std::vector<double> wt;
  for (int64_t r = 0; r < num; ++r) {
    const Roi& q = rs[r];
    const double count = static_cast<double>(std::max<int64_t>(q.gh * q.gw, 1));
    const double norm = mode == "avg" ? 1.0 / count : 1.0;
    for (int64_t i = 0; i < ph; ++i)
      for (int64_t j = 0; j < pw; ++j) {
        const size_t start = idx.size();
        for (int64_t iy = 0; iy < q.gh; ++iy)
          for (int64_t ix = 0; ix < q.gw; ++ix) {
            double yy = q.y0 + i * q.bh + (iy + 0.5) * q.bh / q.gh, xx = q.x0 + j * q.bw + (ix + 0.5) * q.bw / q.gw;
            const int64_t base = bidx[r] * h * w;
            if (yy < -1.0 || yy > h || xx < -1.0 || xx > w) {  // outside the map: 4 taps of weight 0
              for (int k = 0; k < 4; ++k) idx.push_back(base), wt.push_back(0.0);
              continue;
            }
            yy = std::max(yy, 0.0), xx = std::max(xx, 0.0);
            int64_t yl = static_cast<int64_t>(yy), xl = static_cast<int64_t>(xx), yh = yl + 1, xh = xl + 1;
            if (yl >= h - 1) yh = yl = h - 1, yy = static_cast<double>(yl);
            if (xl >= w - 1) xh = xl = w - 1, xx = static_cast<double>(xl);
            const double ly = yy - yl, lx = xx - xl;
            const int64_t pos[4] = {yl * w + xl, yl * w + xh, yh * w + xl, yh * w + xh};
            const double ws[4] = {(1 - ly) * (1 - lx), (1 - ly) * lx, ly * (1 - lx), ly * lx};
            for (int k = 0; k < 4; ++k) idx.push_back(base + pos[k]), wt.push_back(ws[k] * norm);
          }
        // Padding taps: weight 0 for a sum; copies of the first sample for a max (which they cannot change).
        for (int64_t k = static_cast<int64_t>(idx.size() - start); k < taps; ++k) {
          const size_t from = mode == "avg" ? start : start + static_cast<size_t>(k % 4);
          idx.push_back(idx[from]);
          wt.push_back(mode == "avg" ? 0.0 : wt[from]);
        }
      }
  }
  const Tensor t = gather_taps(pixel_rows(x), idx, wt, taps);  // (R ph pw, taps, C)
  const Tensor y = mode == "avg" ? sum(t, {1}) : amax(t, {1});
  return {y.reshape({num, ph, pw, c}).permute({0, 3, 1, 2}).contiguous()};
}

}  // namespace

void register_sampling_ops(OpTable& t) {
  t.add("GridSample", grid_sample_op);
  t.add("RoiAlign", roi_align_op);
}

}  // namespace ember::onnx::detail
