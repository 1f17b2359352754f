// Character-level text data (nn/text_data.h): tokenizer round trip and
// errors, the 90/10 split, seeded random windows, the whole-split loss.
#include <doctest/doctest.h>
#include <ember/ember.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

using namespace ember;
namespace fs = std::filesystem;

TEST_CASE("CharTokenizer: sorted distinct bytes, round trip, saved vocabulary, unknown characters") {
  const std::string text = "to be, or not to be\n\xc3\xa9t\xc3\xa9";
  const nn::CharTokenizer tok = nn::CharTokenizer::from_text(text);
  CHECK(tok.chars() == std::string("\n ,benort\xa9\xc3"));
  CHECK(tok.size() == 11);
  const std::vector<int64_t> ids = tok.encode(text);
  CHECK(ids[0] == 8);  // 't'
  CHECK(ids[2] == 1);  // ' '
  CHECK(tok.decode(ids) == text);
  const nn::CharTokenizer saved(tok.chars());
  CHECK(saved.encode(text) == ids);
  CHECK_THROWS_WITH_AS(tok.encode("to bz"), doctest::Contains("'z' at position 4"), ValueError);
  CHECK_THROWS_WITH_AS(tok.encode("\x01"), doctest::Contains("byte 0x01"), ValueError);
  CHECK_THROWS_AS(tok.decode({11}), ValueError);
  CHECK_THROWS_AS(tok.decode({-1}), ValueError);
  CHECK_THROWS_AS(nn::CharTokenizer(""), ValueError);
  CHECK_THROWS_AS(nn::CharTokenizer("ba"), ValueError);
  CHECK_THROWS_AS(nn::CharTokenizer("aa"), ValueError);
}

TEST_CASE("TextDataset: the last 10% validates, empty, short, missing and non-regular files are refused") {
  std::string text;
  for (int i = 0; i < 100; ++i) text += static_cast<char>('a' + i % 7);
  const nn::TextDataset d = nn::TextDataset::from_text(text, 8, "mem");
  CHECK(d.train.size() == 90);
  CHECK(d.val.size() == 10);
  CHECK(d.val[0] == 90 % 7);
  CHECK_THROWS_WITH_AS(nn::TextDataset::from_text("", 8, "empty.txt"),
                       doctest::Contains("empty.txt: the text is empty"), ValueError);
  CHECK_THROWS_WITH_AS(nn::TextDataset::from_text(text, 10, "short.txt"),
                       doctest::Contains("too few for a context of 10"), ValueError);
  // A resumed model's vocabulary that lacks a character of the corpus.
  const nn::CharTokenizer abc("abc");
  CHECK_THROWS_WITH_AS(nn::TextDataset::from_text(text, 4, "x", &abc), doctest::Contains("'d'"), ValueError);

  const fs::path dir = fs::temp_directory_path() / ("ember_text_data_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "empty.txt").close();
  std::ofstream(dir / "text.txt") << text;
  CHECK_THROWS_WITH_AS(nn::TextDataset::from_file((dir / "empty.txt").string(), 8),
                       doctest::Contains("the text is empty"), ValueError);
  CHECK(nn::TextDataset::from_file((dir / "text.txt").string(), 8).val == d.val);
  CHECK_THROWS_WITH_AS(nn::read_text_file((dir / "missing.txt").string()), doctest::Contains("no such file"), IOError);
  CHECK_THROWS_WITH_AS(nn::read_text_file(dir.string()), doctest::Contains("not a regular file"), IOError);
  CHECK_THROWS_AS(nn::read_text_file((dir / "text.txt" / "below").string()), IOError);
  const fs::path fifo = dir / "fifo";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  CHECK_THROWS_WITH_AS(nn::read_text_file(fifo.string()), doctest::Contains("not a regular file"), IOError);
  fs::remove_all(dir);
}

TEST_CASE("random_batch: seeded windows, targets shifted by one") {
  std::vector<int64_t> tokens(50);
  for (int64_t i = 0; i < 50; ++i) tokens[i] = i;
  Generator g1(5), g2(5);
  auto [x, y] = nn::random_batch(tokens, 6, 10, g1);
  auto [x2, y2] = nn::random_batch(tokens, 6, 10, g2);
  CHECK(x.shape() == Shape({6, 10}));
  CHECK(equal(x, x2));
  CHECK(equal(y, y2));
  CHECK(equal(y, add(x, 1.0)));
  const std::vector<int64_t> xv = x.to_vector<int64_t>();
  for (int64_t b = 0; b < 6; ++b) {
    CHECK(xv[b * 10] >= 0);
    CHECK(xv[b * 10] < 40);                   // offsets in [0, n - T)
    CHECK(xv[b * 10 + 9] == xv[b * 10] + 9);  // consecutive tokens
  }
  auto [x3, y3] = nn::random_batch(tokens, 6, 10, g1);  // the generator moved on
  CHECK_FALSE(equal(x3, x));
}

TEST_CASE("split_loss: every next token once, in windows of the context") {
  nn::GPTConfig c;
  c.vocab_size = 7, c.block_size = 8, c.n_layer = 1, c.n_head = 2, c.n_embd = 8;
  Generator gen(2);
  nn::GPT m(c, &gen);
  std::vector<int64_t> tokens;
  for (int i = 0; i < 30; ++i) tokens.push_back((i * i + 3) % 7);
  // By hand: windows of 8 from 0 (3 full, then 5 left of the 29 predictions).
  double total = 0;
  {
    NoGradGuard ng;
    m.eval();
    for (int64_t s = 0; s < 29; s += 8) {
      const int64_t w = std::min<int64_t>(8, 29 - s);
      const std::vector<int64_t> x(tokens.begin() + s, tokens.begin() + s + w),
          y(tokens.begin() + s + 1, tokens.begin() + s + 1 + w);
      total += m.loss(from_vector(x, {1, w}), from_vector(y, {1, w})).item<double>() * static_cast<double>(w);
    }
  }
  m.train();
  CHECK(nn::split_loss(m, tokens, 8, 2) == doctest::Approx(total / 29).epsilon(1e-6));
  CHECK(m.is_training());  // left as it was
  // A head of zeros predicts uniformly: log(vocab) exactly.
  {
    NoGradGuard ng;
    m.wte->weight.zero_();
  }
  CHECK(nn::split_loss(m, tokens, 8) == doctest::Approx(std::log(7.0)).epsilon(1e-6));
}
