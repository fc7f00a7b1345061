#!/usr/bin/env bash
# On a machine with a real GPU (Vulkan, Metal or DX12): builds Kestrel, runs
# the GPU tests, then for each test model runs the same greedy prompt on the
# CPU and on the GPU and prints one table: whether the texts agree (and for
# how many characters), and `kestrel bench` pp128 / tg64 tokens/s on both
# devices. Meant to finish within 8 minutes.
#
# usage: scripts/gpu-check.sh [-n TOKENS] [MODEL ...]   (default: the three test models)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
n=32
if [ "${1:-}" = "-n" ]; then
    n="$2"
    shift 2
fi
models=("$@")
if [ ${#models[@]} -eq 0 ]; then
    scripts/fetch-models.sh >/dev/null
    models=(models/SmolLM2-135M-Instruct.Q4_1.gguf models/gemma-3-270m-q4_k_m.gguf
        models/qwen2.5-coder-0.5b-q4_k_m.gguf)
fi
cargo build --release -q -p kestrel-cli
bin=target/release/kestrel
echo "== adapters"
"$bin" devices 2>/dev/null
echo "== GPU tests"
cargo test --release -q -p kestrel-gpu 2>&1 | grep -E "test result|FAILED|panicked" || true
prompt="Write a short paragraph about the history of the bicycle."
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
printf '\n| model | same text | chars in common | cpu pp128 | gpu pp128 | cpu tg64 | gpu tg64 |\n|---|---|---:|---:|---:|---:|---:|\n'
for m in "${models[@]}"; do
    name="$(basename "$m" .gguf)"
    for dev in cpu gpu; do
        "$bin" run -m "$m" --temp 0 -n "$n" -c 2048 -p "$prompt" --device "$dev" \
            >"$tmp/$dev.txt" 2>"$tmp/$dev.err" || {
            echo "| $name | $dev failed: $(tail -1 "$tmp/$dev.err") | | | | | |"
            continue 2
        }
    done
    common=$(python3 - "$tmp/cpu.txt" "$tmp/gpu.txt" <<'EOF'
import sys
a, b = (open(p, encoding="utf-8", errors="replace").read() for p in sys.argv[1:3])
n = 0
while n < min(len(a), len(b)) and a[n] == b[n]:
    n += 1
print(n, "yes" if a == b else "no")
EOF
)
    for dev in cpu gpu; do
        "$bin" bench -m "$m" -p 128 -n 64 -r 3 -o json --bw-mib 0 --device "$dev" \
            >"$tmp/bench-$dev.json" 2>"$tmp/bench-$dev.err" || echo '[]' >"$tmp/bench-$dev.json"
    done
    speeds=$(python3 - "$tmp/bench-cpu.json" "$tmp/bench-gpu.json" <<'EOF'
import json, sys
rows = [{r["test"]: r["avg_ts"] for r in json.load(open(p))} for p in sys.argv[1:3]]
cell = lambda d, t: f"{d[t]:.1f}" if t in d else "failed"
print(" | ".join([cell(rows[0], "pp128"), cell(rows[1], "pp128"),
                  cell(rows[0], "tg64"), cell(rows[1], "tg64")]))
EOF
)
    echo "| $name | ${common#* } | ${common% *} | $speeds |"
done
