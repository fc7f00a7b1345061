#!/usr/bin/env bash
# The whole test suite: fetches the test models (idempotent), then runs every
# workspace test. The parity tests compare against committed llama.cpp fixtures.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
scripts/fetch-models.sh
PIP_BREAK_SYSTEM_PACKAGES=1 PIP_ROOT_USER_ACTION=ignore python3 -m pip install --quiet --disable-pip-version-check -r tests/openai/requirements.txt
cargo test --workspace "$@"
