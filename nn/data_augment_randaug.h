/// \file
/// RandAugment (Cubuk et al.) for grayscale or any-channel float images
/// [C, H, W] with values in [0, 1], with torchvision's semantics
/// (transforms.RandAugment): num_ops operations drawn uniformly with
/// replacement from the operation set, each at the magnitude of bin
/// `magnitude` of num_magnitude_bins, signed operations negated with
/// probability 1/2, geometric ones with nearest-pixel sampling and fill 0.
/// The set is torchvision's without Color (a no-op on one channel): Identity,
/// AutoContrast, Equalize, Rotate, Solarize, Posterize, Contrast, Brightness,
/// Sharpness, ShearX, ShearY, TranslateX, TranslateY.
/// Like data_augment.h: deterministic operations taking their magnitude as an
/// argument (tested on small known images), and a sampler drawing from a
/// std::mt19937_64 the dataset seeds, so an augmented batch is a pure function
/// of the seed. Every operation keeps the shape and the [0, 1] range.
#pragma once

#include <cstdint>
#include <random>

namespace ember::nn::data {

/// RandAugment's operations (torchvision's names).
enum class AugOp {
  Identity,
  AutoContrast,
  Equalize,
  Rotate,
  Solarize,
  Posterize,
  Contrast,
  Brightness,
  Sharpness,
  ShearX,
  ShearY,
  TranslateX,
  TranslateY
};
/// The number of operations in the set.
inline constexpr int kNumAugOps = 13;
/// torchvision's name of op ("ShearX", ...).
const char* aug_op_name(AugOp op);
/// Whether RandAugment negates op's magnitude with probability 1/2.
bool aug_op_signed(AugOp op);
/// torchvision's magnitude of op at bin m of num_bins (before the sign) for an
/// H x W image: degrees (Rotate, in [0, 30]), shear factor ([0, 0.3]), pixels
/// (Translate, [0, 150/331 of the side]), enhancement ([0, 0.9]; the factor is
/// 1 + magnitude), bits kept (Posterize, 8 down to 4), threshold in [0, 1]
/// (Solarize, 1 down to 0), 0 for the rest.
double aug_op_magnitude(AugOp op, int64_t m, int64_t num_bins, int64_t H, int64_t W);

/// Applies op with this magnitude to img [C, H, W] in place (values in [0, 1]):
///  - Rotate: counter-clockwise by magnitude degrees about the image centre;
///  - ShearX: out(x, y) = in(x + s (y + 0.5), y), s the magnitude (ShearY likewise),
///    torchvision's shear about the top-left corner;
///  - TranslateX/Y: out(x, y) = in(x - int(magnitude), y) (or along y);
///    geometric ops sample the nearest pixel, 0 outside;
///  - Brightness, Contrast, Sharpness: blend with black, the image mean, the
///    3x3 [1 1 1; 1 5 1; 1 1 1]/13 smoothing (border kept) at factor
///    1 + magnitude, clamped to [0, 1];
///  - Solarize: x >= magnitude -> 1 - x; Posterize: keep `magnitude` bits of
///    the 8-bit value; AutoContrast: per channel (x - min) / (max - min);
///    Equalize: torchvision's histogram equalisation of the 8-bit values.
void apply_aug_op(float* img, int64_t C, int64_t H, int64_t W, AugOp op, double magnitude);

/// RandAugment's parameters, as torchvision.transforms.RandAugment.
struct RandAugment {
  int64_t num_ops = 2;              ///< N: operations per image
  int64_t magnitude = 9;            ///< M: the magnitude bin, in [0, num_magnitude_bins)
  int64_t num_magnitude_bins = 31;  ///< bins of each magnitude range
  /// Checks the parameters (ValueError naming them).
  RandAugment(int64_t num_ops = 2, int64_t magnitude = 9, int64_t num_magnitude_bins = 31);
  /// Augments img [C, H, W] (values in [0, 1]) in place with draws from rng.
  void operator()(float* img, int64_t C, int64_t H, int64_t W, std::mt19937_64& rng) const;
};

}  // namespace ember::nn::data
