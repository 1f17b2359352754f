#!/usr/bin/env bash
# The device check: on a machine with an NVIDIA GPU, in one run of a few
# minutes, build Ember for the GPU present (or take binaries built
# elsewhere), run the GPU test suite, time the benchmarks, time llm.c's
# GPT-2 trainer beside Ember's GPT-2 step at the same size, batch and
# context, train both from the same weights on the same tokens
# (tools/gpt2_compare_cuda.py), profile the kernels in question with Nsight
# Compute where it is present, and train the demos (eagerly and with
# --cuda-graph). Every figure goes to one file (FIGURES below), every log
# beside it, so a short time on any GPU is enough to check it all.
#
#   scripts/gpu_check.sh [--out DIR] [--figures FILE] [--prebuilt DIR] [--llmc DIR] [--text FILE] [--mnist DIR]
#                        [--gpt2-batch B] [--gpt2-seq T] [--skip-demos]
#
#   --out DIR       where the figures and logs go (default out/gpu_check)
#   --figures FILE  the figures elsewhere (default DIR/figures.md)
#   --prebuilt DIR  binaries built elsewhere (scripts/gpu_bundle.sh builds and packs
#                   them, and prints the command for the GPU machine): DIR/bin holds bench, ember_gpu_tests,
#                   vit, attention_regression, seq2seq, gpt (an EMBER_CUDA=ON build for
#                   this GPU's architecture) and optionally train_gpt2cu; DIR/lib the
#                   shared libraries they need that this machine lacks (OpenBLAS);
#                   DIR/data the llm.c token files. Without it the script builds
#                   Ember into build-gpu (CMake, nvcc and Ember's packages needed).
#   --llmc DIR      llm.c's source, to build train_gpt2cu and for its make_inputs.py
#                   (default ../shared/anchors/llm.c)
#   --text FILE     the text whose bytes are the GPT-2 tokens of both trainers
#                   (default ../shared/data/tinyshakespeare.txt)
#   --mnist DIR     Fashion-MNIST for the ViT demo (default: the demo's own default)
#
# GPT-2 124M is compared at llm.c's GPU setting by default: batch 16, context
# 1024, bf16 (llm.c mixes bf16 activations with float32 master weights;
# Ember's bf16 step is an autocast region over float32 weights), AdamW at
# lr 3e-4 without weight decay, clipping at 1.
set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="$here/out/gpu_check"
figures=""
prebuilt=""
llmc="$here/../shared/anchors/llm.c"
text="$here/../shared/data/tinyshakespeare.txt"
mnist=""
B=16
T=1024
demos=1
while [[ $# -gt 0 ]]; do
  case "$1" in
    --out) out="$2"; shift 2 ;;
    --figures) figures="$2"; shift 2 ;;
    --prebuilt) prebuilt="$(cd "$2" && pwd)"; shift 2 ;;
    --llmc) llmc="$2"; shift 2 ;;
    --text) text="$2"; shift 2 ;;
    --mnist) mnist="$2"; shift 2 ;;
    --gpt2-batch) B="$2"; shift 2 ;;
    --gpt2-seq) T="$2"; shift 2 ;;
    --skip-demos) demos=0; shift ;;
    *) echo "gpu_check: unknown argument '$1' (see the top of $0)" >&2; exit 2 ;;
  esac
done
mkdir -p "$out" || exit 1
FIGURES="${figures:-$out/figures.md}"
: >"$FIGURES" || exit 1
say() { echo "$*" | tee -a "$FIGURES"; }
failed=0
# run NAME SECONDS CMD...: the command's output to $out/NAME.log; a failure
# or a timeout is a line in the figures and a non-zero exit at the end.
run() {
  local name="$1" limit="$2"
  shift 2
  local t0=$SECONDS
  timeout "$limit" "$@" >"$out/$name.log" 2>&1
  local rc=$?
  say "- $name: exit $rc in $((SECONDS - t0)) s"
  if [[ $rc -ne 0 ]]; then
    failed=1
    tail -n 20 "$out/$name.log" | sed 's/^/    /' | tee -a "$FIGURES"
  fi
  return $rc
}

command -v nvidia-smi >/dev/null || { echo "gpu_check: no nvidia-smi: not a GPU machine" >&2; exit 1; }
cc="$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -n1 | tr -d '. ')"
say "# Ember device check, $(date -u '+%Y-%m-%d %H:%M UTC')"
say ""
say "- GPU: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | head -n1), compute capability $cc"
say "- host: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
say "- nvcc: $(nvcc --version 2>/dev/null | grep -o 'release [0-9.]*' || echo 'not found')"
say "- Ember: $(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo 'not a git checkout')$(git -C "$here" diff --quiet 2>/dev/null || echo ' (with local changes)')"
say ""

