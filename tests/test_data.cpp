// The data pipeline (nn/data_*): IDX and CIFAR-10 readers on small files the
// tests write (plain, gzip, and every corrupt case), Welford statistics
// against a two-pass computation, the loader's shuffling, batching,
// drop_last, determinism and background thread, and augmentations with
// known outputs on small images.
#include <doctest/doctest.h>

#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <set>

#include <ember/ember.h>
#include <ember/nn/data_augment.h>
#include <ember/nn/data_loader.h>
#include <ember/nn/data_readers.h>

#include "test_util.h"

using namespace ember;
using namespace ember::nn::data;
using test::contains;
using test::error_of;
namespace fs = std::filesystem;

namespace {
fs::path scratch(const std::string& name) { return test::scratch_path("ember_data_tests", name); }
void write_bytes(const fs::path& p, const std::vector<uint8_t>& b) {
  std::ofstream f(p, std::ios::binary);
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}
std::vector<uint8_t> read_bytes(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}
// n images of h x w whose pixel k of image i is (7 i + k) mod 256, label i mod 10.
std::pair<std::string, std::string> write_mnist(const std::string& tag, int64_t n, int64_t h, int64_t w, bool gz) {
  std::vector<uint8_t> px(static_cast<size_t>(n * h * w)), lb(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    lb[static_cast<size_t>(i)] = static_cast<uint8_t>(i % 10);
    for (int64_t k = 0; k < h * w; ++k)
      px[static_cast<size_t>(i * h * w + k)] = static_cast<uint8_t>((7 * i + k) % 256);
  }
  const std::string ip = scratch(tag + "-images-idx3-ubyte" + (gz ? ".gz" : "")).string();
  const std::string lp = scratch(tag + "-labels-idx1-ubyte" + (gz ? ".gz" : "")).string();
  write_idx(ip, {n, h, w}, px, gz);
  write_idx(lp, {n}, lb, gz);
  return {ip, lp};
}
// A set of n 1 x h x w images, pixel k of image i = i (so a batch shows which samples it holds).
ImageSet indexed_set(int64_t n, int64_t h = 2, int64_t w = 2) {
  ImageSet s;
  s.n = n, s.channels = 1, s.height = h, s.width = w;
  for (int64_t i = 0; i < n; ++i) {
    s.labels.push_back(i % 10);
    for (int64_t k = 0; k < h * w; ++k) s.pixels.push_back(static_cast<uint8_t>(i));
  }
  s.class_names = class_names("mnist");
  return s;
}
}  // namespace

TEST_CASE("IDX reader: plain and gzip files round-trip") {
  for (bool gz : {false, true}) {
    auto [ip, lp] = write_mnist(gz ? "gz" : "plain", 12, 3, 4, gz);
    const ImageSet s = read_idx_images(ip, lp);
    CHECK(s.n == 12);
    CHECK(s.channels == 1);
    CHECK(s.height == 3);
    CHECK(s.width == 4);
    CHECK(s.pixels[5 * 12 + 3] == (7 * 5 + 3) % 256);
    CHECK(s.labels[11] == 1);
  }
}

