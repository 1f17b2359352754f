// Charts the demo apps write as PNG: line charts (loss curves, a function
// against its prediction, with points), heatmaps with a colour bar (attention
// weights, confusion matrices) and image grids. A small raster renderer over
// stb_image_write, with anti-aliased TrueType text (font.h: DejaVu Sans through
// stb_truetype, stb_easy_font's strokes when no font file is found); no
// plotting stack needed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ember::plot {

struct Color {
  uint8_t r = 0, g = 0, b = 0;
};

// The palette lines take in order (matplotlib's tab10).
Color palette(int i);
// Viridis at t in [0, 1].
Color viridis(double t);

// Text sizes, the em in pixels (CSS's font-size): tick labels, legends, axis
// labels and a confusion matrix's counts at kTextPx (matplotlib's 10 points at
// 100 dpi is 14), titles at kTitlePx, image captions at kCaptionPx.
inline constexpr int kTextPx = 15, kTitlePx = 22, kCaptionPx = 14;

// An RGB image with the drawing primitives the charts need.
class Canvas {
 public:
  Canvas(int width, int height, Color background = {255, 255, 255});
  int width() const { return w_; }
  int height() const { return h_; }
  void set(int x, int y, Color c);
  // Mixes c over the pixel with opacity alpha / 255 (a glyph's coverage).
  void blend(int x, int y, Color c, uint8_t alpha);
  Color at(int x, int y) const;                             // throws ValueError outside the image
  void fill_rect(int x0, int y0, int x1, int y1, Color c);  // [x0, x1) x [y0, y1)
  void line(double x0, double y0, double x1, double y1, Color c, int thickness = 2);
  void dot(double x, double y, int radius, Color c);
  // UTF-8 text in the charts' font (font.h) at an em of px pixels, with the
  // top-left of its line at (x, y). text_height is the height of the line,
  // ascender to descender: a label centred on y starts at y - text_height / 2.
  void text(int x, int y, const std::string& s, Color c = {0, 0, 0}, int px = kTextPx);
  static int text_width(const std::string& s, int px = kTextPx);
  static int text_height(int px = kTextPx);
  // Writes the PNG atomically (a temporary file renamed into place); throws
  // ember::IOError naming the path when it cannot.
  void save_png(const std::string& path) const;
  // The PNG's bytes, for outputs written as a set (app::write_files_together);
  // `what` names it in the error when it cannot be encoded.
  std::string png(const std::string& what) const;

 private:
  int w_, h_;
  std::vector<uint8_t> px_;
};

struct Series {
  std::vector<double> x, y;
  std::string label;
  int color = -1;         // palette index; -1 takes the series' position
  bool line = true;       // joined by a line
  int marker_radius = 0;  // > 0: a dot at every point
};

struct LineChart {
  std::string title, xlabel, ylabel;
  std::vector<Series> series;
  bool log_y = false;  // loss curves
};

// Renders a chart: axes with round-number ticks, a legend for labelled series.
Canvas render(const LineChart& chart, int width = 900, int height = 560);

struct Heatmap {
  std::string title, xlabel, ylabel;
  int rows = 0, cols = 0;
  std::vector<double> values;  // row-major rows x cols; row 0 is drawn at the top
  // Tick labels: either one per row / column (categories) or, when empty, the
  // numeric extents below (value at the first and last cell centre).
  std::vector<std::string> row_labels, col_labels;
  double x_first = 0, x_last = 0, y_first = 0, y_last = 0;
  bool annotate = false;  // print each value in its cell (small matrices)
  // Category labels: print every label_every-th one; 0 picks a step that
  // shows about 12 (one per cell is right for short character sequences).
  int label_every = 0;
};

Canvas render(const Heatmap& map, int width = 760, int height = 640);

// Greyscale or RGB images (values in [0, 1], channel-first [C, H, W]) in a grid
// with a caption under each, e.g. "shirt (T-shirt)" in green when right.
struct ImageTile {
  int channels = 1, height = 0, width = 0;
  std::vector<float> pixels;
  std::string caption;
  Color caption_color;
};
Canvas render_grid(const std::vector<ImageTile>& tiles, int columns, int scale, const std::string& title);

}  // namespace ember::plot
