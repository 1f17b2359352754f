// The seq2seq demo's --export-onnx (apps/common/onnx_export.h). The
// Transformer is written as one graph: the encoder and a decoder pass over
// a target prefix, from "source" (batch, source_length) character ids,
// "source_lengths" (batch) and "target_prefix" (batch, prefix_length),
// starting with <bos>, to "logits" (batch, prefix_length, 14): the next
// token's scores after every prefix position (the decoder is causal, so
// position t sees the prefix up to t only). Greedy decoding appends the
// argmax of the last position and runs the graph again. With the sequence
// axes dynamic the graph runs at any source and prefix length (up to the
// positional table's 128), which an unrolled greedy loop would not: its
// steps would be fixed at export, and ONNX's Loop would carry the decoder's
// whole state through a subgraph.
//
// The GRU model does not export (onnx_refusal): its recurrences are unrolled
// over the source length, and which steps it masks depends on the lengths
// of the batch it runs on, so a graph traced on one batch would compute
// something else on another.
#pragma once

#include <string>

#include "data.h"
#include "model.h"
#include "onnx_export.h"

namespace seq2seq_app {

/// Why --model `kind` cannot be exported, or "" when it can.
std::string onnx_refusal(const std::string& kind);

/// Writes model (of --model kind: transformer) to flags.path, traced on the
/// first 2 test examples with a prefix of 5 tokens and checked on the first
/// 8 with the whole target (--export-onnx-check). Nothing when the flag is
/// unset; UsageError naming why for a kind that does not export.
void export_onnx(const ember::app::OnnxExportFlags& flags, const std::string& kind, DatesModel& model, const Data& test,
                 const Vocab& v);

}  // namespace seq2seq_app
