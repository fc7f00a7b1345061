#!/usr/bin/env bash
# On a machine with a real GPU (Vulkan, Metal or DX12): builds Kestrel, runs
# the GPU tests, then for each test model runs the same greedy prompt on the
# CPU and on the GPU and prints one table: whether the texts agree (and for
# how many characters), and decode tokens/s on both devices (from `run`'s
# own timing line). Meant to finish within 8 minutes.
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
printf '\n| model | same text | chars in common | cpu tg t/s | gpu tg t/s |\n|---|---|---:|---:|---:|\n'
for m in "${models[@]}"; do
    name="$(basename "$m" .gguf)"
    for dev in cpu gpu; do
        "$bin" run -m "$m" --temp 0 -n "$n" -c 2048 -p "$prompt" --device "$dev" \
            >"$tmp/$dev.txt" 2>"$tmp/$dev.err" || {
            echo "| $name | $dev failed: $(tail -1 "$tmp/$dev.err") | | | |"
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
    tps() { grep -o 'generated: [0-9]* tokens, [0-9.]* t/s' "$1" | awk '{print $4}'; }
    echo "| $name | ${common#* } | ${common% *} | $(tps "$tmp/cpu.err") | $(tps "$tmp/gpu.err") |"
done
