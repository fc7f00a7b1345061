#!/usr/bin/env bash
# Requantizes SmolLM2 (Q4_1) with llama.cpp's llama-quantize to other weight
# types and checks that `kestrel run --raw --temp 0` prints what
# llama-completion prints, for 3 prompts x 64 tokens per type.
# Usage: scripts/requant-parity.sh [TYPE ...]   (default: Q4_0 Q5_1 Q8_0 Q2_K Q3_K Q5_K F16)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bin="$("$root/scripts/build-llama-cpp.sh" --parity)"
"$root/scripts/fetch-models.sh" smollm2
(cd "$root" && cargo build --release -q -p kestrel-cli)
kestrel="$root/target/release/kestrel"
src="$root/models/SmolLM2-135M-Instruct.Q4_1.gguf"
work="${KESTREL_REQUANT_DIR:-$HOME/.cache/kestrel/requant}"
mkdir -p "$work"
types="${*:-Q4_0 Q5_1 Q8_0 Q2_K Q3_K Q5_K F16}"
prompts=("The capital of France is" "def fibonacci(n):" "Once upon a time, in a small village by the sea,")
fail=0
printf '%-6s %-8s %s\n' type result prompt
for t in $types; do
  m="$work/smollm2-$t.gguf"
  [ -f "$m" ] || "$bin/llama-quantize" --allow-requantize "$src" "$m" "$t" >/dev/null 2>&1
  for p in "${prompts[@]}"; do
    want="$("$bin/llama-completion" -m "$m" -p "$p" -n 64 --temp 0 -no-cnv --no-display-prompt -t 2 -c 4096 --seed 1 2>/dev/null </dev/null \
      | python3 -c 'import sys; t=sys.stdin.buffer.read(); t=t[:-2] if t.endswith(b"\n\n") else t; e=b" [end of text]\n"; sys.stdout.buffer.write(t[:-len(e)] if t.endswith(e) else t)'; echo x)"
    got="$("$kestrel" run -m "$m" -p "$p" -n 64 --temp 0 --raw -t 2 -c 4096 2>/dev/null; echo x)"
    if [ "$want" = "$got" ]; then r=same; else r=DIFFERS; fail=1; fi
    printf '%-6s %-8s %q\n' "$t" "$r" "$p"
    if [ $r = DIFFERS ]; then
      printf '  llama.cpp: %q\n  kestrel:   %q\n' "${want%x}" "${got%x}"
    fi
  done
done
exit $fail
