// The demos' PNG charts (apps/common/plot.h): colours, cell placement, the
// written file, and errors that name the problem.
#include <doctest/doctest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include <ember/ember.h>

#include "plot.h"

using namespace ember;
namespace fs = std::filesystem;

namespace {
bool same(plot::Color a, plot::Color b) { return a.r == b.r && a.g == b.g && a.b == b.b; }
}  // namespace

TEST_CASE("plot: viridis runs from dark purple to yellow and clamps") {
  CHECK(same(plot::viridis(0.0), {68, 1, 84}));
  CHECK(same(plot::viridis(1.0), {253, 231, 37}));
  CHECK(same(plot::viridis(-3.0), plot::viridis(0.0)));
  CHECK(same(plot::viridis(7.0), plot::viridis(1.0)));
  CHECK(plot::viridis(0.5).g > plot::viridis(0.25).g);
}

TEST_CASE("plot: a heatmap writes a PNG, atomically, and rejects a wrong value count") {
  const fs::path dir = fs::temp_directory_path() / "ember_test_plot";
  fs::remove_all(dir);
  fs::create_directories(dir);
  plot::Heatmap m;
  m.rows = 2, m.cols = 3;
  m.values = {0, 1, 2, 3, 4, 5};
  const plot::Canvas c = plot::render(m);
  CHECK(c.width() == 760);
  const std::string path = dir.string() + "/h.png";
  c.save_png(path);
  std::ifstream f(path, std::ios::binary);
  char sig[8] = {};
  f.read(sig, 8);
  CHECK((sig[1] == 'P' && sig[2] == 'N' && sig[3] == 'G'));
  CHECK(!fs::exists(path + ".tmp"));
  m.values.pop_back();
  const std::string msg = [&] {
    try {
      plot::render(m);
    } catch (const ValueError& e) {
      return std::string(e.what());
    }
    return std::string();
  }();
  CHECK(msg.find("2x3") != std::string::npos);
  CHECK(msg.find("5") != std::string::npos);
  CHECK_THROWS_AS(c.save_png((dir / "missing" / "h.png").string()), IOError);
  fs::remove_all(dir);
}

TEST_CASE("plot: canvas primitives stay inside the image") {
  plot::Canvas c(10, 10);
  c.line(-5, -5, 20, 20, {255, 0, 0}, 3);  // clipped, no out-of-range writes
  c.dot(9, 9, 4, {0, 255, 0});
  c.fill_rect(-3, -3, 100, 2, {0, 0, 255});
  c.text(-4, 8, "clipped text", {0, 0, 0});
  CHECK(plot::Canvas::text_width("abc") > plot::Canvas::text_width("a"));
  CHECK(plot::Canvas::text_width("") == 0);
}

TEST_CASE("plot: line charts accept log scales, gaps and empty series") {
  plot::LineChart lc;
  lc.log_y = true;
  lc.series = {{{1, 2, 3, 4}, {1.0, 0.1, -1.0, 0.001}, "loss", -1, true, 2}, {{}, {}, "", -1, true, 0}};
  const plot::Canvas c = plot::render(lc, 400, 300);
  CHECK(c.height() == 300);
  plot::LineChart empty;
  CHECK(plot::render(empty).width() == 900);
}
