#!/usr/bin/env bash
# The whole test suite: fetches the test models (idempotent), installs the
# openai and anthropic packages and (as root, where missing) Mesa's software Vulkan, then
# runs every workspace test. The parity tests compare against committed llama.cpp fixtures.
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
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
status=0
cargo test --workspace --no-fail-fast "$@" 2>&1 | tee "$log" || status=$?
python3 scripts/test-summary.py "$log" "all"
exit "$status"