TEST_CASE("IDX reader: corrupt files throw IOError naming the file and the fault") {
  auto [ip, lp] = write_mnist("ok", 6, 2, 2, false);
  const std::vector<uint8_t> good = read_bytes(ip);

  auto bad = [&](const std::string& name, std::vector<uint8_t> bytes) {
    const std::string p = scratch(name).string();
    write_bytes(p, bytes);
    return error_of<IOError>([&] { read_idx(p); });
  };
  std::vector<uint8_t> b = good;
  b[0] = 1;
  CHECK(contains(bad("magic", b), "not an IDX file"));
  CHECK(contains(bad("magic", b), "magic"));
  b = good, b[2] = 0x0D;  // float
  CHECK(contains(bad("type", b), "element type 0xd"));
  b = good, b[3] = 9;
  CHECK(contains(bad("ndims", b), "9 dims"));
  b = std::vector<uint8_t>(good.begin(), good.end() - 5);
  const std::string trunc = bad("truncated", b);
  CHECK(contains(trunc, "truncated"));
  CHECK(contains(trunc, scratch("truncated").string()));
  b = good, b.push_back(0);
  CHECK(contains(bad("extra", b), "holds more than"));
  // A header claiming 2^32 - 1 images of 2^32 - 1 x 2^32 - 1: rejected
  // before any allocation.
  b = {0, 0, 8, 3, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 1, 2, 3};
  CHECK(contains(bad("huge", b), "header claims more than"));
  b = {0, 0, 8, 1, 0, 0, 0, 0};
  CHECK(contains(bad("zero", b), "size 0"));
  CHECK(contains(bad("short", {0, 0}), "fewer than 4 header bytes"));
  CHECK(contains(error_of<IOError>([] { read_idx(scratch("does-not-exist").string()); }), "no such file"));

  // A gzip stream cut short, and one with a corrupted body.
  auto [gip, glp] = write_mnist("okgz", 40, 8, 8, true);
  std::vector<uint8_t> gz = read_bytes(gip);
  CHECK(contains(bad("gz-truncated", std::vector<uint8_t>(gz.begin(), gz.begin() + static_cast<long>(gz.size() / 2))),
                 "truncated"));
  std::vector<uint8_t> flipped = gz;
  for (size_t i = 20; i < flipped.size() - 8; i += 3) flipped[i] ^= 0x5A;
  const std::string corrupt = bad("gz-corrupt", flipped);
  CHECK((contains(corrupt, "corrupt") || contains(corrupt, "truncated") || contains(corrupt, "header says")));

  // Count mismatch and out-of-range labels.
  auto [ip2, lp2] = write_mnist("seven", 7, 2, 2, false);
  const std::string mismatch = error_of<IOError>([&, ip = ip, lp = lp2] { read_idx_images(ip, lp); });
  CHECK(contains(mismatch, "6 images"));
  CHECK(contains(mismatch, "7 labels"));
  CHECK(contains(error_of<IOError>([&, ip = ip, lp = lp] { read_idx_images(ip, lp, 3); }), "label 3 at index 3"));
  CHECK(contains(error_of<IOError>([&, ip = ip] { read_idx_images(ip, ip); }), "expected an (n) IDX label array"));
}

TEST_CASE("IDX reader: bytes in memory read as the file, gzip members and trailing bytes as gzip -d") {
  auto [ip, lp] = write_mnist("mem", 5, 3, 2, false);
  const std::vector<uint8_t> plain = read_bytes(ip);
  const IdxArray want = read_idx(ip);
  const IdxArray got = read_idx_from_memory(plain.data(), plain.size(), "mem.idx");
  CHECK(got.dims == want.dims);
  CHECK(got.data == want.data);
  // The header and the pixels as two gzip members, then bytes that start no
  // member (zlib's gzread and gzip -d ignore those): the same array.
  auto gzip = [](const std::string& name, const uint8_t* p, size_t n) {
    const std::string path = scratch(name).string();
    gzFile f = gzopen(path.c_str(), "wb");
    REQUIRE(f != nullptr);
    CHECK(gzwrite(f, p, static_cast<unsigned>(n)) == static_cast<int>(n));
    gzclose(f);
    return read_bytes(path);
  };
  std::vector<uint8_t> two = gzip("member1.gz", plain.data(), 16);
  const std::vector<uint8_t> second = gzip("member2.gz", plain.data() + 16, plain.size() - 16);
  two.insert(two.end(), second.begin(), second.end());
  for (int trailing : {0, 1, 3}) {
    std::vector<uint8_t> b = two;
    b.insert(b.end(), static_cast<size_t>(trailing), 0);
    const IdxArray g = read_idx_from_memory(b.data(), b.size(), "two.idx.gz");
    CHECK(g.dims == want.dims);
    CHECK(g.data == want.data);
  }
  // Errors name what the caller called the bytes.
  const std::vector<uint8_t> whole = gzip("whole.gz", plain.data(), plain.size());
  const std::vector<uint8_t> cut(whole.begin(), whole.end() - 9);
  CHECK(contains(error_of<IOError>([&] { read_idx_from_memory(cut.data(), cut.size(), "cut.gz"); }),
                 "cut.gz: truncated gzip data"));
  std::vector<uint8_t> crc = two;
  crc[two.size() - 8] ^= 1;  // the second member's CRC-32
  CHECK(contains(error_of<IOError>([&] { read_idx_from_memory(crc.data(), crc.size(), "crc.gz"); }),
                 "crc.gz: corrupt gzip data (zlib: incorrect data check)"));
}

