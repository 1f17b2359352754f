// The charts' font (font.h): finding and loading the TrueType file, UTF-8
// decoding, and drawing with stb_truetype or the stb_easy_font fallback.
#include "font.h"

#include <ember/core/utf8.h>

#include <stb_easy_font.h>
#include <stb_truetype.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <vector>

#include <ember/core/error.h>
#include <ember/core/file_io.h>

#include "plot.h"

namespace ember::plot {

const char* const Font::kSearchPaths[] = {
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",    // Debian, Ubuntu: fonts-dejavu-core
    "/usr/share/fonts/dejavu-sans-fonts/DejaVuSans.ttf",  // Fedora
    "/usr/share/fonts/TTF/DejaVuSans.ttf",                // Arch
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",             // Alpine, older Fedora
    nullptr,
};

std::u32string decode_utf8(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const Utf8Char u = utf8_at(s, i);
    out.push_back(u.c);
    i += u.len;
  }
  return out;
}

namespace {

// Far beyond any font (DejaVu Sans is 0.7 MB), so that EMBER_FONT naming a
// huge file is refused instead of read.
constexpr uintmax_t kMaxFontBytes = uintmax_t{64} << 20;

int clamp_px(int px) { return std::clamp(px, 1, 512); }

// stb_easy_font's scale for an em of px pixels: its capitals are 7 units tall
// where DejaVu's are 0.73 em.
int builtin_scale(int px) { return std::max(1, static_cast<int>(std::lround(clamp_px(px) / 7.5))); }

// What stb_easy_font can draw: printable ASCII and '\n' (it indexes its
// glyph table with c - 32, so nothing else may reach it), anything else '?'.
std::string builtin_text(std::string_view s) {
  std::string out;
  for (char32_t cp : decode_utf8(s)) out.push_back(cp == '\n' || (cp >= 32 && cp <= 126) ? static_cast<char>(cp) : '?');
  return out;
}

// stb_truetype reads the tables at the offsets the file's directory states,
// unchecked. The fonts it is given are trusted, but a truncated file (a copy
// cut short) must not send it past the buffer: the directory, and every
// table it lists, has to lie inside the data.
bool tables_inside(const std::string& d, size_t offset) {
  auto byte = [&](size_t at) { return static_cast<size_t>(static_cast<unsigned char>(d[at])); };
  auto u16 = [&](size_t at) { return byte(at) << 8 | byte(at + 1); };
  auto u32 = [&](size_t at) { return u16(at) << 16 | u16(at + 2); };
  if (offset + 12 > d.size()) return false;
  const size_t tables = u16(offset + 4);
  if (offset + 12 + 16 * tables > d.size()) return false;
  for (size_t t = 0; t < tables; ++t) {
    const size_t entry = offset + 12 + 16 * t, at = u32(entry + 8), length = u32(entry + 12);
    if (at > d.size() || length > d.size() - at) return false;
  }
  return true;
}

}  // namespace

struct Font::TrueType {
  std::string data;  // the file; stbtt_fontinfo points into it
  stbtt_fontinfo info{};
  int ascent = 0, descent = 0;  // font units; descent is negative
  float scale(int px) const { return stbtt_ScaleForMappingEmToPixels(&info, static_cast<float>(clamp_px(px))); }
};

Font::~Font() = default;

std::unique_ptr<Font> Font::builtin() { return std::unique_ptr<Font>(new Font()); }

std::unique_ptr<Font> Font::load(const std::string& path, std::string* why) {
  auto fail = [&](const std::string& reason) {
    if (why) *why = "font '" + path + "': " + reason;
    return nullptr;
  };
  auto tt = std::make_unique<TrueType>();
  try {
    require_regular_file(path, "font");
    std::error_code ec;
    const uintmax_t size = std::filesystem::file_size(path, ec);
    if (ec) return fail("cannot read its size (" + ec.message() + ")");
    if (size > kMaxFontBytes) return fail(std::to_string(size) + " bytes is too large for a font");
    tt->data = read_file(path, "font");
  } catch (const IOError& e) {
    if (why) *why = e.what();
    return nullptr;
  }
  const auto* bytes = reinterpret_cast<const unsigned char*>(tt->data.data());
  // 16 bytes: a font collection's header, which GetFontOffsetForIndex reads.
  const int offset = tt->data.size() >= 16 ? stbtt_GetFontOffsetForIndex(bytes, 0) : -1;
  if (offset < 0 || !tables_inside(tt->data, static_cast<size_t>(offset)) || !stbtt_InitFont(&tt->info, bytes, offset))
    return fail("not a TrueType font stb_truetype can read");
  int gap = 0;
  stbtt_GetFontVMetrics(&tt->info, &tt->ascent, &tt->descent, &gap);
  if (tt->ascent - tt->descent <= 0) return fail("its ascent and descent leave no room for a line");
  std::unique_ptr<Font> font(new Font());
  font->tt_ = std::move(tt);
  font->source_ = path;
  return font;
}

