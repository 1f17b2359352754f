// The raster renderer behind plot.h.
#include "plot.h"

#include <stb_image_write.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>

#include <ember/core/error.h>
#include <ember/core/file_io.h>

#include "font.h"

namespace ember::plot {

Color palette(int i) {
  static const Color tab10[] = {{31, 119, 180}, {255, 127, 14},  {44, 160, 44},   {214, 39, 40},  {148, 103, 189},
                                {140, 86, 75},  {227, 119, 194}, {127, 127, 127}, {188, 189, 34}, {23, 190, 207}};
  return tab10[((i % 10) + 10) % 10];
}

Color viridis(double t) {
  // Viridis sampled at 9 evenly spaced points, linearly interpolated.
  static const double k[9][3] = {{68, 1, 84},    {71, 44, 122}, {59, 81, 139},  {44, 113, 142}, {33, 144, 141},
                                 {39, 173, 129}, {92, 200, 99}, {170, 220, 50}, {253, 231, 37}};
  if (!(t >= 0)) t = 0;  // NaN too
  if (t > 1) t = 1;
  const double f = t * 8;
  const int i = std::min(7, static_cast<int>(f));
  const double u = f - i;
  auto mix = [&](int c) { return static_cast<uint8_t>(std::lround(k[i][c] + (k[i + 1][c] - k[i][c]) * u)); };
  return {mix(0), mix(1), mix(2)};
}

Canvas::Canvas(int width, int height, Color bg) : w_(width), h_(height), px_(static_cast<size_t>(width) * height * 3) {
  for (size_t i = 0; i < px_.size(); i += 3) {
    px_[i] = bg.r;
    px_[i + 1] = bg.g;
    px_[i + 2] = bg.b;
  }
}

void Canvas::set(int x, int y, Color c) {
  if (x < 0 || y < 0 || x >= w_ || y >= h_) return;
  uint8_t* p = &px_[(static_cast<size_t>(y) * w_ + x) * 3];
  p[0] = c.r;
  p[1] = c.g;
  p[2] = c.b;
}

void Canvas::fill_rect(int x0, int y0, int x1, int y1, Color c) {
  for (int y = std::max(0, y0); y < std::min(h_, y1); ++y)
    for (int x = std::max(0, x0); x < std::min(w_, x1); ++x) set(x, y, c);
}

void Canvas::line(double x0, double y0, double x1, double y1, Color c, int thickness) {
  // Step along the longer axis one pixel at a time; a square pen gives thickness.
  const double dx = x1 - x0, dy = y1 - y0;
  const int steps = std::max(1, static_cast<int>(std::ceil(std::max(std::fabs(dx), std::fabs(dy)))));
  const int lo = -(thickness - 1) / 2, hi = thickness / 2;
  for (int s = 0; s <= steps; ++s) {
    const int x = static_cast<int>(std::lround(x0 + dx * s / steps));
    const int y = static_cast<int>(std::lround(y0 + dy * s / steps));
    for (int a = lo; a <= hi; ++a)
      for (int b = lo; b <= hi; ++b) set(x + a, y + b, c);
  }
}

void Canvas::dot(double cx, double cy, int r, Color c) {
  for (int y = -r; y <= r; ++y)
    for (int x = -r; x <= r; ++x)
      if (x * x + y * y <= r * r + r)
        set(static_cast<int>(std::lround(cx)) + x, static_cast<int>(std::lround(cy)) + y, c);
}

void Canvas::blend(int x, int y, Color c, uint8_t alpha) {
  if (x < 0 || y < 0 || x >= w_ || y >= h_) return;
  uint8_t* p = &px_[(static_cast<size_t>(y) * w_ + x) * 3];
  // p + (c - p) * alpha / 255, rounded; the sum stays within 0..255.
  auto mix = [alpha](uint8_t from, uint8_t to) {
    return static_cast<uint8_t>((from * (255 - alpha) + to * alpha + 127) / 255);
  };
  p[0] = mix(p[0], c.r);
  p[1] = mix(p[1], c.g);
  p[2] = mix(p[2], c.b);
}

Color Canvas::at(int x, int y) const {
  EMBER_CHECK(x >= 0 && y >= 0 && x < w_ && y < h_, ValueError, "plot: pixel (", x, ", ", y, ") is outside the ", w_,
              "x", h_, " canvas");
  const uint8_t* p = &px_[(static_cast<size_t>(y) * w_ + x) * 3];
  return {p[0], p[1], p[2]};
}

void Canvas::text(int x, int y, const std::string& s, Color c, int px) { Font::charts().draw(*this, x, y, s, c, px); }

int Canvas::text_width(const std::string& s, int px) { return Font::charts().width(s, px); }

int Canvas::text_height(int px) { return Font::charts().line_height(px); }

std::string Canvas::png(const std::string& what) const {
  std::string png;
  auto sink = [](void* ctx, void* data, int size) {
    static_cast<std::string*>(ctx)->append(static_cast<const char*>(data), static_cast<size_t>(size));
  };
  EMBER_CHECK(stbi_write_png_to_func(sink, &png, w_, h_, 3, px_.data(), w_ * 3) != 0, IOError,
              "plot: could not encode ", what, " as PNG");
  return png;
}

void Canvas::save_png(const std::string& path) const { write_file_atomic(path, png(path)); }

namespace {

const Color kBlack{0, 0, 0}, kGrid{225, 225, 225}, kAxis{60, 60, 60};

// Round-number ticks (1, 2, 5 times a power of ten) covering [lo, hi].
std::vector<double> nice_ticks(double lo, double hi, int target = 6) {
  if (!(hi > lo)) return {lo};
  const double raw = (hi - lo) / target;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (raw <= m * mag) {
      step = m * mag;
      break;
    }
  std::vector<double> t;
  for (double v = std::ceil(lo / step - 1e-9) * step; v <= hi + step * 1e-9; v += step)
    t.push_back(std::fabs(v) < step * 1e-9 ? 0.0 : v);
  return t;
}

std::string fmt(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%g", v);
  return b;
}

}  // namespace

Canvas render(const LineChart& chart, int width, int height) {
  Canvas c(width, height);
  const int left = 90, right = 30, top = 50, bottom = 70;
  const int pw = width - left - right, ph = height - top - bottom;
  // Data ranges (log y on positive values only).
  double x0 = std::numeric_limits<double>::infinity(), x1 = -x0, y0 = x0, y1 = -x0;
  auto ty = [&](double y) { return chart.log_y ? std::log10(y) : y; };
  for (const Series& s : chart.series)
    for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
      if (!std::isfinite(s.x[i]) || !std::isfinite(s.y[i]) || (chart.log_y && s.y[i] <= 0)) continue;
      x0 = std::min(x0, s.x[i]);
      x1 = std::max(x1, s.x[i]);
      y0 = std::min(y0, ty(s.y[i]));
      y1 = std::max(y1, ty(s.y[i]));
    }
  if (!(x1 >= x0)) x0 = 0, x1 = 1, y0 = 0, y1 = 1;
  if (x1 == x0) x0 -= 0.5, x1 += 0.5;
  if (y1 == y0) y0 -= 0.5, y1 += 0.5;
  const double pad = (y1 - y0) * 0.05;
  y0 -= pad;
  y1 += pad;
  if (chart.log_y) y0 = std::floor(y0 * 2) / 2, y1 = std::ceil(y1 * 2) / 2;
  auto px = [&](double x) { return left + (x - x0) / (x1 - x0) * pw; };
  auto py = [&](double y) { return top + ph - (ty(y) - y0) / (y1 - y0) * ph; };