TEST_CASE("load_dataset finds MNIST-style files by their usual names and says what is missing") {
  const fs::path dir = scratch("mnist_dir");
  fs::create_directories(dir);
  for (const char* split : {"train", "t10k"}) {
    std::vector<uint8_t> px(3 * 28 * 28, 9), lb = {1, 2, 3};
    write_idx((dir / (std::string(split) + "-images-idx3-ubyte.gz")).string(), {3, 28, 28}, px, true);
    write_idx((dir / (std::string(split) + "-labels-idx1-ubyte")).string(), {3}, lb, false);
  }
  const ImageSet s = load_dataset("fashion-mnist", dir.string(), false);
  CHECK(s.n == 3);
  CHECK(s.class_names[9] == "ankle boot");
  const std::string missing = error_of<IOError>([] { load_dataset("mnist", scratch("nowhere").string(), true); });
  CHECK(contains(missing, "train-images-idx3-ubyte.gz"));
  CHECK(contains(error_of<ValueError>([] { load_dataset("svhn", ".", true); }), "unknown data set"));
}

TEST_CASE("CIFAR-10 reader: batches round-trip, truncated files and bad labels throw") {
  ImageSet s;
  s.n = 3, s.channels = 3, s.height = 32, s.width = 32;
  for (int64_t i = 0; i < 3 * 3072; ++i) s.pixels.push_back(static_cast<uint8_t>(i * 13 % 251));
  s.labels = {4, 0, 9};
  const fs::path dir = scratch("cifar") / "cifar-10-batches-bin";
  fs::create_directories(dir);
  for (int b = 1; b <= 5; ++b) write_cifar10_batch((dir / ("data_batch_" + std::to_string(b) + ".bin")).string(), s);
  write_cifar10_batch((dir / "test_batch.bin").string(), s.head(2));
  const ImageSet train = load_dataset("cifar10", scratch("cifar").string(), true);
  CHECK(train.n == 15);
  CHECK(train.labels[14] == 9);
  CHECK(train.pixels[3072 * 4 + 100] == s.pixels[3072 + 100]);
  CHECK(train.class_names[3] == "cat");
  CHECK(load_dataset("cifar10", dir.string(), false).n == 2);

  std::vector<uint8_t> raw = read_bytes(dir / "test_batch.bin");
  write_bytes(scratch("cifar_trunc.bin"), std::vector<uint8_t>(raw.begin(), raw.end() - 1));
  CHECK(contains(error_of<IOError>([] { read_cifar10_batches({scratch("cifar_trunc.bin").string()}); }),
                 "not a whole number of CIFAR-10 records"));
  const ImageSet mem = read_cifar10_from_memory(raw.data(), raw.size(), "mem.bin");
  CHECK(mem.n == 2);
  CHECK(mem.labels == std::vector<int64_t>{4, 0});
  CHECK(mem.pixels == std::vector<uint8_t>(s.pixels.begin(), s.pixels.begin() + 2 * 3072));
  CHECK(mem.class_names[0] == "airplane");
  CHECK(contains(error_of<IOError>([&] { read_cifar10_from_memory(raw.data(), 3072, "short.bin"); }),
                 "short.bin: 3072 bytes is not a whole number"));
  raw[3073] = 57;
  write_bytes(scratch("cifar_label.bin"), raw);
  CHECK(contains(error_of<IOError>([] { read_cifar10_batches({scratch("cifar_label.bin").string()}); }),
                 "record 1 has label 57"));
}

