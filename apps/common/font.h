// The charts' text (plot.h): a TrueType font (DejaVu Sans from Debian's
// fonts-dejavu-core) drawn anti-aliased with stb_truetype, or, when no font
// file loads, stb_easy_font's built-in strokes. Text is UTF-8.
//
// stb_truetype trusts the font file it parses (a hostile file can make it read
// out of bounds), so fonts come only from a fixed list of system paths or from
// the EMBER_FONT environment variable, never from data an app is handed.
#pragma once

#include <memory>
#include <string>
#include <string_view>

namespace ember::plot {

class Canvas;
struct Color;

// The codepoints of UTF-8 text. Each maximal ill-formed subsequence (a stray
// continuation byte, a truncated sequence, an overlong form, a surrogate, a
// value past U+10FFFF) becomes one U+FFFD, the Unicode Standard's practice
// (chapter 3, "U+FFFD Substitution of Maximal Subparts").
std::u32string decode_utf8(std::string_view s);

class Font {
 public:
  // Where the charts look for a font when EMBER_FONT is unset: DejaVu Sans at
  // the paths Debian/Ubuntu, Fedora, Arch and Alpine install it to.
  static const char* const kSearchPaths[];

  // The font the charts draw with, loaded once per process (thread-safe): the
  // file EMBER_FONT names when it is set, else the first search path that
  // loads; if none does, the built-in font, after one warning on stderr.
  static const Font& charts();
  // The search charts() makes, uncached, with `override_path` in place of
  // EMBER_FONT (nullptr or empty: unset). Returns the built-in font, and the
  // reason in *warning, when nothing loads; *warning is cleared otherwise.
  static std::unique_ptr<Font> find(const char* override_path, std::string* warning);
  // A TrueType font from path; nullptr, with the reason in *why, when the
  // file cannot be read or stb_truetype does not accept it as a font.
  static std::unique_ptr<Font> load(const std::string& path, std::string* why);
  // stb_easy_font: printable ASCII, every other codepoint drawn as '?'.
  static std::unique_ptr<Font> builtin();

  ~Font();
  bool truetype() const { return tt_ != nullptr; }
  const std::string& source() const { return source_; }  // the file, or "built-in"

  // Sizes are the em in pixels (CSS's font-size), clamped to [1, 512].
  // The advance of one codepoint, unrounded; a missing glyph has the
  // font's missing glyph's advance.
  double advance(char32_t cp, int px) const;
  // The width of the widest line of s: the sum of its advances, rounded.
  int width(std::string_view s, int px) const;
  // The height of one line; "\n" starts the next line that far below.
  int line_height(int px) const;
  // Draws s with the top of its first line at y and its pen starting at x,
  // blending the glyphs' coverage into the canvas; clipped to the canvas.
  void draw(Canvas& canvas, int x, int y, std::string_view s, Color color, int px) const;

 private:
  struct TrueType;
  Font() = default;
  std::unique_ptr<TrueType> tt_;  // null: the built-in font
  std::string source_ = "built-in";
};

}  // namespace ember::plot
