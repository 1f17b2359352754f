// The seq2seq demo's --export-onnx (export.h).
#include "export.h"

#include <algorithm>
#include <numeric>
#include <vector>

namespace seq2seq_app {

using namespace ember;

std::string onnx_refusal(const std::string& kind) {
  if (kind == "transformer") return "";
  return "--export-onnx: the GRU model (--model gru) does not export: its recurrences unroll over the source length "
         "and the steps it masks depend on the lengths of the batch it is traced on, so the graph would be wrong "
         "for other batches; train --model transformer to export";
}

void export_onnx(const app::OnnxExportFlags& flags, const std::string& kind, DatesModel& model, const Data& test,
                 const Vocab& v) {
  if (!flags.enabled()) return;
  const std::string why = onnx_refusal(kind);
  if (!why.empty()) throw app::UsageError(why);
  if (test.size() == 0) throw app::UsageError("--export-onnx needs a test example to trace the model on");
  auto first = [&](int64_t n) {
    std::vector<int64_t> idx(static_cast<size_t>(std::min(n, test.size())));
    std::iota(idx.begin(), idx.end(), int64_t{0});
    return gather_batch(test, from_vector(idx));
  };
  const Batch example = first(2), check = first(8);
  const Tensor prefix = example.tgt_in.narrow(1, 0, std::min<int64_t>(5, example.tgt_in.size(1))).contiguous();
  app::export_onnx(
      "seq2seq", model.module(),
      [&](const std::vector<Tensor>& in) { return std::vector<Tensor>{model.logits(in[0], in[1], in[2])}; },
      {.inputs = {"source", "source_lengths", "target_prefix"},
       .outputs = {"logits"},
       .dynamic_axes = {{"source", {{0, "batch"}, {1, "source_length"}}},
                        {"source_lengths", {{0, "batch"}}},
                        {"target_prefix", {{0, "batch"}, {1, "prefix_length"}}}},
       .example = {example.src, example.lens, prefix},
       .check = {check.src, check.lens, check.tgt_in},
       .doc = "Ember's seq2seq Transformer (apps/seq2seq): dates in human formats to ISO 8601, character by "
              "character; the encoder and a decoder pass over a target prefix. Inputs: source (batch, source_length) "
              "int64, 1 + the index of each character in \"" +
              v.alphabet +
              "\", 0 after the end; source_lengths (batch) int64; target_prefix (batch, prefix_length) int64, "
              "<bos> = 1 then the tokens so far (3 + the index in \"" +
              kTargetChars + "\", <eos> = 2). Output: logits (batch, prefix_length, " + std::to_string(v.tgt_size()) +
              "), the next token's scores after each prefix position; greedy decoding appends the argmax at the "
              "last position and runs again, up to 11 tokens."},
      flags);
}

}  // namespace seq2seq_app