TEST_CASE("Welford channel statistics equal the two-pass mean and std") {
  ImageSet s;
  s.n = 50, s.channels = 3, s.height = 5, s.width = 4;
  uint32_t state = 12345;
  for (int64_t i = 0; i < s.n * s.image_size(); ++i) {
    state = state * 1664525u + 1013904223u;
    s.pixels.push_back(static_cast<uint8_t>(state >> 24));
  }
  s.labels.assign(50, 0);
  const ChannelStats st = channel_stats(s);
  for (int64_t c = 0; c < 3; ++c) {
    double sum = 0, sq = 0, n = 0;
    for (int64_t i = 0; i < s.n; ++i)
      for (int64_t k = 0; k < 20; ++k) sum += s.pixels[static_cast<size_t>((i * 3 + c) * 20 + k)] / 255.0, ++n;
    const double mean = sum / n;
    for (int64_t i = 0; i < s.n; ++i)
      for (int64_t k = 0; k < 20; ++k) {
        const double d = s.pixels[static_cast<size_t>((i * 3 + c) * 20 + k)] / 255.0 - mean;
        sq += d * d;
      }
    CHECK(st.mean[static_cast<size_t>(c)] == doctest::Approx(mean).epsilon(1e-12));
    CHECK(st.std[static_cast<size_t>(c)] == doctest::Approx(std::sqrt(sq / n)).epsilon(1e-12));
  }
}

TEST_CASE("DataLoader: batching, drop_last, shuffling per epoch, determinism") {
  const ImageSet s = indexed_set(10);
  LoaderOptions o;
  o.batch_size = 4;
  o.shuffle = false;
  {
    DataLoader dl(s, o);
    CHECK(dl.num_batches() == 3);
    dl.start_epoch(0);
    Batch b;
    std::vector<int64_t> sizes, firsts;
    while (dl.next(b)) {
      sizes.push_back(b.images.size(0));
      firsts.push_back(b.labels.to_vector<int64_t>()[0]);
      CHECK(b.images.shape() == Shape({b.images.size(0), 1, 2, 2}));
    }
    CHECK(sizes == std::vector<int64_t>{4, 4, 2});
    CHECK(firsts == std::vector<int64_t>{0, 4, 8});
  }
  o.drop_last = true;
  CHECK(DataLoader(s, o).num_batches() == 2);

  o.shuffle = true;
  o.drop_last = false;
  o.seed = 7;
  DataLoader a(s, o), b(s, o);
  const std::vector<int64_t> e0 = a.order(0), e1 = a.order(1);
  CHECK(e0 == b.order(0));
  CHECK(e0 != e1);
  std::vector<int64_t> sorted = e0;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int64_t> ids(10);
  std::iota(ids.begin(), ids.end(), 0);
  CHECK(sorted == ids);  // a permutation: every sample once per epoch
  o.seed = 8;
  CHECK(DataLoader(s, o).order(0) != e0);

  // The background thread returns exactly what batch() builds, in order, and
  // a mid-epoch start resumes at that batch.
  a.start_epoch(1, 1);
  Batch got;
  int64_t expect = 1;
  while (a.next(got)) {
    CHECK(got.index == expect);
    CHECK(got.images.to_vector<float>() == b.batch(1, expect).images.to_vector<float>());
    ++expect;
  }
  CHECK(expect == 3);
  // Pixel values identify the samples: batch 0 of epoch 1 holds order(1)[0..3].
  const std::vector<float> px = b.batch(1, 0).images.to_vector<float>();
  for (int i = 0; i < 4; ++i)
    CHECK(px[static_cast<size_t>(4 * i)] == doctest::Approx(e1[static_cast<size_t>(i)] / 255.0));
}