  // Grid and ticks.
  for (double t : nice_ticks(x0, x1)) {
    const double X = px(t);
    c.line(X, top, X, top + ph, kGrid, 1);
    const std::string s = fmt(t);
    c.text(static_cast<int>(X) - Canvas::text_width(s) / 2, top + ph + 8, s, kAxis);
  }
  std::vector<double> yt;
  if (chart.log_y) {
    for (double e = std::ceil(y0); e <= y1; ++e) yt.push_back(e);
    if (yt.size() < 2) yt = nice_ticks(y0, y1);
  } else {
    yt = nice_ticks(y0, y1);
  }
  for (double t : yt) {
    const double Y = top + ph - (t - y0) / (y1 - y0) * ph;
    c.line(left, Y, left + pw, Y, kGrid, 1);
    const std::string s = chart.log_y ? fmt(std::pow(10.0, t)) : fmt(t);
    c.text(left - 8 - Canvas::text_width(s), static_cast<int>(Y) - Canvas::text_height() / 2, s, kAxis);
  }
  c.line(left, top, left, top + ph, kAxis, 1);
  c.line(left, top + ph, left + pw, top + ph, kAxis, 1);

  // Series, clipped to the plot area by skipping points outside it.
  for (size_t k = 0; k < chart.series.size(); ++k) {
    const Series& s = chart.series[k];
    const Color col = palette(s.color >= 0 ? s.color : static_cast<int>(k));
    bool have_prev = false;
    double pxp = 0, pyp = 0;
    for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
      const bool ok = std::isfinite(s.x[i]) && std::isfinite(s.y[i]) && !(chart.log_y && s.y[i] <= 0);
      if (!ok) {
        have_prev = false;
        continue;
      }
      const double X = px(s.x[i]), Y = std::clamp(py(s.y[i]), double(top), double(top + ph));
      if (s.line && have_prev) c.line(pxp, pyp, X, Y, col, 2);
      if (s.marker_radius > 0) c.dot(X, Y, s.marker_radius, col);
      pxp = X, pyp = Y, have_prev = true;
    }
  }

  // Legend, top right.
  int ly = top + 10;
  int lw = 0;
  for (const Series& s : chart.series) lw = std::max(lw, Canvas::text_width(s.label));
  for (size_t k = 0; k < chart.series.size(); ++k) {
    const Series& s = chart.series[k];
    if (s.label.empty()) continue;
    const Color col = palette(s.color >= 0 ? s.color : static_cast<int>(k));
    const int lx = left + pw - lw - 50;
    c.fill_rect(lx - 6, ly - 4, left + pw - 4, ly + 20, {255, 255, 255});
    const int mid = ly + Canvas::text_height() / 2;
    if (s.line) c.line(lx, mid, lx + 28, mid, col, 3);
    if (s.marker_radius > 0) c.dot(lx + 14, mid, s.marker_radius + 1, col);
    c.text(lx + 36, ly, s.label, kBlack);
    ly += 24;
  }

  c.text((width - Canvas::text_width(chart.title, kTitlePx)) / 2, 12, chart.title, kBlack, kTitlePx);
  c.text(left + (pw - Canvas::text_width(chart.xlabel)) / 2, height - 30, chart.xlabel, kBlack);
  c.text(8, top - 24, chart.ylabel, kBlack);
  return c;
}

