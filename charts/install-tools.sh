#!/usr/bin/env bash
# Builds the chart tooling (helm) from its Go module with the machine's Go
# toolchain and caches it under ~/.cache/saint/bin. Idempotent: a cached binary
# of the pinned version is reused. Prints the path of the helm binary last.
#
# Pinned to the same helm as e2e/tools/go.mod so lint and the e2e install agree.
# Why build instead of download: prebuilt binaries cannot be fetched here, but
# the Go module proxy can be reached.
set -euo pipefail

HELM_VERSION="${HELM_VERSION:-v3.19.5}"
BIN_DIR="${SAINT_TOOLS_BIN:-$HOME/.cache/saint/bin}"
HELM="$BIN_DIR/helm"
STAMP="$BIN_DIR/.helm-version"

mkdir -p "$BIN_DIR"

if [[ -x "$HELM" && -f "$STAMP" && "$(cat "$STAMP")" == "$HELM_VERSION" ]]; then
    echo "$HELM"
    exit 0
fi

if ! command -v go >/dev/null 2>&1; then
    echo "install-tools: go is not on PATH; cannot build helm $HELM_VERSION" >&2
    exit 1
fi

echo "install-tools: building helm $HELM_VERSION into $BIN_DIR (first run only)" >&2
# CGO off: a static binary that does not depend on the build machine's libc.
CGO_ENABLED=0 GOBIN="$BIN_DIR" GOFLAGS="-buildvcs=false" \
    go install "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" >&2
"$HELM" version --short >&2
echo "$HELM_VERSION" >"$STAMP"
echo "$HELM"
