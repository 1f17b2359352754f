// RandAugment's operations and sampler (nn/data_augment_randaug.h), following
// torchvision.transforms.RandAugment and torchvision.transforms.functional on
// float tensors (bound 1): the same magnitude tables, the same inverse affine
// maps with nearest sampling, the same blends. Posterize and Equalize work on
// the 8-bit values round(255 x), as torchvision does on uint8 images.
#include <ember/nn/data_augment_randaug.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <numbers>
#include <vector>

#include <ember/core/error.h>

namespace ember::nn::data {

namespace {

float clamp01(double v) { return static_cast<float>(std::min(1.0, std::max(0.0, v))); }

// torch.linspace(lo, hi, n)[m].
double linspace_at(double lo, double hi, int64_t n, int64_t m) {
  return n <= 1 ? lo : lo + (hi - lo) * static_cast<double>(m) / static_cast<double>(n - 1);
}

// out(x, y) = in(a x' + b y' + c, d x' + e y' + f) per channel, nearest pixel,
// 0 outside; (x', y') are the output pixel's coordinates relative to the
// centre ((W - 1) / 2, (H - 1) / 2), and the result is relative to it too.
void affine_nearest(float* img, int64_t C, int64_t H, int64_t W, const std::array<double, 6>& m) {
  std::vector<float> src(img, img + C * H * W);
  const double cx = (W - 1) / 2.0, cy = (H - 1) / 2.0;
  for (int64_t y = 0; y < H; ++y)
    for (int64_t x = 0; x < W; ++x) {
      const double xo = x - cx, yo = y - cy;
      const double xi = std::nearbyint(m[0] * xo + m[1] * yo + m[2] + cx);
      const double yi = std::nearbyint(m[3] * xo + m[4] * yo + m[5] + cy);
      const bool inside = xi >= 0 && xi < W && yi >= 0 && yi < H;
      for (int64_t c = 0; c < C; ++c)
        img[(c * H + y) * W + x] =
            inside ? src[(c * H + static_cast<int64_t>(yi)) * W + static_cast<int64_t>(xi)] : 0.0f;
    }
}

// img = clamp(f img + (1 - f) other), torchvision's _blend.
void blend(float* img, const float* other, int64_t n, double f) {
  for (int64_t i = 0; i < n; ++i) img[i] = clamp01(f * img[i] + (1 - f) * other[i]);
}

uint8_t to_u8(float v) { return static_cast<uint8_t>(std::nearbyint(std::min(1.0f, std::max(0.0f, v)) * 255.0f)); }

// torchvision's _equalize_single_image on one channel's 8-bit values.
void equalize_channel(float* p, int64_t n) {
  std::array<int64_t, 256> hist{};
  for (int64_t i = 0; i < n; ++i) ++hist[to_u8(p[i])];
  // step = (sum of the non-zero bins but the last non-zero one) // 255
  int64_t last = 255;
  while (last > 0 && hist[last] == 0) --last;
  int64_t total = 0;
  for (int64_t b = 0; b < last; ++b) total += hist[b];
  const int64_t step = total / 255;
  if (step == 0) return;
  // lut[b] = (cumsum(hist)[b - 1] + step // 2) // step, lut[0] = 0, clamped to 255.
  std::array<int64_t, 256> lut{};
  int64_t cum = 0;
  for (int64_t b = 0; b < 256; ++b) {
    lut[b] = std::min<int64_t>(255, (cum + step / 2) / step);
    cum += hist[b];
  }
  lut[0] = 0;
  for (int64_t i = 0; i < n; ++i) p[i] = static_cast<float>(lut[to_u8(p[i])]) / 255.0f;
}

}  // namespace

const char* aug_op_name(AugOp op) {
  static const char* names[kNumAugOps] = {"Identity",  "AutoContrast", "Equalize",   "Rotate",    "Solarize",
                                          "Posterize", "Contrast",     "Brightness", "Sharpness", "ShearX",
                                          "ShearY",    "TranslateX",   "TranslateY"};
  return names[static_cast<int>(op)];
}

bool aug_op_signed(AugOp op) {
  switch (op) {
    case AugOp::Rotate:
    case AugOp::Contrast:
    case AugOp::Brightness:
    case AugOp::Sharpness:
    case AugOp::ShearX:
    case AugOp::ShearY:
    case AugOp::TranslateX:
    case AugOp::TranslateY:
      return true;
    default:
      return false;
  }
}

double aug_op_magnitude(AugOp op, int64_t m, int64_t n, int64_t H, int64_t W) {
  switch (op) {
    case AugOp::ShearX:
    case AugOp::ShearY:
      return linspace_at(0.0, 0.3, n, m);
    case AugOp::TranslateX:
      return linspace_at(0.0, 150.0 / 331.0 * static_cast<double>(W), n, m);
    case AugOp::TranslateY:
      return linspace_at(0.0, 150.0 / 331.0 * static_cast<double>(H), n, m);
    case AugOp::Rotate:
      return linspace_at(0.0, 30.0, n, m);
    case AugOp::Brightness:
    case AugOp::Contrast:
    case AugOp::Sharpness:
      return linspace_at(0.0, 0.9, n, m);
    // 8 - round(m / ((n - 1) / 4)), torch.round's half to even
    case AugOp::Posterize:
      return n <= 1 ? 8.0 : 8.0 - std::nearbyint(static_cast<double>(m) / ((n - 1) / 4.0));
    case AugOp::Solarize:
      return linspace_at(1.0, 0.0, n, m);  // torchvision's 255 -> 0, on [0, 1]
    default:
      return 0.0;
  }
}

void apply_aug_op(float* img, int64_t C, int64_t H, int64_t W, AugOp op, double mag) {
  const int64_t plane = H * W, n = C * plane;
  switch (op) {
    case AugOp::Identity:
      return;
    case AugOp::Rotate: {
      // torchvision's inverse map for rotate(angle): in = R(angle) out in
      // y-down coordinates, i.e. a counter-clockwise turn on screen.
      const double a = mag * std::numbers::pi / 180.0, c = std::cos(a), s = std::sin(a);
      affine_nearest(img, C, H, W, {c, -s, 0, s, c, 0});
      return;
    }
    case AugOp::ShearX:  // about the top-left corner: in_x = x + s (y + 0.5)
      affine_nearest(img, C, H, W, {1, mag, mag * ((H - 1) / 2.0 + 0.5), 0, 1, 0});
      return;
    case AugOp::ShearY:
      affine_nearest(img, C, H, W, {1, 0, 0, mag, 1, mag * ((W - 1) / 2.0 + 0.5)});
      return;
    case AugOp::TranslateX:
      affine_nearest(img, C, H, W, {1, 0, -std::trunc(mag), 0, 1, 0});
      return;
    case AugOp::TranslateY:
      affine_nearest(img, C, H, W, {1, 0, 0, 0, 1, -std::trunc(mag)});
      return;
    case AugOp::Brightness: {
      for (int64_t i = 0; i < n; ++i) img[i] = clamp01((1 + mag) * img[i]);
      return;
    }
    case AugOp::Contrast: {
      // Blend with the mean of the grayscale image (the mean over all channels
      // for C != 3 would not be torchvision's; RGB uses its luma weights).
      double mean = 0;
      if (C == 3) {
        for (int64_t i = 0; i < plane; ++i)
          mean += 0.2989 * img[i] + 0.587 * img[plane + i] + 0.114 * img[2 * plane + i];
      } else {
        for (int64_t i = 0; i < plane; ++i) mean += img[i];
      }
      mean /= static_cast<double>(plane);
      const double f = 1 + mag;
      for (int64_t i = 0; i < n; ++i) img[i] = clamp01(f * img[i] + (1 - f) * mean);
      return;
    }
    case AugOp::Sharpness: {
      if (H < 3 || W < 3) return;  // no interior: torchvision's result is the image itself
      std::vector<float> smooth(img, img + n);
      for (int64_t c = 0; c < C; ++c)
        for (int64_t y = 1; y < H - 1; ++y)
          for (int64_t x = 1; x < W - 1; ++x) {
            const float* p = img + c * plane;
            double s = 4 * p[y * W + x];  // weight 5 at the centre, 1 elsewhere
            for (int64_t dy = -1; dy <= 1; ++dy)
              for (int64_t dx = -1; dx <= 1; ++dx) s += p[(y + dy) * W + x + dx];
            smooth[c * plane + y * W + x] = static_cast<float>(s / 13.0);
          }
      blend(img, smooth.data(), n, 1 + mag);
      return;
    }
    case AugOp::Solarize:
      for (int64_t i = 0; i < n; ++i)
        if (img[i] >= mag) img[i] = 1.0f - img[i];
      return;
    case AugOp::Posterize: {
      const int bits = static_cast<int>(mag);
      const uint8_t mask = static_cast<uint8_t>(~((1u << (8 - bits)) - 1u));
      for (int64_t i = 0; i < n; ++i) img[i] = static_cast<float>(to_u8(img[i]) & mask) / 255.0f;
      return;
    }
    case AugOp::AutoContrast:
      for (int64_t c = 0; c < C; ++c) {
        float* p = img + c * plane;
        const auto [lo, hi] = std::minmax_element(p, p + plane);
        const float mn = *lo, mx = *hi;
        if (mx <= mn) continue;  // a flat channel stays as it is
        const double scale = 1.0 / (mx - mn);
        for (int64_t i = 0; i < plane; ++i) p[i] = clamp01((p[i] - mn) * scale);
      }
      return;
    case AugOp::Equalize:
      for (int64_t c = 0; c < C; ++c) equalize_channel(img + c * plane, plane);
      return;
  }
}

RandAugment::RandAugment(int64_t n, int64_t m, int64_t bins) : num_ops(n), magnitude(m), num_magnitude_bins(bins) {
  EMBER_CHECK(num_ops >= 0, ValueError, "RandAugment: the number of operations N must be non-negative, got ", num_ops);
  EMBER_CHECK(num_magnitude_bins >= 1, ValueError, "RandAugment: num_magnitude_bins must be positive, got ",
              num_magnitude_bins);
  EMBER_CHECK(magnitude >= 0 && magnitude < num_magnitude_bins, ValueError, "RandAugment: magnitude M must be in [0, ",
              num_magnitude_bins, "), got ", magnitude);
}

void RandAugment::operator()(float* img, int64_t C, int64_t H, int64_t W, std::mt19937_64& rng) const {
  std::uniform_int_distribution<int> pick(0, kNumAugOps - 1), coin(0, 1);
  for (int64_t k = 0; k < num_ops; ++k) {
    const AugOp op = static_cast<AugOp>(pick(rng));
    double mag = aug_op_magnitude(op, magnitude, num_magnitude_bins, H, W);
    if (aug_op_signed(op) && coin(rng)) mag = -mag;
    apply_aug_op(img, C, H, W, op, mag);
  }
}

}  // namespace ember::nn::data
