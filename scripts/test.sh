#!/usr/bin/env bash
# The whole test suite: fetches the test models (idempotent), installs the
# openai and anthropic packages and (as root, where missing) Mesa's software Vulkan, then
# runs every workspace test. The parity tests compare against committed llama.cpp fixtures.
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
cargo test --workspace "$@"
