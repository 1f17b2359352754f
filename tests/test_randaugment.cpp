// RandAugment (nn/data_augment_randaug.h): torchvision's magnitude tables,
// each operation on small known images (hand-computed answers), shape and
// [0, 1] range kept by every operation at every sign and magnitude, and the
// sampler's determinism for a seed.
#include <doctest/doctest.h>

#include <random>
#include <vector>

#include <ember/nn/data_augment_randaug.h>
#include <ember/nn/data_loader.h>
#include <ember/nn/data_readers.h>

#include "test_util.h"

using namespace ember;
using namespace ember::nn::data;

namespace {

// A 28x28 test image: a bright square on a dark gradient, values in [0, 1].
std::vector<float> digit_like() {
  std::vector<float> img(28 * 28);
  for (int y = 0; y < 28; ++y)
    for (int x = 0; x < 28; ++x) img[y * 28 + x] = (x >= 8 && x < 20 && y >= 6 && y < 22) ? 0.9f : 0.01f * (x + y) / 2;
  return img;
}

void check_vec(const std::vector<float>& got, const std::vector<float>& want, float tol = 1e-6f) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i)
    CHECK_MESSAGE(std::fabs(got[i] - want[i]) <= tol, "element ", i, ": ", got[i], " vs ", want[i]);
}

}  // namespace

TEST_CASE("RandAugment: torchvision's magnitude tables at M = 9 of 31 bins, 28x28") {
  CHECK(aug_op_magnitude(AugOp::Rotate, 9, 31, 28, 28) == doctest::Approx(9.0));
  CHECK(aug_op_magnitude(AugOp::ShearX, 9, 31, 28, 28) == doctest::Approx(0.09));
  CHECK(aug_op_magnitude(AugOp::TranslateX, 9, 31, 28, 28) == doctest::Approx(150.0 / 331.0 * 28 * 0.3));
  CHECK(aug_op_magnitude(AugOp::TranslateY, 30, 31, 20, 28) == doctest::Approx(150.0 / 331.0 * 20));
  CHECK(aug_op_magnitude(AugOp::Brightness, 9, 31, 28, 28) == doctest::Approx(0.27));
  CHECK(aug_op_magnitude(AugOp::Posterize, 9, 31, 28, 28) == 7);  // 8 - round(9 / 7.5)
  CHECK(aug_op_magnitude(AugOp::Posterize, 30, 31, 28, 28) == 4);
  CHECK(aug_op_magnitude(AugOp::Solarize, 9, 31, 28, 28) == doctest::Approx(0.7));  // 255 -> 0 over the bins, / 255
  CHECK(aug_op_magnitude(AugOp::Equalize, 9, 31, 28, 28) == 0);
  CHECK(aug_op_signed(AugOp::ShearY));
  CHECK_FALSE(aug_op_signed(AugOp::Solarize));
  CHECK(std::string(aug_op_name(AugOp::TranslateY)) == "TranslateY");
}

