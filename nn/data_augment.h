/// \file
/// Image augmentations for ImageDataset (image_dataset.h), on float images laid out
/// [C, H, W] (one image) or [N, C, H, W] (a batch), in two layers:
///  - deterministic transforms that take their parameters (crop offset, box,
///    mixing weight) as arguments, so tests check them on known small images;
///  - samplers that draw those parameters from a std::mt19937_64 the dataset
///    seeds per (seed, epoch, batch), so a batch is a pure function of where
///    it is in training (exact resume, any thread timing).
/// The recipes follow torchvision/timm: RandomCrop(padding) and
/// RandomHorizontalFlip before normalisation, RandomErasing after it, and
/// mixup/cutmix over the batch with the batch reversed as partner (timm's
/// choice), one Beta(alpha, alpha) weight per batch.
#pragma once

#include <cstdint>
#include <random>

namespace ember::nn::data {

/// dst[c, y, x] = src[c, y + top - pad, x + left - pad], 0 outside src: the
/// crop at (top, left) of src zero-padded by pad on every side. top and left
/// lie in [0, 2 pad]; dst has src's size.
void crop_with_padding(const float* src, float* dst, int64_t C, int64_t H, int64_t W, int64_t pad, int64_t top,
                       int64_t left);
/// Mirrors each row in place: x -> W - 1 - x.
void hflip(float* img, int64_t C, int64_t H, int64_t W);
/// Sets the box rows [top, top + h), columns [left, left + w) of every channel to value.
void erase(float* img, int64_t C, int64_t H, int64_t W, int64_t top, int64_t left, int64_t h, int64_t w, float value);

/// A rectangle of an image: rows [top, top + h), columns [left, left + w).
struct Box {
  ///@{
  int64_t top = 0, left = 0, h = 0, w = 0;  ///< position and size in pixels
  ///@}
};
/// Mixup: x[i] = lam x[i] + (1 - lam) x[N-1-i], in place (partner: the reversed batch).
void mixup(float* batch, int64_t N, int64_t image_size, double lam);
/// CutMix: the box of x[i] is replaced by the box of x[N-1-i], in place.
void cutmix(float* batch, int64_t N, int64_t C, int64_t H, int64_t W, const Box& box);

// ---- samplers ----------------------------------------------------------------
/// Random erasing (Zhong et al.; torchvision's defaults): area a fraction
/// U[0.02, 0.33] of the image, log-uniform aspect ratio in [0.3, 3.3], up to
/// 10 tries to fit; a zero-size box when none fits.
Box sample_erase_box(std::mt19937_64& rng, int64_t H, int64_t W);
/// Beta(alpha, alpha) as X / (X + Y) with X, Y ~ Gamma(alpha, 1).
double sample_beta(std::mt19937_64& rng, double alpha);
/// CutMix's box for weight lam: area (1 - lam) H W, centred uniformly, clipped
/// to the image. The caller recomputes lam from the clipped area.
Box sample_cutmix_box(std::mt19937_64& rng, int64_t H, int64_t W, double lam);

}  // namespace ember::nn::data
