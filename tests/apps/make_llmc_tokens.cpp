// Writes the token files (llm.c's format: 256 int32 of header, magic
// 20240520, version 1, the token count, then uint16 tokens) that
// cmake/smoke_bench_gpt2.cmake runs bench's --gpt2-tokens on, good and bad,
// and a truncated copy of a checkpoint, so the test needs neither llm.c nor
// Python. Usage: make_llmc_tokens DIR CHECKPOINT. Writes into DIR:
//   one_batch.bin    2 x 8 + 1 tokens (one batch at --gpt2-batch 2 --gpt2-seq 8), ids below 96
//   three.bin        3 batches of 2 x 8, + 1
//   short.bin        10 tokens: fewer than one batch
//   truncated.bin    the header gives 17 tokens, the file holds 12
//   long.bin         the header gives 17 tokens, the file holds 20
//   magic.bin        a checkpoint's magic (20240326) instead of 20240520
//   header.bin       100 bytes: shorter than the header
//   big_token.bin    17 tokens, one of them 500 (past a 96-token vocabulary)
//   truncated_checkpoint.bin   CHECKPOINT's first half
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace {

void write(const std::string& path, int32_t magic, int32_t header_count, const std::vector<uint16_t>& tokens) {
  int32_t h[256] = {magic, 1, header_count};
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(h), sizeof h);
  f.write(reinterpret_cast<const char*>(tokens.data()), static_cast<std::streamsize>(2 * tokens.size()));
}

std::vector<uint16_t> tokens(int n) {
  std::vector<uint16_t> t;
  for (int i = 0; i < n; ++i) t.push_back(static_cast<uint16_t>((i * 37 + 11) % 96));
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: make_llmc_tokens DIR CHECKPOINT\n");
    return 2;
  }
  const std::string dir = argv[1];
  std::filesystem::create_directories(dir);
  write(dir + "/one_batch.bin", 20240520, 17, tokens(17));
  write(dir + "/three.bin", 20240520, 49, tokens(49));
  write(dir + "/short.bin", 20240520, 10, tokens(10));
  write(dir + "/truncated.bin", 20240520, 17, tokens(12));
  write(dir + "/long.bin", 20240520, 17, tokens(20));
  write(dir + "/magic.bin", 20240326, 17, tokens(17));
  std::vector<uint16_t> big = tokens(17);
  big[9] = 500;
  write(dir + "/big_token.bin", 20240520, 17, big);
  {
    std::ofstream f(dir + "/header.bin", std::ios::binary);
    f << std::string(100, '\0');
  }
  std::ifstream in(argv[2], std::ios::binary);
  const std::string bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  if (bytes.empty()) {
    std::fprintf(stderr, "make_llmc_tokens: cannot read %s\n", argv[2]);
    return 1;
  }
  std::ofstream(dir + "/truncated_checkpoint.bin", std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  return 0;
}
