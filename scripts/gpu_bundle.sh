#!/usr/bin/env bash
# Everything scripts/gpu_check.sh needs on a GPU machine that has nvcc and
# a driver but none of Ember's packages (no OpenBLAS, ONNX, protobuf) and no
# network, built here in one folder to carry there:
#   prebuilt.tar.xz  bin/ (bench, ember_gpu_tests, the demos, llm.c's train_gpt2cu)
#                    and lib/ (the shared libraries they need beyond glibc,
#                    libstdc++ and the CUDA driver and cuBLAS), stripped;
#   llmc/            llm.c's source (make_inputs.py for the same-weights comparison);
#   tinyshakespeare.txt, fashion-mnist/  the demos' and trainers' data.
# The binaries share most of their bytes, so xz with a dictionary larger
# than all of them together stores them in about 16 MB. It prints the
# command to run there (the folder carried as it is, e.g. out/gpu_bundle).
#
#   scripts/gpu_bundle.sh [--arch 90] [--out out/gpu_bundle] [--build build-gpu]
#
# Needs nvcc (/usr/local/cuda), Ember's packages, ../shared/anchors/llm.c,
# ../shared/data/tinyshakespeare.txt and /usr/share/datasets/fashion-mnist.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
arch=90
out="$here/out/gpu_bundle"
build="$here/build-gpu"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --arch) arch="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --build) build="$2"; shift 2 ;;
    *) echo "gpu_bundle: unknown argument '$1' (see the top of $0)" >&2; exit 2 ;;
  esac
done
case "$(cd "$(dirname "$out")" 2>/dev/null && pwd)/$(basename "$out")" in
  / | "$here" | "$here/") echo "gpu_bundle: --out $out would replace the checkout" >&2; exit 2 ;;
esac
llmc_src="$here/../shared/anchors/llm.c"
text="$here/../shared/data/tinyshakespeare.txt"
mnist=/usr/share/datasets/fashion-mnist
export PATH="/usr/local/cuda/bin:$PATH"
for need in "$llmc_src/train_gpt2.cu" "$text" "$mnist/train-images-idx3-ubyte.gz"; do
  [[ -e "$need" ]] || { echo "gpu_bundle: $need is missing" >&2; exit 1; }
done
command -v nvcc >/dev/null || { echo "gpu_bundle: no nvcc" >&2; exit 1; }

# Ember for this architecture, for any x86-64 host (EMBER_NATIVE off: the
# CPU kernels pick AVX-512 at run time), without MPI or NCCL.
cmake -S "$here" -B "$build" -DCMAKE_BUILD_TYPE=Release -DEMBER_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$arch" \
  -DEMBER_NATIVE=OFF -DEMBER_MPI=OFF -DEMBER_NCCL=OFF >/dev/null
cmake --build "$build" -j"$(nproc)" --target bench ember_gpu_tests vit attention_regression seq2seq gpt

rm -rf "$out" && mkdir -p "$out/stage/bin" "$out/stage/lib" "$out/fashion-mnist"
"$here/scripts/build_llmc_cuda.sh" "$llmc_src" "$out/llmc" "$arch" "$out/stage/bin/train_gpt2cu"

apps=(bench ember_gpu_tests vit attention_regression seq2seq gpt)
for a in "${apps[@]}"; do cp "$build/bin/$a" "$out/stage/bin/"; done
# The libraries beyond what every Linux and CUDA machine has.
for a in "${apps[@]}"; do ldd "$build/bin/$a"; done | awk '$3 ~ /^\// { print $1, $3 }' | sort -u |
  while read -r name path; do
    case "$name" in
      libc.so* | libm.so* | libstdc++* | libgcc_s* | libdl.so* | libpthread* | librt.so* | ld-linux* | libcuda.so* | libcublas*) ;;
      *) cp -L "$path" "$out/stage/lib/$name" ;;
    esac
  done
strip --strip-unneeded "$out"/stage/bin/*
tar -C "$out/stage" -cf - bin lib | xz -9e --lzma2=preset=9e,dict=256MiB -T1 >"$out/prebuilt.tar.xz"
rm -rf "$out/stage"
cp "$text" "$out/tinyshakespeare.txt"
cp "$mnist"/*.gz "$out/fashion-mnist/"

rel="${out#"$here"/}"
echo "gpu_bundle: $(du -sh "$out" | cut -f1) in $rel; on the GPU machine, with $rel carried:"
echo "python3 -c \"import tarfile; tarfile.open('$rel/prebuilt.tar.xz').extractall('/tmp/pre')\" && scripts/gpu_check.sh" \
  "--prebuilt /tmp/pre --llmc $rel/llmc --text $rel/tinyshakespeare.txt --mnist $rel/fashion-mnist --out /tmp/gc" \
  "--figures \$OUT/figures.md; cd /tmp/gc && find . -name '*.log' -o -name '*.json' | tar czf \$OUT/logs.tgz -T -"
