// GPT-2's byte-level BPE (nn/gpt2_tokenizer.h): loading the vocabulary and
// merges, the pre-tokenization pattern matched by hand over UTF-8 code points,
// and the merge loop with a per-word cache.
//
// Speed: encode splits the text into pre-tokens (a few hundred thousand in a
// megabyte of English) and looks each up in the word cache; only new words run
// BPE, whose cost is one hash probe per adjacent pair per merge pass.
#include <ember/core/error.h>
#include <ember/core/file_io.h>
#include <ember/core/utf8.h>
#include <ember/nn/gpt2_tokenizer.h>

#include <nlohmann/json.hpp>

#include <climits>
#include <filesystem>
#include <mutex>
#include <sstream>

namespace ember::nn {

using gpt2_unicode::CharClass;

struct GPT2Tokenizer::Cache {
  std::mutex mu;
  std::unordered_map<std::string, std::vector<int64_t>> words;
};

namespace {

// Words longer than this are not cached (a megabyte-long run of one letter
// would otherwise sit in the cache), and the cache is emptied when it holds
// this many words, so memory stays bounded on any input.
constexpr size_t kMaxCachedWord = 64;
constexpr size_t kMaxCachedWords = 1 << 20;

// One code point of text at byte p: its class and length in bytes
// (core/utf8.h's rules); a byte that does not start a well-formed sequence
// is a one-byte code point of class Other.
struct CodePoint {
  char32_t c;
  uint32_t len;
  CharClass cls;
};

struct AsciiClasses {
  CharClass cls[128];
  AsciiClasses() {
    for (int i = 0; i < 128; ++i) cls[i] = gpt2_unicode::classify(static_cast<char32_t>(i));
  }
};
const AsciiClasses kAscii;

CodePoint decode_at(std::string_view s, size_t p) {
  const uint8_t b0 = static_cast<uint8_t>(s[p]);
  if (b0 < 0x80) return {b0, 1, kAscii.cls[b0]};
  const Utf8Char u = utf8_at(s, p);
  if (!u.valid) return {0xFFFD, 1, CharClass::Other};
  return {u.c, u.len, gpt2_unicode::classify(u.c)};
}

// The end of the pre-token starting at byte p, trying the pattern's
// alternatives in order as a backtracking regex engine does (the first that
// matches wins, not the longest).
size_t match_at(std::string_view s, size_t p) {
  const size_t n = s.size();
  const CodePoint c = decode_at(s, p);
  // 's|'t|'re|'ve|'m|'ll|'d (lower case only, as in the pattern).
  if (c.c == '\'' && p + 1 < n) {
    const char x = s[p + 1];
    if (x == 's' || x == 't' || x == 'm' || x == 'd') return p + 2;
    if (p + 2 < n) {
      const char y = s[p + 2];
      if ((x == 'r' && y == 'e') || (x == 'v' && y == 'e') || (x == 'l' && y == 'l')) return p + 3;
    }
  }
  // A run of one class from q: \p{L}+, \p{N}+ or [^\s\p{L}\p{N}]+.
  const auto run = [&](size_t q, CharClass k) {
    while (q < n) {
      const CodePoint d = decode_at(s, q);
      if (d.cls != k) break;
      q += d.len;
    }
    return q;
  };
  if (c.cls != CharClass::Space) return run(p, c.cls);
  // " ?X+": a single U+0020 takes the run that follows it when that run is not whitespace.
  if (c.c == ' ' && p + 1 < n) {
    const CodePoint d = decode_at(s, p + 1);
    if (d.cls != CharClass::Space) return run(p + 1, d.cls);
  }
  // \s+(?!\S): the whitespace run, less its last code point when a non-space
  // follows (that one joins the next pre-token, as " word"); \s+ when the run
  // is a single code point before a non-space.
  size_t q = p, last = p;
  while (q < n) {
    const CodePoint d = decode_at(s, q);
    if (d.cls != CharClass::Space) break;
    last = q;
    q += d.len;
  }
  if (q == n || last == p) return q;
  return last;
}

// GPT-2's bytes_to_unicode: the printable bytes ! .. ~, ¡ .. ¬, ® .. ÿ stand
// for themselves; the other 68 bytes, in order, for U+0100, U+0101, ...
struct ByteTable {
  char32_t to_cp[256];
  int16_t from_cp[256 + 68];
  ByteTable() {
    const auto printable = [](int b) { return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE; };
    int n = 0;
    for (int b = 0; b < 256; ++b) to_cp[b] = printable(b) ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + n++);
    for (auto& v : from_cp) v = -1;
    for (int b = 0; b < 256; ++b) from_cp[to_cp[b]] = static_cast<int16_t>(b);
  }
};
const ByteTable kBytes;

// A token as the files spell it (UTF-8 over the byte alphabet) -> its raw
// bytes; false when it holds a character outside the alphabet.
bool unalphabet(std::string_view token, std::string& out) {
  out.clear();
  for (size_t p = 0; p < token.size();) {
    const CodePoint c = decode_at(token, p);
    if (c.c == 0xFFFD || c.c >= 256 + 68 || kBytes.from_cp[c.c] < 0) return false;
    out.push_back(static_cast<char>(kBytes.from_cp[c.c]));
    p += c.len;
  }
  return true;
}

uint64_t pair_key(int32_t a, int32_t b) { return (static_cast<uint64_t>(a) << 32) | static_cast<uint32_t>(b); }

}  // namespace

