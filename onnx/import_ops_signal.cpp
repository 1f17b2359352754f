// ONNX import: the signal ops of opset 17: the window functions, DFT, STFT
// and MelWeightMatrix.
//
// Windows, with N = size and d = N (periodic, the default) or N - 1
// (symmetric), for n = 0 .. N - 1:
//   Hann      1/2 - 1/2 cos(2 pi n / d)
//   Hamming   25/46 - 21/46 cos(2 pi n / d)
//   Blackman  0.42 - 0.5 cos(2 pi n / d) + 0.08 cos(4 pi n / d)
// computed in float64 and returned in output_datatype (float by default).
//
// ONNX's complex signals have a last dim of 2 (real, imaginary; 1 for a real
// signal). The DFT of length L along an axis is a product with the matrix
// W[k][j] = exp(-+2 pi i k j / L) (minus forward, plus inverse, which also
// divides by L): with C = cos and S = sin of the angle,
//   (re + i im)(C + i S) = (re C - im S) + i (re S + im C),
// two real matmuls each, so gradients reach the signal. onesided keeps the
// first L/2 + 1 bins (the rest mirror them for a real signal).
#include <cmath>

#include <ember/onnx/import_helpers.h>
#include <ember/ops/indexing.h>
#include <ember/ops/join.h>
#include <ember/ops/matmul.h>

