// The demos' PNG charts (apps/common/plot.h): colours, cell placement, the
// written file, and errors that name the problem.
#include <doctest/doctest.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <ember/ember.h>

#include "font.h"
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

// The charts' font (font.h). The TrueType checks use DejaVu Sans, the font
// scripts/setup.sh installs (fonts-dejavu-core); its numbers below are from
// its tables: 2048 units to the em, ascent 1901, descent 483; '8' advances
// 1303 with its outline in x 139..1163, y -29..1520; the missing glyph (glyph
// 0) advances 1229; U+FFFD advances 2100.
namespace {

std::unique_ptr<plot::Font> dejavu() {
  for (const char* const* p = plot::Font::kSearchPaths; *p; ++p)
    if (std::string(*p).find("DejaVuSans.ttf") != std::string::npos)
      if (auto f = plot::Font::load(*p, nullptr)) return f;
  return nullptr;
}

// The smallest box holding every pixel that is not white: {x0, y0, x1, y1}, inclusive; x0 = -1 when none.
std::array<int, 4> ink_box(const plot::Canvas& c) {
  std::array<int, 4> b = {-1, -1, -1, -1};
  for (int y = 0; y < c.height(); ++y)
    for (int x = 0; x < c.width(); ++x)
      if (!same(c.at(x, y), {255, 255, 255})) {
        if (b[0] < 0) b = {x, y, x, y};
        b = {std::min(b[0], x), std::min(b[1], y), std::max(b[2], x), std::max(b[3], y)};
      }
  return b;
}

}  // namespace

TEST_CASE("plot: UTF-8 decodes to codepoints, each ill-formed subsequence to one U+FFFD") {
  CHECK(plot::decode_utf8("a\xc3\xa9\xe6\xbc\xa2\xf0\x9f\x98\x80") == U"a\u00e9\u6f22\U0001F600");
  CHECK(plot::decode_utf8("\xff") == U"\uFFFD");
  CHECK(plot::decode_utf8("\x80z") == U"\uFFFDz");                              // a continuation byte with no lead
  CHECK(plot::decode_utf8("\xe6\xbc") == U"\uFFFD");                            // truncated at the end
  CHECK(plot::decode_utf8("\xe6\xbcz") == U"\uFFFDz");                          // truncated before an ASCII byte
  CHECK(plot::decode_utf8("\xc0\xaf") == U"\uFFFD\uFFFD");                      // overlong '/'
  CHECK(plot::decode_utf8("\xed\xa0\x80") == U"\uFFFD\uFFFD\uFFFD");            // a surrogate
  CHECK(plot::decode_utf8("\xf4\x90\x80\x80") == U"\uFFFD\uFFFD\uFFFD\uFFFD");  // past U+10FFFF
  CHECK(plot::decode_utf8(std::string("a\0b", 3)) == std::u32string(U"a\0b", 3));
}

TEST_CASE("plot: DejaVu Sans draws '8' anti-aliased inside its outline's box") {
  const auto font = dejavu();
  if (!font) {
    MESSAGE("DejaVu Sans is not installed (scripts/setup.sh installs fonts-dejavu-core): skipped");
    return;
  }
  CHECK(font->truetype());
  // At an em of 40 px a unit is 40 / 2048 px. The baseline is 1901 units
  // (37.1 px) below the top: drawn at y = 10 it is row 47. The outline spans
  // x 10 + 2.7 .. 10 + 22.7 and y 47 - 29.7 .. 47 + 0.6: pixels 12..32, 17..47.
  plot::Canvas c(60, 70);
  font->draw(c, 10, 10, "8", {0, 0, 0}, 40);
  const std::array<int, 4> b = ink_box(c);
  CHECK(b[0] >= 12);
  CHECK(b[0] <= 13);
  CHECK(b[2] <= 32);
  CHECK(b[2] >= 31);
  CHECK(b[1] >= 17);
  CHECK(b[1] <= 18);
  CHECK(b[3] <= 47);
  CHECK(b[3] >= 46);
  // Solid black in the strokes, partial coverage along the curves' edges.
  int solid = 0, partial = 0;
  for (int y = b[1]; y <= b[3]; ++y)
    for (int x = b[0]; x <= b[2]; ++x) {
      const plot::Color p = c.at(x, y);
      CHECK((p.r == p.g && p.g == p.b));  // black blended over white stays grey
      solid += p.r == 0;
      partial += p.r > 0 && p.r < 255;
    }
  CHECK(solid > 40);
  CHECK(partial > 20);
  CHECK(font->line_height(40) == 47);  // (1901 + 483) * 40 / 2048 = 46.6, rounded up
}

