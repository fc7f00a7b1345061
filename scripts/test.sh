#!/usr/bin/env bash
# The whole test suite: fetches the test models (idempotent), then runs every
# workspace test. The parity tests compare against committed llama.cpp fixtures.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
scripts/fetch-models.sh
cargo test --workspace "$@"