# --- binaries ---------------------------------------------------------------
if [[ -n "$prebuilt" ]]; then
  bin="$prebuilt/bin"
  export LD_LIBRARY_PATH="$prebuilt/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  # cuBLAS (opened on the first GEMM) and the CUDA runtime come from this
  # machine's toolkit, which may be missing from the loader's cache.
  for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
    if compgen -G "$d/libcublas.so.*" >/dev/null; then
      export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$d"
      break
    fi
  done
  data="$prebuilt/data"
else
  bin="$here/build-gpu/bin"
  data="$out/data"
  say "## Build"
  run configure 300 cmake -S "$here" -B "$here/build-gpu" -DCMAKE_BUILD_TYPE=Release -DEMBER_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES="$cc" -DEMBER_MPI=OFF -DEMBER_NCCL=OFF || exit 1
  run build 900 cmake --build "$here/build-gpu" -j"$(nproc)" --target bench ember_gpu_tests vit \
    attention_regression seq2seq gpt || exit 1
fi
if [[ ! -x "$bin/train_gpt2cu" && -d "$llmc" ]]; then
  run build_llmc 600 "$here/scripts/build_llmc_cuda.sh" "$llmc" "$out/llmc" "$cc" "$out/train_gpt2cu"
fi
llmc_bin="$bin/train_gpt2cu"
[[ -x "$llmc_bin" ]] || llmc_bin="$out/train_gpt2cu"
# llm.c's token files (magic 20240520, version 1, uint16 tokens), one token
# per byte of the text: ids below 256 of GPT-2's 50257, as llm.c's
# make_inputs.py writes them, 90% train / 10% validation.
if [[ ! -f "$data/train.bin" && -f "$text" ]]; then
  mkdir -p "$data"
  python3 - "$text" "$data" <<'EOF'
import struct, sys
raw = open(sys.argv[1], "rb").read()
cut = len(raw) * 9 // 10
for name, part in (("train", raw[:cut]), ("val", raw[cut:])):
    with open(f"{sys.argv[2]}/{name}.bin", "wb") as f:
        f.write(struct.pack("<3i", 20240520, 1, len(part)) + bytes(1012))
        f.write(b"".join(struct.pack("<H", b) for b in part))
EOF
fi

# --- correctness --------------------------------------------------------------
say "## Correctness on the GPU"
run gpu_tests 300 "$bin/ember_gpu_tests"
grep -E "^\[doctest\] (test cases|assertions)" "$out/gpu_tests.log" | sed 's/^/    /' | tee -a "$FIGURES"
say ""

# --- benchmarks ---------------------------------------------------------------
say "## Benchmarks (bench --device cuda; medians; launches per training step)"
run bench 300 "$bin/bench" --device cuda --profile --json "$out/bench.json"
grep -E "^device|train step|launches per|tokens/s|generate|causal|of the bf16|cross_entropy|layer_norm|softmax|gelu|GEMMs|8192|qkv|attn proj|mlp fc|mlp proj|lm_head" \
  "$out/bench.log" | sed 's/^/    /' | tee -a "$FIGURES"
say ""
say "## GPT-2 124M training, batch $B, context $T (Ember's step eagerly and as a CUDA graph: the \" graph\" rows)"
run bench_gpt2 300 "$bin/bench" --device cuda --workload gpt2 --gpt2-batch "$B" --gpt2-seq "$T" \
  --precision fp32,bf16 --steps 10 --warmup 3 --profile --json "$out/bench_gpt2.json"
grep -E "gpt2|tokens/s|launches|profiled|calls" "$out/bench_gpt2.log" | sed 's/^/    /' | tee -a "$FIGURES"
if [[ -x "$llmc_bin" && -f "$data/train.bin" ]]; then
  # -e d12: GPT-2 124M from random initialisation; no validation, sampling or checkpoints.
  run llmc 300 "$llmc_bin" -e d12 -b "$B" -t "$T" -i "$data/train.bin" -j "$data/val.bin" -x 30 -v 1000 \
    -s 0 -h 0 -l 3e-4 -c 0.0
  # Steps 10-30 (after warm-up): the median milliseconds and tokens/s llm.c prints.
  grep -E "^step" "$out/llmc.log" | awk -F'|' 'NR > 10 { print }' >"$out/llmc_steps.txt"
  if [[ -s "$out/llmc_steps.txt" ]]; then
    ms="$(sed -E 's/.*\| ([0-9.]+) ms.*/\1/' "$out/llmc_steps.txt" | sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }')"
    tok="$(sed -E 's/.*\| ([0-9]+) tok\/s.*/\1/' "$out/llmc_steps.txt" | sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }')"
    say "    llm.c train_gpt2cu (bf16, cuBLASLt): median $ms ms per step, $tok tokens/s (steps 11-30)"
    grep -E "^step +(1|10|30)/" "$out/llmc.log" | sed 's/^/    /' | tee -a "$FIGURES"
  fi