Canvas render(const Heatmap& m, int width, int height) {
  EMBER_CHECK(m.rows > 0 && m.cols > 0 && m.values.size() == static_cast<size_t>(m.rows) * m.cols, ValueError,
              "plot: heatmap of ", m.rows, "x", m.cols, " needs ", m.rows * m.cols, " values, got ", m.values.size());
  Canvas c(width, height);
  const int left = 100, right = 130, top = 50, bottom = 80;
  const int pw = width - left - right, ph = height - top - bottom;
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (double v : m.values)
    if (std::isfinite(v)) lo = std::min(lo, v), hi = std::max(hi, v);
  if (!(hi > lo)) hi = lo + 1;
  // Cells: like pcolormesh, each value fills its own rectangle.
  for (int r = 0; r < m.rows; ++r)
    for (int k = 0; k < m.cols; ++k) {
      const int xa = left + k * pw / m.cols, xb = left + (k + 1) * pw / m.cols;
      const int ya = top + r * ph / m.rows, yb = top + (r + 1) * ph / m.rows;
      const double v = m.values[static_cast<size_t>(r) * m.cols + k];
      const Color col = viridis((v - lo) / (hi - lo));
      c.fill_rect(xa, ya, xb, yb, col);
      if (m.annotate) {
        const std::string s = fmt(std::round(v * 100) / 100);
        const Color tc = (v - lo) / (hi - lo) > 0.6 ? kBlack : Color{255, 255, 255};
        // kTextPx, smaller where a long value would not fit its cell.
        int px = kTextPx;
        while (px > 8 && Canvas::text_width(s, px) > xb - xa - 4) --px;
        c.text((xa + xb - Canvas::text_width(s, px)) / 2, (ya + yb - Canvas::text_height(px)) / 2, s, tc, px);
      }
    }
  // Ticks: category labels, or numbers along the extents.
  auto axis_ticks = [&](bool is_x) {
    const int n = is_x ? m.cols : m.rows;
    const std::vector<std::string>& labels = is_x ? m.col_labels : m.row_labels;
    auto pos = [&](double cell) {  // centre of a (fractional) cell index
      return is_x ? left + (cell + 0.5) * pw / n : top + (cell + 0.5) * ph / n;
    };
    auto put = [&](double p, const std::string& s) {
      if (is_x)
        c.text(static_cast<int>(p) - Canvas::text_width(s) / 2, top + ph + 8, s, kAxis);
      else
        c.text(left - 8 - Canvas::text_width(s), static_cast<int>(p) - Canvas::text_height() / 2, s, kAxis);
    };
    if (!labels.empty()) {
      const int every = m.label_every > 0 ? m.label_every : std::max(1, static_cast<int>(labels.size()) / 12);
      for (int i = 0; i < n && i < static_cast<int>(labels.size()); i += every) put(pos(i), labels[i]);
      return;
    }
    const double first = is_x ? m.x_first : m.y_first, last = is_x ? m.x_last : m.y_last;
    if (first == last || n < 2) return;
    for (double t : nice_ticks(std::min(first, last), std::max(first, last)))
      put(pos((t - first) / (last - first) * (n - 1)), fmt(t));
  };
  axis_ticks(true);
  axis_ticks(false);
  // Colour bar.
  const int bx = left + pw + 30, bw = 24;
  for (int y = 0; y < ph; ++y) c.fill_rect(bx, top + y, bx + bw, top + y + 1, viridis(1.0 - double(y) / (ph - 1)));
  c.line(bx, top, bx, top + ph, kAxis, 1);
  c.line(bx + bw, top, bx + bw, top + ph, kAxis, 1);
  for (double t : nice_ticks(lo, hi, 5)) {
    const double Y = top + ph - (t - lo) / (hi - lo) * ph;
    c.line(bx + bw, Y, bx + bw + 4, Y, kAxis, 1);
    c.text(bx + bw + 12, static_cast<int>(Y) - Canvas::text_height() / 2, fmt(t), kAxis);
  }
  c.text((width - Canvas::text_width(m.title, kTitlePx)) / 2, 12, m.title, kBlack, kTitlePx);
  c.text(left + (pw - Canvas::text_width(m.xlabel)) / 2, height - 34, m.xlabel, kBlack);
  c.text(8, top - 24, m.ylabel, kBlack);
  return c;
}

