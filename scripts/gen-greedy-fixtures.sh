#!/usr/bin/env bash
# Regenerates the greedy parity fixtures: what llama.cpp's llama-completion
# prints with greedy sampling (raw prompt, no chat template) for
# - each prompt in tests/fixtures/greedy/prompts.json, 64 tokens
#   -> tests/fixtures/greedy/<model>.jsonl
# - each prompt in tests/fixtures/greedy/long-prompts.json (300 and 650
#   tokens, so the decode steps read a cache view of 512 and 768 cells:
#   ggml's split-KV path), 64 tokens -> tests/fixtures/greedy/long/<model>.jsonl
# Needs the parity peer (scripts/build-llama-cpp.sh --parity) and the models
# (scripts/fetch-models.sh).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bin="$("$root/scripts/build-llama-cpp.sh" --parity)"
n_predict="${N_PREDICT:-64}"
models="${*:-SmolLM2-135M-Instruct.Q4_1.gguf gemma-3-270m-q4_k_m.gguf qwen2.5-coder-0.5b-q4_k_m.gguf}"
fix="$root/tests/fixtures/greedy"
mkdir -p "$fix/long"
gen() { # prompts.json out.jsonl model
  python3 - "$bin/llama-completion" "$root/models/$3" "$1" "$n_predict" > "$2.tmp" <<'PY'
import json, subprocess, sys
exe, model, prompts_path, n = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
END = " [end of text]\n"
for prompt in json.load(open(prompts_path, encoding="utf-8")):
    r = subprocess.run(
        [exe, "-m", model, "-p", prompt, "-n", n, "--temp", "0", "-no-cnv",
         "--no-display-prompt", "-t", "2", "-c", "4096", "--seed", "1"],
        capture_output=True, stdin=subprocess.DEVNULL, check=True)
    text = r.stdout.decode("utf-8", errors="replace")
    # llama-completion always ends its output with "\n\n", after " [end of text]\n" on EOS.
    assert text.endswith("\n\n"), repr(text[-40:])
    text = text[:-2]
    eos = text.endswith(END)
    if eos:
        text = text[: -len(END)]
    print(json.dumps({"prompt": prompt, "n_predict": int(n), "output": text, "eos": eos},
                     ensure_ascii=False))
PY
  mv "$2.tmp" "$2"
  echo "wrote $2" >&2
}
for m in $models; do
  gen "$fix/prompts.json" "$fix/${m%.gguf}.jsonl" "$m"
  gen "$fix/long-prompts.json" "$fix/long/${m%.gguf}.jsonl" "$m"
done