TEST_CASE("RandAugment operations on known images") {
  const std::vector<float> sq = {0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f, 0.7f, 0.8f, 0.9f};  // 3x3, row-major
  auto run = [&](AugOp op, double m, std::vector<float> img = {}) {
    if (img.empty()) img = sq;
    apply_aug_op(img.data(), 1, 3, 3, op, m);
    return img;
  };
  check_vec(run(AugOp::Identity, 0), sq);
  // Counter-clockwise quarter turn: the top row becomes the left column, read upwards.
  check_vec(run(AugOp::Rotate, 90), {0.3f, 0.6f, 0.9f, 0.2f, 0.5f, 0.8f, 0.1f, 0.4f, 0.7f});
  check_vec(run(AugOp::Rotate, -90), {0.7f, 0.4f, 0.1f, 0.8f, 0.5f, 0.2f, 0.9f, 0.6f, 0.3f});
  // Translate right by int(1.7) = 1 pixel, fill 0; down by -1 (up one).
  check_vec(run(AugOp::TranslateX, 1.7), {0, 0.1f, 0.2f, 0, 0.4f, 0.5f, 0, 0.7f, 0.8f});
  check_vec(run(AugOp::TranslateY, -1), {0.4f, 0.5f, 0.6f, 0.7f, 0.8f, 0.9f, 0, 0, 0});
  // ShearX 0.5: row y reads x + round(0.5 (y + 0.5)): shifts 0, 1, 1 (0.25, 0.75, 1.25 rounded).
  check_vec(run(AugOp::ShearX, 0.5), {0.1f, 0.2f, 0.3f, 0.5f, 0.6f, 0, 0.8f, 0.9f, 0});
  check_vec(run(AugOp::ShearY, 0.5), {0.1f, 0.5f, 0.6f, 0.4f, 0.8f, 0.9f, 0.7f, 0, 0});
  // Brightness: factor 1 + m, clamped.
  check_vec(run(AugOp::Brightness, 0.5), {0.15f, 0.3f, 0.45f, 0.6f, 0.75f, 0.9f, 1, 1, 1});
  check_vec(run(AugOp::Brightness, -0.5), {0.05f, 0.1f, 0.15f, 0.2f, 0.25f, 0.3f, 0.35f, 0.4f, 0.45f});
  // Contrast: blend with the mean 0.5 at factor 1 + m.
  check_vec(run(AugOp::Contrast, 0.5), {0, 0.05f, 0.2f, 0.35f, 0.5f, 0.65f, 0.8f, 0.95f, 1});
  // Sharpness: only the centre has a 3x3 neighbourhood: smooth = (4 * 0.5 + 4.5) / 13 = 0.5.
  check_vec(run(AugOp::Sharpness, 0.8), sq);
  std::vector<float> spike(9, 0.2f);
  spike[4] = 0.8f;  // smooth centre = (4 * 0.8 + 0.8 + 8 * 0.2) / 13 = 5.6 / 13
  std::vector<float> want = spike;
  want[4] = static_cast<float>(1.5 * 0.8 - 0.5 * 5.6 / 13);
  check_vec(run(AugOp::Sharpness, 0.5, spike), want);
  // Solarize at 0.55: values >= 0.55 become 1 - x.
  check_vec(run(AugOp::Solarize, 0.55), {0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.4f, 0.3f, 0.2f, 0.1f});
  // Posterize to 4 bits: round(255 x) & 0xF0.
  check_vec(run(AugOp::Posterize, 4, {0.1f, 0.5f, 1.0f, 0, 0, 0, 0, 0, 0}),
            {16 / 255.f, 128 / 255.f, 240 / 255.f, 0, 0, 0, 0, 0, 0});  // 25.5 -> 26, 127.5 -> 128 (half to even)
  // AutoContrast stretches [0.1, 0.9] to [0, 1]; a flat image stays.
  check_vec(run(AugOp::AutoContrast, 0), {0, 0.125f, 0.25f, 0.375f, 0.5f, 0.625f, 0.75f, 0.875f, 1});
  check_vec(run(AugOp::AutoContrast, 0, std::vector<float>(9, 0.3f)), std::vector<float>(9, 0.3f));
  // Equalize on 784 pixels of 8-bit values 0, 40, 80, 120 (196 each): step = 588 // 255 = 2,
  // lut = (cumsum before + 1) // 2 -> 0, 98, 196, 294 clamped to 255.
  std::vector<float> eq(784), eq_want(784);
  const float levels[4] = {0, 40, 80, 120}, mapped[4] = {0, 98, 196, 255};
  for (int i = 0; i < 784; ++i) {
    eq[i] = levels[i % 4] / 255.f;
    eq_want[i] = mapped[i % 4] / 255.f;
  }
  apply_aug_op(eq.data(), 1, 28, 28, AugOp::Equalize, 0);
  check_vec(eq, eq_want);
  // Fewer than 256 pixels: step 0, unchanged (torchvision).
  check_vec(run(AugOp::Equalize, 0), sq);
}

