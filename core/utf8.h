/// \file
/// UTF-8 decoding, one code point at a time, for the GPT-2 tokenizer's
/// pre-tokenizer and the charts' text.
///
/// Well-formed sequences are the Unicode Standard's table 3-7 (WHATWG's
/// decoder): the lead byte fixes the length and the range of the second
/// byte, which rules out overlong forms (E0, F0), surrogates (ED) and values
/// past U+10FFFF (F4). Anything else is ill-formed; a decoder replaces each
/// maximal subpart (the lead byte and the continuation bytes that still fit
/// it, at least one byte) by one U+FFFD.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace ember {

/// One decoded code point: c and its length in bytes, or for ill-formed
/// input U+FFFD, valid = false and the length of the maximal subpart.
struct Utf8Char {
  char32_t c;
  uint32_t len;
  bool valid;
};

/// The code point starting at byte p of s (p < s.size()).
inline Utf8Char utf8_at(std::string_view s, size_t p) {
  const auto b = [&](size_t i) { return static_cast<uint8_t>(s[i]); };
  const uint8_t b0 = b(p);
  if (b0 < 0x80) return {b0, 1, true};
  uint32_t len;
  uint8_t lo = 0x80, hi = 0xBF;
  char32_t c;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    len = 2, c = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3, c = b0 & 0x0F;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4, c = b0 & 0x07;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {  // a continuation byte with no lead, C0, C1, F5..FF
    return {0xFFFD, 1, false};
  }
  for (uint32_t i = 1; i < len; ++i) {
    if (p + i >= s.size()) return {0xFFFD, i, false};
    const uint8_t bi = b(p + i);
    if (bi < (i == 1 ? lo : 0x80) || bi > (i == 1 ? hi : 0xBF)) return {0xFFFD, i, false};  // bi starts the next
    c = (c << 6) | (bi & 0x3F);
  }
  return {c, len, true};
}

}  // namespace ember
