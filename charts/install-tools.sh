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
# Kubernetes minor the project targets (k8s-openapi v1_34, e2e pins 1.34.x).
# helm's release Makefile stamps its client-go minor into the default
# capabilities; without it `helm template` assumes Kubernetes 1.20.
KUBERNETES_MINOR="${KUBERNETES_MINOR:-34}"
BIN_DIR="${SAINT_TOOLS_BIN:-$HOME/.cache/saint/bin}"
HELM="$BIN_DIR/helm"
STAMP="$BIN_DIR/.helm-version"

mkdir -p "$BIN_DIR"

build_key="$HELM_VERSION kubernetes-1.$KUBERNETES_MINOR"
if [[ -x "$HELM" && -f "$STAMP" && "$(cat "$STAMP")" == "$build_key" ]]; then
    echo "$HELM"
    exit 0
fi

if ! command -v go >/dev/null 2>&1; then
    echo "install-tools: go is not on PATH; cannot build helm $HELM_VERSION" >&2
    exit 1
fi

echo "install-tools: building helm $HELM_VERSION into $BIN_DIR (first run only)" >&2
# CGO off: a static binary that does not depend on the build machine's libc.
# The same stamps helm's own release build sets (its Makefile's LDFLAGS).
ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
for package in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
    ldflags+=" -X $package.k8sVersionMajor=1 -X $package.k8sVersionMinor=$KUBERNETES_MINOR"
done
CGO_ENABLED=0 GOBIN="$BIN_DIR" GOFLAGS="-buildvcs=false" \
    go install -ldflags "$ldflags" "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" >&2
"$HELM" version --short >&2
echo "$build_key" >"$STAMP"
echo "$HELM"
