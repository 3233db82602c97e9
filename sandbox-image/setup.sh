#!/bin/sh
# Installs what the local sandbox needs on this machine: bubblewrap (Debian
# `bubblewrap`), then checks it can create the namespaces the sandbox uses.
# Idempotent; run it before the tests (test.sh) and before a local bot starts.
set -eu
if ! command -v bwrap >/dev/null 2>&1; then
    if [ "$(id -u)" -ne 0 ]; then
        echo "sandbox-image/setup.sh: bubblewrap is missing; install it: sudo apt-get install bubblewrap" >&2
        exit 1
    fi
    apt-get install -y --no-install-recommends bubblewrap >/dev/null 2>&1 \
        || { apt-get update >/dev/null && apt-get install -y --no-install-recommends bubblewrap >/dev/null; }
fi
# The same namespaces and flags the local backend uses; a failure here means exec
# would fail closed, so say why now.
if ! output=$(bwrap --unshare-all --unshare-user --disable-userns --die-with-parent \
        --cap-drop ALL --ro-bind / / true 2>&1); then
    echo "sandbox-image/setup.sh: bubblewrap cannot create the sandbox namespaces: $output" >&2
    exit 1
fi
echo "bubblewrap $(bwrap --version | cut -d' ' -f2) ready"
