#!/usr/bin/env bash
# Runs the tests whose results depend on the CPU kernels again, once with
# the AVX-512 and AVX-VNNI builds switched off (what an AVX2-only core
# runs) and once on the portable kernels, so that a machine with the wide
# builds proves the narrower paths too: the kernel crates' own tests (each
# build against its portable twin) and the parity tests against llama.cpp's
# fixtures, which must give the same bits on every path. Run scripts/test.sh
# first (it fetches the models).
#
# The AVX2 path runs all of them (about 6 minutes on two cores). The
# portable kernels are scalar and some 10x slower: by default that path runs
# the kernel crates and SmolLM2's greedy text and perplexity (about 4
# minutes); KESTREL_PORTABLE_ALL=1 runs every parity test there too (about
# 45 minutes), as a change to a kernel's portable twin deserves.
#
# Usage: scripts/test-kernel-paths.sh [avx2|portable ...]   (default: both)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
configs=("$@")
[ ${#configs[@]} -gt 0 ] || configs=(avx2 portable)
status=0
for c in "${configs[@]}"; do
    case "$c" in
        avx2) env=(KESTREL_NO_AVX512=1 KESTREL_NO_VNNI=1) ;;
        portable) env=(KESTREL_PORTABLE=1) ;;
        *) echo "usage: $0 [avx2|portable ...]" >&2; exit 2 ;;
    esac
    log="$(mktemp)"
    echo "== kernel path '$c': ${env[*]} ==" >&2
    parity=(--test greedy_parity --test logit_parity --test perplexity)
    crates=(-p kestrel-quant -p kestrel-cpu -p kestrel-engine)
    filter=()
    if [ "$c" = portable ] && [ "${KESTREL_PORTABLE_ALL:-0}" != 1 ]; then
        parity=(--test greedy_parity --test perplexity)
        crates=(-p kestrel-quant -p kestrel-cpu)
        filter=(smollm2_matches_llama_cpp smollm2_matches_llama_perplexity)
    fi
    {
        failed=0
        env "${env[@]}" cargo test --no-fail-fast "${crates[@]}" || failed=1
        env "${env[@]}" cargo test --no-fail-fast -p kestrel-cli "${parity[@]}" -- "${filter[@]}" ||
            failed=1
        exit "$failed"
    } 2>&1 | tee "$log" || status=1
    python3 scripts/test-summary.py "$log" "$c"
    rm -f "$log"
done
exit "$status"
