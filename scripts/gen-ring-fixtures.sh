#!/usr/bin/env bash
# Regenerates the logit-level parity fixtures for sliding-window models past
# the window cache's size: llama.cpp (the AVX2 parity peer) decoding greedily
# from the 650-token prompt of tests/fixtures/greedy/long-prompts.json on
# Gemma-3-270M (window 512: llama.cpp's default window cache is a ring of
# 512 + 512 cells, so from position 1024 its cells are reused), printing each
# step's most likely token and its logit to six decimals:
# - tests/fixtures/greedy/ring/<model>.txt       the default cache (ring)
# - tests/fixtures/greedy/ring/<model>.full.txt  with --swa-full
# Needs the parity peer (scripts/build-llama-cpp.sh --parity), a C++
# compiler and the models (scripts/fetch-models.sh).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bin="$("$root/scripts/build-llama-cpp.sh" --parity)"
src="$bin/../../src"
steps="${STEPS:-440}"
model="${1:-gemma-3-270m-q4_k_m.gguf}"
out="$root/tests/fixtures/greedy/ring"
mkdir -p "$out"
tool="$(dirname "$bin")/llama-top-logits"
g++ -O2 -std=c++17 -I"$src/include" -I"$src/ggml/include" \
    "$root/scripts/fixtures/llama-top-logits.cpp" -o "$tool" \
    -L"$bin" -lllama -Wl,-rpath,"$bin"
prompt="$(mktemp)"
trap 'rm -f "$prompt"' EXIT
python3 -c 'import json, sys; sys.stdout.write(json.load(open(sys.argv[1]))[1])' \
    "$root/tests/fixtures/greedy/long-prompts.json" > "$prompt"
for full in 0 1; do
  name="${model%.gguf}.txt"
  if [ "$full" = 1 ]; then name="${model%.gguf}.full.txt"; fi
  "$tool" "$root/models/$model" "$prompt" "$steps" 4096 "$full" 2>/dev/null > "$out/$name.tmp"
  mv "$out/$name.tmp" "$out/$name"
  echo "wrote $out/$name" >&2
done
