#!/usr/bin/env bash
# llm.c's CUDA trainer, train_gpt2cu (bf16, cuBLASLt; no cuDNN, MPI or
# NCCL), from a copy of its source: an anchor to measure Ember against
# (scripts/gpu_check.sh, scripts/gpu_bundle.sh), never part of Ember.
#
#   scripts/build_llmc_cuda.sh SRC WORK ARCH BIN
#
# SRC llm.c's source (read only; ../shared/anchors/llm.c), WORK the copy it
# builds in (replaced), ARCH the compute capability (90), BIN the program.
set -euo pipefail
[[ $# -eq 4 ]] || { echo "usage: $0 SRC WORK ARCH BIN" >&2; exit 2; }
src="$1" work="$2" arch="$3"
mkdir -p "$(dirname "$4")"
bin="$(cd "$(dirname "$4")" && pwd)/$(basename "$4")"  # the build runs in WORK
[[ -f "$src/train_gpt2.cu" ]] || { echo "build_llmc_cuda: no train_gpt2.cu in $src" >&2; exit 1; }
command -v nvcc >/dev/null || { echo "build_llmc_cuda: no nvcc on the PATH" >&2; exit 1; }
rm -rf "$work"
cp -r "$src" "$work"
chmod -R u+w "$work"  # the anchor is read-only
# CUDA 13's cudaMemAdvise takes a cudaMemLocation where llm.c (2025) passes
# a device id; the line is in its out-of-memory fallback.
if nvcc --version | grep -q 'release 1[3-9]'; then
  sed -i 's/cudaMemAdviseSetPreferredLocation, cudaCpuDeviceId)/cudaMemAdviseSetPreferredLocation, cudaMemLocation{cudaMemLocationTypeHost, 0})/' \
    "$work/llmc/cuda_utils.cuh"
fi
# llm.c's Makefile always links NVML, which its code uses only where nvml.h
# is found; a toolkit without that header has no library to link either.
nvml=()
[[ -e "$(dirname "$(command -v nvcc)")/../include/nvml.h" ]] && nvml=(-lnvidia-ml)
# The Makefile's nvcc line for this architecture.
cd "$work"
nvcc --threads=0 -t=0 --use_fast_math -std=c++17 -O3 --generate-code "arch=compute_$arch,code=[compute_$arch,sm_$arch]" \
  -DENABLE_BF16 train_gpt2.cu -lcublas -lcublasLt "${nvml[@]}" -o "$bin"
