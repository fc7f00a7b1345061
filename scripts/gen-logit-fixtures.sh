#!/usr/bin/env bash
# Regenerates the logit-level parity fixtures: llama.cpp (the AVX2 parity
# peer) decoding greedily, printing each step's most likely token and its
# logit to six decimals (scripts/fixtures/llama-top-logits.cpp, built here
# against the peer's libllama), for what token-level fixtures can miss:
# - tests/fixtures/greedy/ring/: Gemma-3-270M from the 650-token prompt of
#   tests/fixtures/greedy/long-prompts.json, 440 steps. Its window is 512:
#   llama.cpp's default window cache is a ring of 512 + 512 cells, reused
#   from position 1024 on. <model>.txt is the default cache (the ring),
#   <model>.full.txt --swa-full; <model>.long-prompt.txt, 16 steps from a
#   1611-token prompt (that prompt twice, then the other, blank lines
#   between), whose fourth micro-batch already attends in the ring.
# - tests/fixtures/greedy/ubatch/: each test model from
#   tests/fixtures/greedy/ubatch/prompt.txt (528-533 tokens: llama.cpp runs
#   a 512-token micro-batch, then a short one), 8 steps.
# Needs the parity peer (scripts/build-llama-cpp.sh --parity), a C++
# compiler and the models (scripts/fetch-models.sh).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bin="$("$root/scripts/build-llama-cpp.sh" --parity)"
src="$bin/../../src"
fix="$root/tests/fixtures/greedy"
tool="$(dirname "$bin")/llama-top-logits"
g++ -O2 -std=c++17 -I"$src/include" -I"$src/ggml/include" \
    "$root/scripts/fixtures/llama-top-logits.cpp" -o "$tool" \
    -L"$bin" -lllama -Wl,-rpath,"$bin"
gen() { # model prompt-file steps swa_full out
  "$tool" "$root/models/$1" "$2" "$3" 4096 "$4" 2>/dev/null > "$5.tmp"
  mv "$5.tmp" "$5"
  echo "wrote $5" >&2
}
prompt="$(mktemp)"
trap 'rm -f "$prompt"' EXIT
python3 -c 'import json, sys; sys.stdout.write(json.load(open(sys.argv[1]))[1])' \
    "$fix/long-prompts.json" > "$prompt"
mkdir -p "$fix/ring" "$fix/ubatch"
gen gemma-3-270m-q4_k_m.gguf "$prompt" "${STEPS:-440}" 0 "$fix/ring/gemma-3-270m-q4_k_m.txt"
gen gemma-3-270m-q4_k_m.gguf "$prompt" "${STEPS:-440}" 1 "$fix/ring/gemma-3-270m-q4_k_m.full.txt"
python3 -c 'import json, sys; p = json.load(open(sys.argv[1])); sys.stdout.write(p[1] + "\n\n" + p[1] + "\n\n" + p[0])' \
    "$fix/long-prompts.json" > "$prompt"
gen gemma-3-270m-q4_k_m.gguf "$prompt" 16 0 "$fix/ring/gemma-3-270m-q4_k_m.long-prompt.txt"
for m in SmolLM2-135M-Instruct.Q4_1.gguf gemma-3-270m-q4_k_m.gguf qwen2.5-coder-0.5b-q4_k_m.gguf; do
  gen "$m" "$fix/ubatch/prompt.txt" 8 0 "$fix/ubatch/${m%.gguf}.txt"
done