GPT2Tokenizer::GPT2Tokenizer() : cache_(std::make_shared<Cache>()) {}

char32_t GPT2Tokenizer::byte_to_unicode(uint8_t b) { return kBytes.to_cp[b]; }

GPT2Tokenizer GPT2Tokenizer::from_strings(const std::string& vocab_json, const std::string& merges,
                                          const std::string& vocab_name, const std::string& merges_name) {
  GPT2Tokenizer t;
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(vocab_json);
  } catch (const nlohmann::json::exception& e) {
    throw IOError("GPT-2 vocabulary '" + vocab_name + "': malformed JSON: " + e.what());
  }
  EMBER_CHECK(j.is_object() && !j.empty(), IOError, "GPT-2 vocabulary '", vocab_name,
              "': expected a JSON object {token: id}");
  t.bytes_.assign(j.size(), std::string());
  std::vector<bool> seen(j.size(), false);
  std::string raw;
  for (const auto& [token, v] : j.items()) {
    EMBER_CHECK(v.is_number_integer(), IOError, "GPT-2 vocabulary '", vocab_name, "': token '", token,
                "' has a non-integer id");
    const int64_t id = v.get<int64_t>();
    EMBER_CHECK(id >= 0 && id < static_cast<int64_t>(j.size()) && !seen[static_cast<size_t>(id)], IOError,
                "GPT-2 vocabulary '", vocab_name, "': token '", token, "' has id ", id,
                ", which is repeated or outside 0..", j.size() - 1);
    EMBER_CHECK(unalphabet(token, raw), IOError, "GPT-2 vocabulary '", vocab_name, "': token '", token, "' (id ", id,
                ") holds a character outside GPT-2's byte-to-unicode alphabet");
    seen[static_cast<size_t>(id)] = true;
    t.bytes_[static_cast<size_t>(id)] = raw;
    t.ids_.emplace(raw, static_cast<int32_t>(id));
  }
  for (int b = 0; b < 256; ++b) {
    const auto it = t.ids_.find(std::string(1, static_cast<char>(b)));
    EMBER_CHECK(it != t.ids_.end(), IOError, "GPT-2 vocabulary '", vocab_name, "': byte ", b,
                " has no token of its own, so some text could not be encoded");
    t.byte_id_[b] = it->second;
  }
  // The merges: rank = the line's place among the merge lines. A pair listed
  // twice keeps its later rank, as dict(zip(merges, range(...))) does in encoder.py.
  std::istringstream in(merges);
  std::string line, a_raw, b_raw;
  int64_t lineno = 0, rank = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || (lineno == 1 && line.rfind("#version", 0) == 0)) continue;
    const size_t sp = line.find(' ');
    const bool two = sp != std::string::npos && sp > 0 && sp + 1 < line.size() && line.find(' ', sp + 1) == line.npos;
    EMBER_CHECK(two, IOError, "GPT-2 merges '", merges_name, "' line ", lineno,
                ": expected two tokens separated by one space, got '", line, "'");
    const std::string a = line.substr(0, sp), b = line.substr(sp + 1);
    EMBER_CHECK(unalphabet(a, a_raw) && unalphabet(b, b_raw), IOError, "GPT-2 merges '", merges_name, "' line ", lineno,
                ": '", line, "' holds a character outside GPT-2's byte-to-unicode alphabet");
    const auto ia = t.ids_.find(a_raw), ib = t.ids_.find(b_raw), iab = t.ids_.find(a_raw + b_raw);
    EMBER_CHECK(ia != t.ids_.end() && ib != t.ids_.end(), IOError, "GPT-2 merges '", merges_name, "' line ", lineno,
                ": '", ia == t.ids_.end() ? a : b, "' is not in the vocabulary '", vocab_name, "'");
    EMBER_CHECK(iab != t.ids_.end(), IOError, "GPT-2 merges '", merges_name, "' line ", lineno, ": the merge '", a + b,
                "' is not in the vocabulary '", vocab_name, "'");
    t.merges_[pair_key(ia->second, ib->second)] = (static_cast<uint64_t>(rank++) << 32) | iab->second;
  }
  EMBER_CHECK(!t.merges_.empty(), IOError, "GPT-2 merges '", merges_name, "': no merges");
  return t;
}