namespace ember::onnx::detail {

namespace {

using Outs = std::vector<Tensor>;

template <class F>
Outs window(const NodeArgs& a, F f) {
  const double size = scalar_value(a, 0);
  if (size < 0 || size > 1e9) a.invalid("size must be in [0, 1e9]");
  const int64_t n = static_cast<int64_t>(size);
  const double d = static_cast<double>(a.attr_int("periodic", 1) ? n : n - 1);
  std::vector<double> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = d == 0 ? 1.0 : f(2 * M_PI * static_cast<double>(i) / d);
  return {from_vector(v, Shape{n}).to(dtype_of_onnx(a, a.attr_int("output_datatype", ::onnx::TensorProto::FLOAT)))};
}

Outs hann_op(const NodeArgs& a) {
  return window(a, [](double t) { return 0.5 - 0.5 * std::cos(t); });
}
Outs hamming_op(const NodeArgs& a) {
  return window(a, [](double t) { return 25.0 / 46.0 - 21.0 / 46.0 * std::cos(t); });
}
Outs blackman_op(const NodeArgs& a) {
  return window(a, [](double t) { return 0.42 - 0.5 * std::cos(t) + 0.08 * std::cos(2 * t); });
}

// The DFT of (re, im) along axis (of the tensors without the complex dim), length L, bins kept.
std::pair<Tensor, Tensor> dft(const Tensor& re, const Tensor& im, int64_t axis, int64_t L, int64_t bins, bool inverse) {
  std::vector<double> c(bins * L), s(bins * L);
  const double sign = inverse ? 1.0 : -1.0, scale = inverse ? 1.0 / static_cast<double>(L) : 1.0;
  for (int64_t k = 0; k < bins; ++k)
    for (int64_t j = 0; j < L; ++j) {
      // k j reduced mod L first: the angle stays small, so cos and sin stay exact to rounding.
      const double t = sign * 2 * M_PI * static_cast<double>((k * j) % L) / static_cast<double>(L);
      c[k * L + j] = std::cos(t) * scale, s[k * L + j] = std::sin(t) * scale;
    }
  const TensorOptions o(re.dtype(), re.device());
  const Tensor C = from_vector(c, Shape{bins, L}).to(o.dtype).to(o.device).t();
  const Tensor S = from_vector(s, Shape{bins, L}).to(o.dtype).to(o.device).t();
  // Signals as rows: the axis moved last, then x [.., L] times W^T [L, bins].
  const Tensor r = re.transpose(axis, -1), i = im.transpose(axis, -1);
  Tensor out_re = sub(matmul(r, C), matmul(i, S)), out_im = add(matmul(r, S), matmul(i, C));
  return {out_re.transpose(axis, -1), out_im.transpose(axis, -1)};
}

// x [..., 1 or 2] as its real and imaginary parts (zeros for a real signal), padded with zeros or cut
// to length L along axis.
std::pair<Tensor, Tensor> complex_parts(const NodeArgs& a, const Tensor& x, int64_t axis, int64_t L) {
  if (x.dim() < 2 || (x.size(-1) != 1 && x.size(-1) != 2)) a.invalid("the signal's last dim must be 1 or 2");
  const Tensor xf = x.is_floating_point() ? x : x.to(kFloat32);
  Tensor re = xf.select(-1, 0), im = x.size(-1) == 2 ? xf.select(-1, 1) : zeros_like(re);
  const int64_t n = re.size(axis);
  if (L < n) {
    re = re.narrow(axis, 0, L), im = im.narrow(axis, 0, L);
  } else if (L > n) {
    std::vector<int64_t> pads(2 * re.dim(), 0);
    pads[2 * (re.dim() - 1 - axis) + 1] = L - n;  // torch order: last dim first, (before, after)
    re = pad(re, pads), im = pad(im, pads);
  }
  return {re, im};
}

Outs dft_op(const NodeArgs& a) {
  const Tensor& x = a.input(0);
  const int64_t axis = norm_axis(a, a.attr_int("axis", 1), x.dim() - 1);
  const int64_t L = a.has_input(1) && a.input(1).numel() ? static_cast<int64_t>(scalar_value(a, 1)) : x.size(axis);
  if (L <= 0 || L > (int64_t{1} << 24)) a.invalid("dft_length must be in [1, 2^24]");
  const bool inverse = a.attr_int("inverse", 0) != 0, onesided = a.attr_int("onesided", 0) != 0;
  auto [re, im] = complex_parts(a, x, axis, L);
  auto [yr, yi] = dft(re, im, axis, L, onesided ? L / 2 + 1 : L, inverse);
  return {stack({yr, yi}, -1)};
}

// Frames of frame_length every frame_step samples, each times the window, each DFT'd:
// [batch, frames, bins, 2].
Outs stft_op(const NodeArgs& a) {
  const Tensor& x = a.input(0);
  if (x.dim() != 3) a.invalid("the signal must be [batch, length, 1 or 2]");
  const int64_t step = static_cast<int64_t>(scalar_value(a, 1));
  const bool has_window = a.has_input(2) && a.input(2).numel() > 0;
  int64_t L = has_window ? a.input(2).numel() : 0;
  if (a.has_input(3) && a.input(3).numel()) L = static_cast<int64_t>(scalar_value(a, 3));
  const int64_t n = x.size(1);
  if (step <= 0 || L <= 0 || L > n) a.invalid("needs frame_step > 0 and 0 < frame_length <= the signal's length");
  if (has_window && a.input(2).numel() != L) a.invalid("the window's length differs from frame_length");
  const int64_t frames = (n - L) / step + 1;
  std::vector<int64_t> idx;
  for (int64_t f = 0; f < frames; ++f)
    for (int64_t j = 0; j < L; ++j) idx.push_back(f * step + j);
  Shape fs{x.size(0), frames, L, x.size(2)};
  const Tensor framed = index_select(x, 1, from_vector(idx, Shape{frames * L}).to(x.device())).reshape(fs);
  auto [re, im] = complex_parts(a, framed, 2, L);
  if (has_window) {
    const Tensor w = a.input(2).to(re.dtype()).reshape({L});
    re = mul(re, w), im = mul(im, w);
  }
  const bool onesided = a.attr_int("onesided", 1) != 0;
  auto [yr, yi] = dft(re, im, 2, L, onesided ? L / 2 + 1 : L, false);
  return {stack({yr, yi}, -1)};
}

// Triangular filters between num_mel_bins + 2 points evenly spaced in mel (2595 log10(1 + f / 700)),
// as ONNX's reference computes them: [dft_length / 2 + 1, num_mel_bins].
Outs mel_weight_matrix_op(const NodeArgs& a) {
  const int64_t bins = static_cast<int64_t>(scalar_value(a, 0)), L = static_cast<int64_t>(scalar_value(a, 1));
  const double rate = scalar_value(a, 2), lo = scalar_value(a, 3), hi = scalar_value(a, 4);
  if (bins <= 0 || L <= 0 || bins > 65536 || L > (int64_t{1} << 24) || !(rate > 0))
    a.invalid("needs positive num_mel_bins, dft_length and sample_rate");
  const int64_t spec = L / 2 + 1;
  const double lo_mel = 2595 * std::log10(1 + lo / 700), hi_mel = 2595 * std::log10(1 + hi / 700);
  const double step = (hi_mel - lo_mel) / static_cast<double>(bins + 2);
  std::vector<int64_t> f(bins + 2);
  for (int64_t i = 0; i < bins + 2; ++i) {
    const double hz = 700 * (std::pow(10.0, (static_cast<double>(i) * step + lo_mel) / 2595) - 1);
    f[i] = static_cast<int64_t>(std::floor(static_cast<double>(L + 1) * hz / rate));
    f[i] = std::clamp<int64_t>(f[i], 0, spec - 1);
  }
  std::vector<double> out(spec * bins, 0.0);
  for (int64_t i = 0; i < bins; ++i) {
    const int64_t left = f[i], center = f[i + 1], right = f[i + 2];
    if (center == left) {
      out[center * bins + i] = 1;
    } else {
      for (int64_t j = left; j <= center; ++j)
        out[j * bins + i] = static_cast<double>(j - left) / static_cast<double>(center - left);
    }
    for (int64_t j = center; j < right; ++j)
      out[j * bins + i] = static_cast<double>(right - j) / static_cast<double>(right - center);
  }
  return {from_vector(out, Shape{spec, bins})
              .to(dtype_of_onnx(a, a.attr_int("output_datatype", ::onnx::TensorProto::FLOAT)))};
}

}  // namespace

void register_signal_ops(OpTable& t) {
  t.add("HannWindow", hann_op);
  t.add("HammingWindow", hamming_op);
  t.add("BlackmanWindow", blackman_op);
  t.add("DFT", dft_op);
  t.add("STFT", stft_op);
  t.add("MelWeightMatrix", mel_weight_matrix_op);
}

}  // namespace ember::onnx::detail
