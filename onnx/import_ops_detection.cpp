// ONNX import: NonMaxSuppression, greedy and on the host (its output is a
// list of indices, nothing to differentiate).
//
// For each batch entry and class: the boxes whose score exceeds
// score_threshold, by descending score (ties keep the lower index); a box is
// kept unless its intersection over union with a box already kept exceeds
// iou_threshold, until max_output_boxes_per_class are kept. Boxes are
// [y1, x1, y2, x2] with either corner first (center_point_box = 0) or
// [x_center, y_center, width, height] (center_point_box = 1).
#include <algorithm>
#include <cmath>
#include <numeric>

#include <ember/onnx/import_helpers.h>

namespace ember::onnx::detail {

namespace {

using Outs = std::vector<Tensor>;

struct Box {
  double y1, x1, y2, x2;
};

double iou(const Box& a, const Box& b) {
  const double ih = std::min(a.y2, b.y2) - std::max(a.y1, b.y1);
  const double iw = std::min(a.x2, b.x2) - std::max(a.x1, b.x1);
  if (ih <= 0 || iw <= 0) return 0;
  const double inter = ih * iw;
  const double uni = (a.y2 - a.y1) * (a.x2 - a.x1) + (b.y2 - b.y1) * (b.x2 - b.x1) - inter;
  return uni > 0 ? inter / uni : 0;
}

Outs nms_op(const NodeArgs& a) {
  const Tensor boxes = a.input(0).cpu().to(kFloat64).contiguous();
  const Tensor scores = a.input(1).cpu().to(kFloat64).contiguous();
  if (boxes.dim() != 3 || boxes.size(2) != 4 || scores.dim() != 3 || scores.size(0) != boxes.size(0) ||
      scores.size(2) != boxes.size(1))
    a.invalid("boxes must be [B, N, 4] and scores [B, C, N]; got " + boxes.shape().str() + " and " +
              scores.shape().str());
  const int64_t max_out = a.has_input(2) && a.input(2).numel() ? a.ints_input(2).at(0) : 0;
  const double iou_max = a.has_input(3) && a.input(3).numel() ? scalar_value(a, 3) : 0.0;
  const bool use_score = a.has_input(4) && a.input(4).numel();
  const double score_min = use_score ? scalar_value(a, 4) : 0.0;
  const bool center = a.attr_int("center_point_box", 0) != 0;
  const int64_t B = boxes.size(0), N = boxes.size(1), C = scores.size(1);
  const double* bp = boxes.data<double>();
  const double* sp = scores.data<double>();
  std::vector<int64_t> out;
  for (int64_t b = 0; b < B; ++b) {
    std::vector<Box> bx(N);
    for (int64_t i = 0; i < N; ++i) {
      const double* p = bp + (b * N + i) * 4;
      if (center) {
        bx[i] = {p[1] - p[3] / 2, p[0] - p[2] / 2, p[1] + p[3] / 2, p[0] + p[2] / 2};
      } else {
        bx[i] = {std::min(p[0], p[2]), std::min(p[1], p[3]), std::max(p[0], p[2]), std::max(p[1], p[3])};
      }
    }
    for (int64_t c = 0; c < C; ++c) {
      const double* s = sp + (b * C + c) * N;
      std::vector<int64_t> order;
      for (int64_t i = 0; i < N; ++i)
        if (!use_score || s[i] > score_min) order.push_back(i);
      // By descending score, NaN last (a strict weak order even with NaN).
      std::stable_sort(order.begin(), order.end(),
                       [&](int64_t i, int64_t j) { return !std::isnan(s[i]) && (std::isnan(s[j]) || s[i] > s[j]); });
      std::vector<int64_t> kept;
      for (int64_t i : order) {
        if (static_cast<int64_t>(kept.size()) >= max_out) break;
        bool keep = true;
        for (int64_t k : kept) keep = keep && iou(bx[i], bx[k]) <= iou_max;
        if (!keep) continue;
        kept.push_back(i);
        out.insert(out.end(), {b, c, i});
      }
    }
  }
  return {from_vector(out, Shape{static_cast<int64_t>(out.size() / 3), 3})};
}

}  // namespace

void register_detection_ops(OpTable& t) { t.add("NonMaxSuppression", nms_op); }

}  // namespace ember::onnx::detail
