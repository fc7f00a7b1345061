#!/usr/bin/env bash
# The whole test suite: fetches the test models (idempotent), installs the
# openai and anthropic packages and (as root, where missing) Mesa's software Vulkan, then
# runs every workspace test, then structured output on the real binary (a subset of the
# schema corpus on each model, llama.cpp's GBNF grammars). The parity tests compare against
# committed llama.cpp fixtures.
# Every test binary runs even when one fails (--no-fail-fast); the run ends
# with the counts and the name of each failed test. Extra arguments go to
# `cargo test`.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
scripts/fetch-models.sh
# The GPU tests run on Mesa's software Vulkan (lavapipe) where there is no GPU.
if ! ls /usr/share/vulkan/icd.d/*.json >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        apt-get install -y -q mesa-vulkan-drivers libvulkan1 >/dev/null ||
            { apt-get update -q >/dev/null && apt-get install -y -q mesa-vulkan-drivers libvulkan1 >/dev/null; }
    else
        echo "warning: no Vulkan driver found; the GPU tests need one (apt-get install mesa-vulkan-drivers libvulkan1)" >&2
    fi
fi
PIP_BREAK_SYSTEM_PACKAGES=1 PIP_ROOT_USER_ACTION=ignore python3 -m pip install --quiet --disable-pip-version-check -r tests/openai/requirements.txt
# llama.cpp's grammars (grammars/*.gbnf, read at test time, never committed):
# the peer's source tree only, no build.
scripts/build-llama-cpp.sh --source >/dev/null ||
    echo "warning: the llama.cpp source could not be fetched; the GBNF tests will skip" >&2
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
status=0
cargo test --workspace --no-fail-fast "$@" 2>&1 | tee "$log" || status=$?
python3 scripts/test-summary.py "$log" "all"
# The binary the tests just built (the test profile is optimized).
export KESTREL_BIN="$root/target/debug/kestrel"
python3 scripts/check-structured.py --subset 8 || status=1
python3 scripts/check-gbnf.py --models qwen2 --allow-limit || status=1
exit "$status"