Canvas render_grid(const std::vector<ImageTile>& tiles, int columns, int scale, const std::string& title) {
  EMBER_CHECK(!tiles.empty() && columns > 0 && scale > 0, ValueError, "plot: an image grid needs tiles");
  const int th = tiles[0].height * scale, tw = tiles[0].width * scale;
  int cap = 0;
  for (const ImageTile& t : tiles) cap = std::max(cap, Canvas::text_width(t.caption, kCaptionPx));
  const int cell_w = std::max(tw, cap) + 16, cell_h = th + 28;
  const int rows = (static_cast<int>(tiles.size()) + columns - 1) / columns;
  Canvas c(columns * cell_w + 16, rows * cell_h + 56);
  c.text(12, 12, title, kBlack, kTitlePx);
  for (size_t i = 0; i < tiles.size(); ++i) {
    const ImageTile& t = tiles[i];
    EMBER_CHECK(t.pixels.size() == static_cast<size_t>(t.channels) * t.height * t.width, ValueError, "plot: tile ", i,
                " has ", t.pixels.size(), " values for ", t.channels, "x", t.height, "x", t.width);
    const int ox = 16 + static_cast<int>(i % columns) * cell_w + (cell_w - 16 - tw) / 2;
    const int oy = 50 + static_cast<int>(i / columns) * cell_h;
    for (int y = 0; y < t.height; ++y)
      for (int x = 0; x < t.width; ++x) {
        auto ch = [&](int k) {
          const float v = t.pixels[(static_cast<size_t>(t.channels == 3 ? k : 0) * t.height + y) * t.width + x];
          return static_cast<uint8_t>(std::lround(std::clamp(v, 0.0f, 1.0f) * 255));
        };
        c.fill_rect(ox + x * scale, oy + y * scale, ox + (x + 1) * scale, oy + (y + 1) * scale, {ch(0), ch(1), ch(2)});
      }
    c.text(16 + static_cast<int>(i % columns) * cell_w + (cell_w - 16 - Canvas::text_width(t.caption, kCaptionPx)) / 2,
           oy + th + 6, t.caption, t.caption_color, kCaptionPx);
  }
  return c;
}

}  // namespace ember::plot