else
  say "    llm.c: not run (no train_gpt2cu or no token files)"
fi
say ""
say "## GPT-2 124M, batch $B, context $T, bf16: 50 steps beside llm.c from the same weights on the same tokens"
if [[ -x "$llmc_bin" && -f "$llmc/make_inputs.py" && -f "$text" ]] && command -v python3 >/dev/null; then
  run gpt2_compare 300 python3 "$here/tools/gpt2_compare_cuda.py" --bench "$bin/bench" --llmc "$llmc_bin" \
    --make-inputs "$llmc/make_inputs.py" --text "$text" --batch "$B" --seq "$T" --steps 50 --work "$out/gpt2_compare"
  sed -n '/^GPT-2 124M, batch/,/^wrote/p' "$out/gpt2_compare.log" | sed 's/^/    /' | tee -a "$FIGURES"
  rm -f "$out"/gpt2_compare/*.bin  # 750 MB of weights
else
  say "    not run (no train_gpt2cu, llm.c's make_inputs.py, the text or python3)"
fi
say ""

# --- kernel profiles ----------------------------------------------------------
# Nsight Compute on one launch of each kernel whose time the figures above
# question (the tensor-core attention far below its peak, layer_norm's
# backward), where ncu reads the counters (clocks left alone).
if command -v ncu >/dev/null; then
  say "## Nsight Compute: one launch of each kernel"
  for spec in tc_forward_kernel:causal_attention tc_dq_kernel:causal_attention tc_dkdv_kernel:causal_attention \
    layer_norm_backward_fused_kernel:vit layer_norm_sums_kernel:vit; do
    k="${spec%%:*}" w="${spec##*:}"
    run "ncu_$k" 180 ncu --clock-control none -k "regex:$k" -c 1 --section SpeedOfLight --section Occupancy \
      --section LaunchStats --section WarpStateStats --section MemoryWorkloadAnalysis \
      "$bin/bench" --device cuda --workload "$w" --steps 1 --warmup 0 --graphs false
    grep -E "^  [a-z_]+.*\(|Duration|Compute \(SM\) Throughput|Memory Throughput|Registers Per Thread|Achieved Occupancy|Theoretical Occupancy|Warp Cycles Per Issued|Block Size|Grid Size" \
      "$out/ncu_$k.log" | head -14 | sed 's/^/    /' | tee -a "$FIGURES"
  done
  say ""
fi

# --- demos --------------------------------------------------------------------
if [[ $demos -eq 1 ]]; then
  say "## Demos with --device cuda (figures from each metrics.json)"
  mnist_args=()
  [[ -n "$mnist" ]] && mnist_args=(--data-dir "$mnist")
  gpt_data=()
  [[ -f "$text" ]] && gpt_data=(--data "$text")
  # vit, attention_regression and gpt eagerly, then with each training step a CUDA
  # graph (--cuda-graph, the same bits): both train_seconds recorded.
  for mode in eager graph; do
    flag=()
    [[ $mode == graph ]] && flag=(--cuda-graph)
    run "vit_$mode" 300 "$bin/vit" --device cuda --out "$out/vit_$mode" "${mnist_args[@]}" "${flag[@]}" &&
      grep -o '"\(final_test_accuracy\|train_seconds\|cuda_graph_replays\)": *[0-9.e+-]*' \
        "$out/vit_$mode/metrics.json" | sed "s/^/    vit $mode /" | tee -a "$FIGURES"
    run "attention_regression_$mode" 300 "$bin/attention_regression" --device cuda \
      --out "$out/attention_regression_$mode" "${flag[@]}" &&
      grep -o '"\(test_mse\|train_seconds\|epochs_run\|cuda_graph_replays\)": *[0-9.e+-]*' \
        "$out/attention_regression_$mode/metrics.json" | sed "s/^/    attention_regression $mode /" | tee -a "$FIGURES"
    # The character-level GPT (nanoGPT's CPU recipe, 2000 steps), dropout off as in the preset.
    run "gpt_$mode" 600 "$bin/gpt" --device cuda --preset nanogpt-cpu "${gpt_data[@]}" --out "$out/gpt_$mode" "${flag[@]}" &&
      grep -o '"\(final_val_loss\|train_seconds\|tokens_per_second\|cuda_graph_replays\)": *[0-9.e+-]*' \
        "$out/gpt_$mode/metrics.json" | sed "s/^/    gpt $mode /" | tee -a "$FIGURES"
  done
  run seq2seq 300 "$bin/seq2seq" --device cuda --out "$out/seq2seq" &&
    grep -o '"\(test_exact_match\|train_seconds\)": *[0-9.e+-]*' "$out/seq2seq/metrics.json" |
    sed 's/^/    seq2seq /' | tee -a "$FIGURES"
fi

say ""
say "figures: $FIGURES; logs: $out/*.log"
exit $failed
