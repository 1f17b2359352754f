// Image augmentations: the transforms and the samplers of their parameters
// (see data_augment.h). Plain loops over small images; they run on the data
// loader's worker, off the training path.
#include <ember/nn/data_augment.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace ember::nn::data {

void crop_with_padding(const float* src, float* dst, int64_t C, int64_t H, int64_t W, int64_t pad, int64_t top,
                       int64_t left) {
  for (int64_t c = 0; c < C; ++c)
    for (int64_t y = 0; y < H; ++y) {
      const int64_t sy = y + top - pad;
      float* out = dst + (c * H + y) * W;
      if (sy < 0 || sy >= H) {
        std::fill(out, out + W, 0.0f);
        continue;
      }
      const float* row = src + (c * H + sy) * W;
      for (int64_t x = 0; x < W; ++x) {
        const int64_t sx = x + left - pad;
        out[x] = sx < 0 || sx >= W ? 0.0f : row[sx];
      }
    }
}

void hflip(float* img, int64_t C, int64_t H, int64_t W) {
  for (int64_t r = 0; r < C * H; ++r) std::reverse(img + r * W, img + (r + 1) * W);
}

void erase(float* img, int64_t C, int64_t H, int64_t W, int64_t top, int64_t left, int64_t h, int64_t w, float value) {
  for (int64_t c = 0; c < C; ++c)
    for (int64_t y = top; y < std::min(H, top + h); ++y)
      std::fill(img + (c * H + y) * W + left, img + (c * H + y) * W + std::min(W, left + w), value);
}

void mixup(float* batch, int64_t N, int64_t image_size, double lam) {
  // Pairs (i, N-1-i) mix with each other: compute both from the originals.
  const float a = static_cast<float>(lam), b = static_cast<float>(1.0 - lam);
  for (int64_t i = 0; i < N / 2; ++i) {
    float* x = batch + i * image_size;
    float* y = batch + (N - 1 - i) * image_size;
    for (int64_t k = 0; k < image_size; ++k) {
      const float xi = x[k], yi = y[k];
      x[k] = a * xi + b * yi;
      y[k] = a * yi + b * xi;
    }
  }
  // The middle image of an odd batch is its own partner: unchanged.
}

void cutmix(float* batch, int64_t N, int64_t C, int64_t H, int64_t W, const Box& box) {
  // Swapping the boxes of i and N-1-i gives both their partner's patch.
  const int64_t size = C * H * W;
  for (int64_t i = 0; i < N / 2; ++i) {
    float* x = batch + i * size;
    float* y = batch + (N - 1 - i) * size;
    for (int64_t c = 0; c < C; ++c)
      for (int64_t r = box.top; r < box.top + box.h; ++r)
        std::swap_ranges(x + (c * H + r) * W + box.left, x + (c * H + r) * W + box.left + box.w,
                         y + (c * H + r) * W + box.left);
  }
}

Box sample_erase_box(std::mt19937_64& rng, int64_t H, int64_t W) {
  std::uniform_real_distribution<double> area_frac(0.02, 0.33), log_ratio(std::log(0.3), std::log(3.3));
  const double area = static_cast<double>(H * W);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target = area * area_frac(rng), ratio = std::exp(log_ratio(rng));
    const auto h = static_cast<int64_t>(std::lround(std::sqrt(target * ratio)));
    const auto w = static_cast<int64_t>(std::lround(std::sqrt(target / ratio)));
    if (h < 1 || w < 1 || h >= H || w >= W) continue;
    const int64_t top = std::uniform_int_distribution<int64_t>(0, H - h)(rng);
    const int64_t left = std::uniform_int_distribution<int64_t>(0, W - w)(rng);
    return {top, left, h, w};
  }
  return {};
}

double sample_beta(std::mt19937_64& rng, double alpha) {
  std::gamma_distribution<double> g(alpha, 1.0);
  const double x = g(rng), y = g(rng);
  return x + y > 0 ? x / (x + y) : 0.5;
}

Box sample_cutmix_box(std::mt19937_64& rng, int64_t H, int64_t W, double lam) {
  // A box of side sqrt(1 - lam) times the image's, centred at a uniform pixel.
  const double cut = std::sqrt(1.0 - lam);
  const auto ch = static_cast<int64_t>(H * cut), cw = static_cast<int64_t>(W * cut);
  const int64_t cy = std::uniform_int_distribution<int64_t>(0, H - 1)(rng);
  const int64_t cx = std::uniform_int_distribution<int64_t>(0, W - 1)(rng);
  const int64_t y0 = std::clamp<int64_t>(cy - ch / 2, 0, H), y1 = std::clamp<int64_t>(cy + ch / 2, 0, H);
  const int64_t x0 = std::clamp<int64_t>(cx - cw / 2, 0, W), x1 = std::clamp<int64_t>(cx + cw / 2, 0, W);
  return {y0, x0, y1 - y0, x1 - x0};
}

}  // namespace ember::nn::data