TEST_CASE("DistributedSampler: PyTorch's shards, covering the set once per epoch plus the padding") {
  // PyTorch's answer for 10 samples on 4 replicas, no shuffle: the order
  // 0..9 padded with 0, 1, dealt out round-robin.
  const std::vector<std::vector<int64_t>> want = {{0, 4, 8}, {1, 5, 9}, {2, 6, 0}, {3, 7, 1}};
  for (int64_t r = 0; r < 4; ++r) CHECK(DistributedSampler(10, 4, r, false).indices(0) == want[static_cast<size_t>(r)]);
  // drop_last cuts to a multiple instead: 0..7.
  CHECK(DistributedSampler(10, 4, 1, false, 0, true).indices(0) == std::vector<int64_t>{1, 5});

  for (int64_t n : {1, 7, 10, 12}) {
    for (int64_t replicas : {1, 2, 3, 4, 5}) {
      for (bool drop_last : {false, true}) {
        if (drop_last && n < replicas) continue;
        CAPTURE(n);
        CAPTURE(replicas);
        CAPTURE(drop_last);
        const int64_t each = drop_last ? n / replicas : (n + replicas - 1) / replicas;
        for (int64_t epoch : {0, 1}) {
          std::vector<int> count(static_cast<size_t>(n), 0);
          for (int64_t r = 0; r < replicas; ++r) {
            const DistributedSampler sampler(n, replicas, r, true, 11, drop_last);
            const std::vector<int64_t> mine = sampler.indices(epoch);
            CHECK(static_cast<int64_t>(mine.size()) == each);
            CHECK(sampler.indices(epoch) == mine);  // a pure function of (seed, epoch)
            for (int64_t i : mine) ++count[static_cast<size_t>(i)];
          }
          int64_t seen = 0, repeats = 0;
          for (int c : count) {
            seen += c > 0;
            repeats += std::max(0, c - 1);
          }
          if (drop_last) {
            CHECK(seen == each * replicas);  // n mod replicas left out, none twice
            CHECK(repeats == 0);
          } else {
            CHECK(seen == n);                       // every sample at least once...
            CHECK(repeats == each * replicas - n);  // ...and only the padding twice
          }
        }
      }
    }
  }
  // One replica is the loader's unsharded order; epochs and seeds differ.
  const DistributedSampler one(10, 1, 0, true, 7);
  LoaderOptions o;
  o.seed = 7;
  const ImageSet s = indexed_set(10);
  CHECK(one.indices(2) == DataLoader(s, o).order(2));
  CHECK(one.indices(2) != one.indices(3));
  CHECK(one.indices(2) != DistributedSampler(10, 1, 0, true, 8).indices(2));
  CHECK(contains(error_of<ValueError>([] { DistributedSampler(10, 2, 2); }), "rank 2 of 2 replicas"));
}

TEST_CASE("DataLoader: sharded loaders split every epoch between the ranks") {
  const ImageSet s = indexed_set(10);
  LoaderOptions o;
  o.batch_size = 2;
  o.seed = 3;
  o.augment.hflip = true;
  o.num_replicas = 2;
  std::vector<int64_t> samples;
  std::vector<std::vector<float>> first_batches;
  for (int64_t r = 0; r < 2; ++r) {
    o.rank = r;
    DataLoader dl(s, o);
    CHECK(dl.num_batches() == 3);  // 5 samples each: 2, 2, 1
    CHECK(dl.order(1) == DistributedSampler(10, 2, r, true, 3).indices(1));
    dl.start_epoch(1);
    Batch b;
    while (dl.next(b)) {
      // Pixel values identify the samples (uint8 i / 255).
      const std::vector<float> px = b.images.to_vector<float>();
      for (int64_t i = 0; i < b.images.size(0); ++i)
        samples.push_back(std::lround(px[static_cast<size_t>(4 * i)] * 255));
      CHECK(b.images.to_vector<float>() == dl.batch(1, b.index).images.to_vector<float>());
    }
  }
  std::sort(samples.begin(), samples.end());
  std::vector<int64_t> ids(10);
  std::iota(ids.begin(), ids.end(), 0);
  CHECK(samples == ids);
}

