#!/usr/bin/env bash
# Benchmarks Kestrel against the llama.cpp peer in the same run: for each
# model, `llama-bench` and then `kestrel bench` with the same prompt length,
# generation length, threads and repetitions, and prints one markdown table of
# tokens/s with the ratio kestrel / llama.cpp.
#
# Usage: scripts/bench-vs-llama-cpp.sh [-t THREADS] [-r REPS] [-p N_PROMPT] [-n N_GEN] [MODEL...]
#   MODEL is smollm2, gemma3, qwen2 (the test models, fetched when missing)
#   or a path to a .gguf file; default: all three test models.
# The same settings can come from the environment: THREADS (default 2),
# REPS (5), N_PROMPT (512), N_GEN (128), MODELS (space-separated);
# PAIRED (3) sets kestrel bench's --bw-paired rounds (0: none).
# KESTREL_BIN runs that kestrel binary instead of building this tree's
# (to set an older build beside this one in the same session).
# -p/-n take llama-bench's comma lists; 0 skips that test.
# The table goes to stdout; progress and the tools' logs go to stderr.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

threads="${THREADS:-2}"
reps="${REPS:-5}"
n_prompt="${N_PROMPT:-512}"
n_gen="${N_GEN:-128}"
models="${MODELS:-smollm2 gemma3 qwen2}"
paired="${PAIRED:-3}"

usage() { sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 1; }
while getopts "t:r:p:n:h" opt; do
  case "$opt" in
    t) threads="$OPTARG" ;;
    r) reps="$OPTARG" ;;
    p) n_prompt="$OPTARG" ;;
    n) n_gen="$OPTARG" ;;
    *) usage ;;
  esac
done
shift $((OPTIND - 1))
if [ $# -gt 0 ]; then models="$*"; fi

for v in "$threads" "$reps"; do
  [[ "$v" =~ ^[1-9][0-9]*$ ]] || { echo "error: threads and reps must be positive integers, got '$v'" >&2; exit 1; }
done
[[ "$paired" =~ ^[0-9]+$ ]] || { echo "error: PAIRED must be a whole number, got '$paired'" >&2; exit 1; }
for v in "$n_prompt" "$n_gen"; do
  [[ "$v" =~ ^[0-9]+(,[0-9]+)*$ ]] || { echo "error: -p/-n take numbers separated by commas, got '$v'" >&2; exit 1; }
done

# Resolve model names to files, fetching the test models that are missing.
files=()
for m in $models; do
  case "$m" in
    smollm2) f=SmolLM2-135M-Instruct.Q4_1.gguf ;;
    gemma3) f=gemma-3-270m-q4_k_m.gguf ;;
    qwen2) f=qwen2.5-coder-0.5b-q4_k_m.gguf ;;
    *.gguf)
      [ -f "$m" ] || { echo "error: no such model file: $m" >&2; exit 1; }
      files+=("$m"); continue ;;
    *) echo "error: unknown model '$m' (smollm2, gemma3, qwen2 or a .gguf path)" >&2; exit 1 ;;
  esac
  scripts/fetch-models.sh "$m" >&2
  files+=("models/$f")
done

[ ${#files[@]} -gt 0 ] || { echo "error: no models selected" >&2; exit 1; }

bin="$(scripts/build-llama-cpp.sh | tail -1)"
if [ -n "${KESTREL_BIN:-}" ]; then
  kestrel="$KESTREL_BIN"
else
  echo "building kestrel (release)..." >&2
  cargo build --release -p kestrel-cli >&2
  kestrel="$root/target/release/kestrel"
fi

out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT

# Runs a tool writing JSON to $1; on failure shows its log and stops.
run_json() {
  local dest="$1"; shift
  if ! "$@" >"$dest" 2>"$dest.log"; then
    cat "$dest.log" >&2
    echo "error: failed: $*" >&2
    exit 1
  fi
}

i=0
for f in "${files[@]}"; do
  i=$((i + 1))
  common=(-m "$f" -p "$n_prompt" -n "$n_gen" -t "$threads" -r "$reps" -o json)
  echo "[$i/${#files[@]}] $(basename "$f"): llama-bench" >&2
  run_json "$out/$i.llama.json" "$bin/llama-bench" "${common[@]}"
  echo "[$i/${#files[@]}] $(basename "$f"): kestrel bench" >&2
  run_json "$out/$i.kestrel.json" "$kestrel" bench "${common[@]}" --bw-paired "$paired"
  echo "$f" >"$out/$i.name"
done

python3 - "$out" "$i" "$threads" "$reps" <<'EOF'
import json, os, sys

out, count, threads, reps = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]

def test_name(t):
    p, n = t["n_prompt"], t["n_gen"]
    return f"pp{p}" if n == 0 else f"tg{n}" if p == 0 else f"pp{p}+tg{n}"

def by_test(path):
    with open(path) as fh:
        return {test_name(t): t for t in json.load(fh)}

rows, notes, bws = [], [], []
for i in range(1, count + 1):
    name = os.path.basename(open(f"{out}/{i}.name").read().strip())
    llama = by_test(f"{out}/{i}.llama.json")
    kestrel = by_test(f"{out}/{i}.kestrel.json")
    for test, k in kestrel.items():
        l = llama.get(test)
        lt = f"{l['avg_ts']:.2f} ± {l['stddev_ts']:.2f}" if l else "n/a"
        kt = f"{k['avg_ts']:.2f} ± {k['stddev_ts']:.2f}"
        ratio = f"{k['avg_ts'] / l['avg_ts']:.2f}" if l and l["avg_ts"] > 0 else "n/a"
        rows.append((name, test, lt, kt, ratio))
        if k.get("decode_gbs") is not None:
            pct = k.get("decode_bw_pct")
            pct = f", {pct:.1f}% of bandwidth" if pct is not None else ""
            paired = k.get("decode_bw_paired_pct")
            if paired is not None:
                n = len(k["decode_bw_paired_pcts"])
                pct += f"; {paired:.1f}% of the probes around each run (median of {n} paired rounds)"
            notes.append(f"{name} {test}: kestrel decode reads {k['decode_gbs']:.2f} GB/s{pct}")
    bws += [k["mem_bw_gbs"] for k in kestrel.values() if k.get("mem_bw_gbs")]
if bws:
    notes.insert(0, f"memory read bandwidth (kestrel's probe, best run): {max(bws):.2f} GB/s")

header = ("model", "test", "llama.cpp t/s", "kestrel t/s", "ratio (kestrel/llama.cpp)")
width = [max(len(r[c]) for r in rows + [header]) for c in range(len(header))]
def line(cells):
    return "| " + " | ".join(c.ljust(w) if j < 2 else c.rjust(w)
                             for j, (c, w) in enumerate(zip(cells, width))) + " |"
print(f"threads: {threads}, repetitions: {reps}\n")
print(line(header))
print("| " + " | ".join("-" * (w - 1) + ("-" if j < 2 else ":") for j, w in enumerate(width)) + " |")
for r in rows:
    print(line(r))
if notes:
    print()
    for n in notes:
        print(n)
EOF