TEST_CASE("RandAugment: every operation keeps shape and range, the sampler is deterministic per seed") {
  for (int o = 0; o < kNumAugOps; ++o)
    for (int64_t m : {0, 9, 15, 30})
      for (double sign : {1.0, -1.0}) {
        const AugOp op = static_cast<AugOp>(o);
        std::vector<float> img = digit_like();
        apply_aug_op(img.data(), 1, 28, 28, op, sign * aug_op_magnitude(op, m, 31, 28, 28));
        REQUIRE(img.size() == 784u);
        for (float v : img) CHECK_MESSAGE((v >= 0 && v <= 1), aug_op_name(op), " at bin ", m, ": ", v);
      }
  const RandAugment ra(2, 9);
  std::vector<float> a = digit_like(), b = digit_like(), c = digit_like();
  std::mt19937_64 r1(123), r2(123), r3(124);
  int differ_from_input = 0;
  for (int i = 0; i < 20; ++i) {  // 20 images drawn in turn from each stream
    a = digit_like();
    b = digit_like();
    ra(a.data(), 1, 28, 28, r1);
    ra(b.data(), 1, 28, 28, r2);
    check_vec(a, b, 0);
    differ_from_input += a != digit_like();
  }
  CHECK(differ_from_input >= 15);  // 2 ops of 13, Identity both times at most rarely
  ra(c.data(), 1, 28, 28, r3);
  std::mt19937_64 r4(124);
  std::vector<float> d = digit_like();
  ra(d.data(), 1, 28, 28, r4);
  check_vec(c, d, 0);
  // N = 0 is the identity.
  std::vector<float> e = digit_like();
  RandAugment(0, 9)(e.data(), 1, 28, 28, r1);
  check_vec(e, digit_like(), 0);
  CHECK_THROWS_AS(RandAugment(2, 31), ValueError);
  CHECK_THROWS_AS(RandAugment(-1, 9), ValueError);
  CHECK_THROWS_AS(RandAugment(2, 0, 0), ValueError);
}

TEST_CASE("DataLoader with RandAugment: deterministic per (seed, epoch, batch), [0, 1] kept, N and M checked") {
  ImageSet set;
  set.n = 6, set.channels = 1, set.height = 28, set.width = 28;
  set.class_names = {"a", "b"};
  const std::vector<float> img = digit_like();
  for (int64_t i = 0; i < set.n; ++i) {
    for (float v : img) set.pixels.push_back(static_cast<uint8_t>(v * 255.0f + static_cast<float>(i)));
    set.labels.push_back(i % 2);
  }
  LoaderOptions lo;
  lo.batch_size = 3;
  lo.background = false;
  lo.seed = 5;
  const DataLoader plain(set, lo);
  lo.augment.randaugment_ops = 2;
  lo.augment.randaugment_magnitude = 9;
  CHECK(lo.augment.any());
  const DataLoader aug(set, lo), again(set, lo);
  const std::vector<float> a = aug.batch(0, 1).images.to_vector<float>();
  CHECK(a == again.batch(0, 1).images.to_vector<float>());        // a pure function of the seed
  CHECK_FALSE(a == plain.batch(0, 1).images.to_vector<float>());  // it changed something
  CHECK_FALSE(a == aug.batch(1, 1).images.to_vector<float>());    // another epoch, other draws
  for (float v : a) CHECK((v >= 0.0f && v <= 1.0f));              // no normalisation: [0, 1]
  lo.augment.randaugment_magnitude = 31;
  CHECK_THROWS_AS(DataLoader(set, lo), ValueError);
  lo.augment.randaugment_magnitude = 9;
  lo.augment.randaugment_ops = -1;
  CHECK_THROWS_AS(DataLoader(set, lo), ValueError);
}