TEST_CASE("DataLoader: normalisation and deterministic augmentation") {
  const ImageSet s = indexed_set(8, 4, 4);
  LoaderOptions o;
  o.batch_size = 8;
  o.shuffle = false;
  o.normalize = ChannelStats{{0.5}, {0.25}};
  const std::vector<float> px = DataLoader(s, o).batch(0, 0).images.to_vector<float>();
  CHECK(px[16 * 3] == doctest::Approx((3 / 255.0 - 0.5) / 0.25));

  o.augment.hflip = true;
  o.augment.crop_padding = 1;
  o.augment.erase_prob = 0.5;
  o.augment.mixup_alpha = 0.4;
  o.augment.cutmix_alpha = 1.0;
  o.seed = 3;
  DataLoader a(s, o), b(s, o);
  for (int64_t e = 0; e < 3; ++e) {
    const Batch x = a.batch(e, 0), y = b.batch(e, 0);
    CHECK(x.images.to_vector<float>() == y.images.to_vector<float>());
    CHECK(x.lam == y.lam);
    REQUIRE(x.labels_mix.defined());
    CHECK(x.lam >= 0.0);
    CHECK(x.lam <= 1.0);
    // Partners are the reversed batch.
    CHECK(x.labels_mix.to_vector<int64_t>()[0] == x.labels.to_vector<int64_t>()[7]);
  }
  CHECK(contains(error_of<ValueError>([&] {
                   LoaderOptions bad = o;
                   bad.augment.crop_padding = 4;
                   DataLoader dl(s, bad);
                 }),
                 "crop padding 4"));
}

TEST_CASE("augmentations: known outputs on small images") {
  // 1 x 3 x 3 image 1..9.
  const std::vector<float> img = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  std::vector<float> out(9);
  crop_with_padding(img.data(), out.data(), 1, 3, 3, 1, 0, 0);  // shift down-right by one
  CHECK(out == std::vector<float>{0, 0, 0, 0, 1, 2, 0, 4, 5});
  crop_with_padding(img.data(), out.data(), 1, 3, 3, 1, 2, 1);  // shift up by one
  CHECK(out == std::vector<float>{4, 5, 6, 7, 8, 9, 0, 0, 0});
  crop_with_padding(img.data(), out.data(), 1, 3, 3, 1, 1, 1);  // centre: identity
  CHECK(out == img);

  std::vector<float> f = img;
  hflip(f.data(), 1, 3, 3);
  CHECK(f == std::vector<float>{3, 2, 1, 6, 5, 4, 9, 8, 7});

  std::vector<float> e = img;
  erase(e.data(), 1, 3, 3, 1, 1, 2, 1, -1.0f);
  CHECK(e == std::vector<float>{1, 2, 3, 4, -1, 6, 7, -1, 9});

  // A batch of three 1x1x2 images: the middle one is its own partner.
  std::vector<float> batch = {0, 10, 1, 1, 4, 2};
  mixup(batch.data(), 3, 2, 0.75);
  CHECK(batch == std::vector<float>{1, 8, 1, 1, 3, 4});

  // Two 1 x 2 x 2 images; cutmix swaps the bottom-right pixel.
  std::vector<float> two = {1, 2, 3, 4, 5, 6, 7, 8};
  cutmix(two.data(), 2, 1, 2, 2, Box{1, 1, 1, 1});
  CHECK(two == std::vector<float>{1, 2, 3, 8, 5, 6, 7, 4});

  std::mt19937_64 rng(1);
  for (int i = 0; i < 50; ++i) {
    const Box b = sample_erase_box(rng, 28, 28);
    CHECK(b.top + b.h <= 28);
    CHECK(b.left + b.w <= 28);
    const Box c = sample_cutmix_box(rng, 28, 28, 0.7);
    CHECK(c.top + c.h <= 28);
    const double lam = sample_beta(rng, 0.5);
    CHECK(lam >= 0.0);
    CHECK(lam <= 1.0);
  }
}
