#!/usr/bin/env bash
# Regenerates tests/fixtures/perplexity/<model>.json: what llama.cpp's
# llama-perplexity reports for a text shipped with Debian (the GPL-3 licence
# text, /usr/share/common-licenses/GPL-3) at a context of 512 over the first
# CHUNKS chunks (default 4): the final PPL, its uncertainty and the running
# value after each chunk. `-b 512` makes llama.cpp evaluate one chunk per
# batch, as kestrel does.
# Needs the parity peer (scripts/build-llama-cpp.sh --parity) and the models (scripts/fetch-models.sh).
# Usage: scripts/gen-perplexity-fixtures.sh [MODEL.gguf ...]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bin="$("$root/scripts/build-llama-cpp.sh" --parity)"
text="${TEXT:-/usr/share/common-licenses/GPL-3}"
chunks="${CHUNKS:-4}"
n_ctx=512
models="${*:-SmolLM2-135M-Instruct.Q4_1.gguf gemma-3-270m-q4_k_m.gguf qwen2.5-coder-0.5b-q4_k_m.gguf}"
mkdir -p "$root/tests/fixtures/perplexity"
for m in $models; do
  out="$root/tests/fixtures/perplexity/${m%.gguf}.json"
  log="$(mktemp)"
  LD_LIBRARY_PATH="$bin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
    "$bin/llama-perplexity" -m "$root/models/$m" -f "$text" -c "$n_ctx" -b "$n_ctx" \
    --chunks "$chunks" -t 2 > "$log" 2>&1 || { cat "$log" >&2; exit 1; }
  python3 - "$log" "$m" "$text" "$n_ctx" "$chunks" > "$out.tmp" <<'PY'
import json, re, sys
log, model, text, n_ctx, chunks = sys.argv[1:]
out = open(log, encoding="utf-8", errors="replace").read()
final = re.search(r"Final estimate: PPL = ([0-9.]+) \+/- ([0-9.]+)", out)
assert final, out[-2000:]
running = [float(v) for _, v in re.findall(r"\[(\d+)\]([0-9.]+),", out)]
assert len(running) == int(chunks), running
print(json.dumps({
    "model": model,
    "text": text,
    "n_ctx": int(n_ctx),
    "n_batch": int(n_ctx),
    "chunks": int(chunks),
    "ppl": float(final.group(1)),
    "ppl_uncertainty": float(final.group(2)),
    "chunk_ppl": running,
    "command": f"llama-perplexity -m models/{model} -f {text} -c {n_ctx} -b {n_ctx} --chunks {chunks} -t 2",
}, indent=2))
PY
  rm -f "$log"
  mv "$out.tmp" "$out"
  echo "wrote $out" >&2
done