TEST_CASE("plot: text_width is the sum of the glyphs' advances") {
  const auto font = dejavu();
  if (!font) {
    MESSAGE("DejaVu Sans is not installed: skipped");
    return;
  }
  CHECK(font->width("8", 512) == 326);   // 1303 / 4
  CHECK(font->width("8888", 20) == 51);  // 4 * 1303 * 20 / 2048 = 50.9
  CHECK(font->advance(U'8', 20) == doctest::Approx(1303 * 20 / 2048.0));
  CHECK(font->width("ab", 15) == std::lround(font->advance(U'a', 15) + font->advance(U'b', 15)));
  CHECK(font->width("abc", 15) > font->width("ab", 15));
  CHECK(font->width("ab\nabc", 15) == font->width("abc", 15));  // the widest line
  CHECK(font->width("", 15) == 0);
  // A codepoint DejaVu lacks takes the missing glyph's advance; a bad byte U+FFFD's.
  CHECK(font->width("\xe6\xbc\xa2", 512) == 307);  // 1229 / 4
  CHECK(font->width("\xff", 512) == 525);          // 2100 / 4
  CHECK(font->width("\xff", 512) == font->width("\xef\xbf\xbd", 512));
  // Sizes are clamped to [1, 512], so a wild size costs no wild bitmap.
  CHECK(font->width("8", 100000) == font->width("8", 512));
  CHECK(font->width("8", -5) == font->width("8", 1));
}

TEST_CASE("plot: a font that cannot be loaded falls back to the built-in font, which still draws") {
  const fs::path dir = fs::temp_directory_path() / "ember_test_font";
  fs::create_directories(dir);
  const std::string missing = (dir / "missing.ttf").string();
  setenv("EMBER_FONT", missing.c_str(), 1);
  std::string warning;
  const auto font = plot::Font::find(std::getenv("EMBER_FONT"), &warning);
  unsetenv("EMBER_FONT");
  REQUIRE(font);
  CHECK(!font->truetype());
  CHECK(font->source() == "built-in");
  CHECK(warning.find(missing) != std::string::npos);
  CHECK(warning.find("EMBER_FONT") != std::string::npos);
  // stb_easy_font at an em of 15 px draws at scale 2: '8' is 4 units wide
  // and 7 tall, advancing 6.
  CHECK(font->width("8", 15) == 12);
  CHECK(font->width("88", 15) == 24);
  plot::Canvas c(40, 40);
  font->draw(c, 10, 10, "8", {0, 0, 0}, 15);
  const std::array<int, 4> b = ink_box(c);
  CHECK(b == std::array<int, 4>{10, 10, 17, 23});
  int black = 0;
  for (int y = 0; y < c.height(); ++y)
    for (int x = 0; x < c.width(); ++x) {
      const plot::Color p = c.at(x, y);
      CHECK((same(p, {0, 0, 0}) || same(p, {255, 255, 255})));  // solid strokes, no blending
      black += same(p, {0, 0, 0});
    }
  CHECK(black > 30);
  // Anything but printable ASCII is one '?' per character or bad byte.
  CHECK(font->width("\xc3\xa9", 15) == font->width("?", 15));
  CHECK(font->width("\xff\xfe", 15) == font->width("??", 15));
  font->draw(c, 0, 0, "\xc3\xa9\xff\x01\t\xe6\xbc", {0, 0, 0}, 15);

  // A file that is not a font, and a real font cut short, are refused by name.
  const std::string junk = (dir / "junk.ttf").string();
  std::ofstream(junk) << "not a font, just text that is long enough to have a header\n";
  std::string why;
  CHECK(plot::Font::load(junk, &why) == nullptr);
  CHECK(why.find(junk) != std::string::npos);
  CHECK(plot::Font::load(dir.string(), &why) == nullptr);  // a directory
  CHECK(why.find("directory") != std::string::npos);
  if (const auto full = dejavu()) {
    std::ifstream in(full->source(), std::ios::binary);
    std::string head(4096, '\0');
    in.read(head.data(), static_cast<std::streamsize>(head.size()));
    const std::string cut = (dir / "cut.ttf").string();
    std::ofstream(cut, std::ios::binary) << head;
    CHECK(plot::Font::load(cut, &why) == nullptr);
    CHECK(why.find("cut.ttf") != std::string::npos);
  }
  fs::remove_all(dir);
}

TEST_CASE("plot: non-ASCII and invalid UTF-8 text draws and measures safely") {
  const auto font = dejavu();
  if (!font) {
    MESSAGE("DejaVu Sans is not installed: skipped");
    return;
  }
  plot::Canvas c(200, 40);
  const std::string text = "\xc3\xa9\xe6\xbc\xa2\xff\xc3 \xed\xa0\x80\xf0\x9f\x98\x80\n\x01";
  font->draw(c, -3, -2, text, {200, 0, 0}, 15);
  const std::array<int, 4> b = ink_box(c);
  CHECK(b[0] == 0);  // clipped at the left and top edges, drawn
  CHECK(b[2] > 40);
  CHECK(font->width(text, 15) > 40);
  // Through the canvas, with whatever font the process found.
  c.text(0, 0, text);
  CHECK(plot::Canvas::text_width(text) > 0);
  CHECK(plot::Canvas::text_height() > 0);
}
