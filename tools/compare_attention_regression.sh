#!/usr/bin/env bash
# Time per epoch of the attention_regression `transformer` recipe in Ember
# and in PyTorch 1.13 (tools/attention_regression_torch.py), measured in one
# run on this machine. PyTorch runs with 1 and 2 threads and its faster
# setting is compared, with glibc's malloc told to keep freed memory
# (PyTorch's CPU tensors come straight from malloc; without this, every step
# pays mmap/munmap page faults and runs about 15% slower here). Needs
# python3-torch; Ember itself never does.
#   tools/compare_attention_regression.sh [epochs=40] [build dir=build]
set -euo pipefail
epochs=${1:-40}
build=${2:-build}
py=/usr/bin/python3
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

ember=$("$build/bin/attention_regression" --epochs "$epochs" --quiet --out "$out" | sed -n 's/.* \([0-9.]*\)s\/epoch.*/\1/p')
best=""
for t in 1 2; do
  s=$(MALLOC_MMAP_THRESHOLD_=1000000000 MALLOC_TRIM_THRESHOLD_=1000000000 \
    $py tools/attention_regression_torch.py "$epochs" "$t" 4 | sed -n 's/.* \([0-9.]*\)s\/epoch.*/\1/p')
  echo "pytorch, $t thread(s): $s s/epoch"
  if [[ -z "$best" ]] || awk "BEGIN{exit !($s < $best)}"; then best=$s; fi
done
echo "ember ($("$build/bin/attention_regression" --help >/dev/null && nproc) threads): $ember s/epoch"
awk "BEGIN{printf \"ember is %.2fx faster than pytorch's best setting (%d epochs each)\n\", $best / $ember, $epochs}"