GPT2Tokenizer GPT2Tokenizer::from_files(const std::string& vocab_json_path, const std::string& merges_path) {
  return from_strings(read_file(vocab_json_path, "GPT-2 vocabulary"), read_file(merges_path, "GPT-2 merges"),
                      vocab_json_path, merges_path);
}

GPT2Tokenizer GPT2Tokenizer::from_directory(const std::string& dir) {
  namespace fs = std::filesystem;
  const fs::path d(dir);
  if (fs::exists(d / "encoder.json") && fs::exists(d / "vocab.bpe"))
    return from_files((d / "encoder.json").string(), (d / "vocab.bpe").string());
  if (fs::exists(d / "vocab.json") && fs::exists(d / "merges.txt"))
    return from_files((d / "vocab.json").string(), (d / "merges.txt").string());
  throw IOError("GPT-2 tokenizer directory '" + dir +
                "': holds neither encoder.json + vocab.bpe nor vocab.json + merges.txt");
}

std::vector<std::string_view> GPT2Tokenizer::pretokenize(std::string_view text) {
  std::vector<std::string_view> out;
  for (size_t p = 0; p < text.size();) {
    const size_t q = match_at(text, p);
    out.push_back(text.substr(p, q - p));
    p = q;
  }
  return out;
}

// encoder.py's bpe(): while some adjacent pair has a rank, merge every
// occurrence of the lowest-ranked pair, left to right, in one pass. Ids stand
// for the symbols (each token's bytes have one id), so a pair is one hash probe.
void GPT2Tokenizer::bpe(std::string_view word, std::vector<int64_t>& out) const {
  std::vector<int32_t> w(word.size());
  for (size_t i = 0; i < word.size(); ++i) w[i] = byte_id_[static_cast<uint8_t>(word[i])];
  while (w.size() > 1) {
    uint64_t best = UINT64_MAX;  // rank << 32 | merged id: the smallest is the lowest rank
    size_t at = 0;
    for (size_t i = 0; i + 1 < w.size(); ++i) {
      const auto it = merges_.find(pair_key(w[i], w[i + 1]));
      if (it != merges_.end() && it->second < best) best = it->second, at = i;
    }
    if (best == UINT64_MAX) break;
    const auto merged = static_cast<int32_t>(best & 0xFFFFFFFFu);
    const int32_t a = w[at], b = w[at + 1];
    size_t o = 0;
    for (size_t i = 0; i < w.size(); ++o) {
      if (i + 1 < w.size() && w[i] == a && w[i + 1] == b) {
        w[o] = merged, i += 2;
      } else {
        w[o] = w[i], i += 1;
      }
    }
    w.resize(o);
  }
  out.insert(out.end(), w.begin(), w.end());
}

std::vector<int64_t> GPT2Tokenizer::encode(std::string_view text) const {
  std::vector<int64_t> out;
  out.reserve(text.size() / 3);
  std::lock_guard<std::mutex> lock(cache_->mu);
  auto& words = cache_->words;
  std::string key;
  for (size_t p = 0; p < text.size();) {
    const size_t q = match_at(text, p);
    const std::string_view word = text.substr(p, q - p);
    p = q;
    if (word.size() > kMaxCachedWord) {
      bpe(word, out);
      continue;
    }
    key.assign(word);
    auto it = words.find(key);
    if (it == words.end()) {
      if (words.size() >= kMaxCachedWords) words.clear();
      std::vector<int64_t> ids;
      bpe(word, ids);
      it = words.emplace(key, std::move(ids)).first;
    }
    out.insert(out.end(), it->second.begin(), it->second.end());
  }
  return out;
}

std::vector<int64_t> GPT2Tokenizer::encode_with_special(std::string_view text) const {
  static constexpr std::string_view kEot = "<|endoftext|>";
  const int64_t eot = token_id(kEot);
  EMBER_CHECK(eot >= 0, ValueError, "GPT2Tokenizer: this vocabulary has no <|endoftext|>");
  std::vector<int64_t> out;
  for (size_t p = 0;;) {
    const size_t q = text.find(kEot, p);
    const std::vector<int64_t> part = encode(text.substr(p, q == text.npos ? text.npos : q - p));
    out.insert(out.end(), part.begin(), part.end());
    if (q == text.npos) break;
    out.push_back(eot);
    p = q + kEot.size();
  }
  return out;
}

const std::string& GPT2Tokenizer::token_bytes(int64_t id) const {
  EMBER_CHECK(id >= 0 && id < vocab_size(), IndexError, "GPT2Tokenizer: token id ", id, " outside the vocabulary of ",
              vocab_size());
  return bytes_[static_cast<size_t>(id)];
}

int64_t GPT2Tokenizer::token_id(std::string_view bytes) const {
  const auto it = ids_.find(std::string(bytes));
  return it == ids_.end() ? -1 : it->second;
}

std::string GPT2Tokenizer::decode(const std::vector<int64_t>& ids) const {
  std::string out;
  for (const int64_t id : ids) out += token_bytes(id);
  return out;
}

}  // namespace ember::nn