std::unique_ptr<Font> Font::find(const char* override_path, std::string* warning) {
  std::string why;
  if (override_path && *override_path) {
    if (auto f = load(override_path, &why)) {
      if (warning) warning->clear();
      return f;
    }
    if (warning) *warning = why + " (from EMBER_FONT)";
    return builtin();
  }
  for (const char* const* p = kSearchPaths; *p; ++p)
    if (auto f = load(*p, nullptr)) {
      if (warning) warning->clear();
      return f;
    }
  if (warning) *warning = std::string("no TrueType font found (install fonts-dejavu-core, or set EMBER_FONT)");
  return builtin();
}

const Font& Font::charts() {
  static const std::unique_ptr<Font> font = [] {
    std::string warning;
    std::unique_ptr<Font> f = find(std::getenv("EMBER_FONT"), &warning);
    if (!warning.empty())
      std::fprintf(stderr, "plot: warning: %s; the charts use a built-in bitmap font\n", warning.c_str());
    return f;
  }();
  return *font;
}

double Font::advance(char32_t cp, int px) const {
  if (!tt_) {
    char one[2] = {cp >= 32 && cp <= 126 ? static_cast<char>(cp) : '?', 0};
    return stb_easy_font_width(one) * builtin_scale(px);
  }
  int adv = 0, lsb = 0;
  stbtt_GetGlyphHMetrics(&tt_->info, stbtt_FindGlyphIndex(&tt_->info, static_cast<int>(cp)), &adv, &lsb);
  return adv * static_cast<double>(tt_->scale(px));
}

int Font::width(std::string_view s, int px) const {
  if (!tt_) {
    std::string text = builtin_text(s);
    return stb_easy_font_width(text.data()) * builtin_scale(px);
  }
  const float scale = tt_->scale(px);
  double widest = 0, line = 0;
  for (char32_t cp : decode_utf8(s)) {
    if (cp == '\n') {
      line = 0;
      continue;
    }
    int adv = 0, lsb = 0;
    stbtt_GetGlyphHMetrics(&tt_->info, stbtt_FindGlyphIndex(&tt_->info, static_cast<int>(cp)), &adv, &lsb);
    line += adv * static_cast<double>(scale);
    widest = std::max(widest, line);
  }
  return static_cast<int>(std::lround(widest));
}

int Font::line_height(int px) const {
  if (!tt_) return 8 * builtin_scale(px);
  return static_cast<int>(std::ceil((tt_->ascent - tt_->descent) * tt_->scale(px)));
}

void Font::draw(Canvas& canvas, int x, int y, std::string_view s, Color color, int px) const {
  if (!tt_) {
    // stb_easy_font emits quads (4 vertices of x, y, z, rgba: 16 bytes each)
    // in unscaled pixels; it stops at the end of the buffer (about 270 bytes
    // a character are needed).
    std::string text = builtin_text(s);
    std::vector<char> buffer(512 * (text.size() + 1));
    const int scale = builtin_scale(px);
    const int quads = stb_easy_font_print(0, 0, text.data(), nullptr, buffer.data(), static_cast<int>(buffer.size()));
    for (int q = 0; q < quads; ++q) {
      float v0[2], v2[2];
      std::memcpy(v0, buffer.data() + q * 64, sizeof v0);
      std::memcpy(v2, buffer.data() + q * 64 + 32, sizeof v2);
      canvas.fill_rect(x + static_cast<int>(v0[0] * scale), y + static_cast<int>(v0[1] * scale),
                       x + static_cast<int>(v2[0] * scale), y + static_cast<int>(v2[1] * scale), color);
    }
    return;
  }
  const float scale = tt_->scale(px);
  const int baseline0 = y + static_cast<int>(std::lround(tt_->ascent * scale));
  const int step = line_height(px);
  double pen = x;
  int baseline = baseline0;
  std::vector<unsigned char> coverage;
  for (char32_t cp : decode_utf8(s)) {
    if (cp == '\n') {
      pen = x;
      baseline += step;
      continue;
    }
    const int glyph = stbtt_FindGlyphIndex(&tt_->info, static_cast<int>(cp));  // 0: the missing glyph
    int adv = 0, lsb = 0;
    stbtt_GetGlyphHMetrics(&tt_->info, glyph, &adv, &lsb);
    // The pen keeps its fraction of a pixel: the glyph is rasterised shifted
    // by it, so that spacing does not drift by a rounding per character.
    const int ix = static_cast<int>(std::floor(pen));
    const float shift = static_cast<float>(pen - ix);
    int x0 = 0, y0 = 0, x1 = 0, y1 = 0;
    stbtt_GetGlyphBitmapBoxSubpixel(&tt_->info, glyph, scale, scale, shift, 0, &x0, &y0, &x1, &y1);
    const int w = x1 - x0, h = y1 - y0;
    if (w > 0 && h > 0) {
      coverage.assign(static_cast<size_t>(w) * h, 0);
      stbtt_MakeGlyphBitmapSubpixel(&tt_->info, coverage.data(), w, h, w, scale, scale, shift, 0, glyph);
      for (int r = 0; r < h; ++r)
        for (int k = 0; k < w; ++k)
          if (const unsigned char a = coverage[static_cast<size_t>(r) * w + k])
            canvas.blend(ix + x0 + k, baseline + y0 + r, color, a);
    }
    pen += adv * static_cast<double>(scale);
  }
}

}  // namespace ember::plot
