#!/usr/bin/env bash
# Regenerates tests/fixtures/greedy/<model>.jsonl: what llama.cpp's
# llama-completion prints for each prompt in tests/fixtures/greedy/prompts.json
# with greedy sampling (raw prompt, no chat template, 64 tokens).
# Needs the peer (scripts/build-llama-cpp.sh) and the models (scripts/fetch-models.sh).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bin="$("$root/scripts/build-llama-cpp.sh")"
n_predict="${N_PREDICT:-64}"
models="${*:-SmolLM2-135M-Instruct.Q4_1.gguf gemma-3-270m-q4_k_m.gguf qwen2.5-coder-0.5b-q4_k_m.gguf}"
for m in $models; do
  out="$root/tests/fixtures/greedy/${m%.gguf}.jsonl"
  python3 - "$bin/llama-completion" "$root/models/$m" "$root/tests/fixtures/greedy/prompts.json" "$n_predict" > "$out.tmp" <<'PY'
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
  mv "$out.tmp" "$out"
  echo "wrote $out" >&2
done
