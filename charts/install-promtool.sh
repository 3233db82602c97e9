#!/usr/bin/env bash
# Builds promtool (Prometheus's rule and metrics checker) from its Go module with
# the machine's Go toolchain and caches it as ~/.cache/saint/bin/promtool-<version>.
# Idempotent: a cached binary is reused without calling go at all. Prints the path
# of the promtool binary last.
#
# Why build instead of download: prebuilt release archives cannot be fetched
# here, but the Go module proxy can be reached. The module version v0.3XY.Z is
# Prometheus 3.XY.Z (Prometheus tags its Go module that way).
set -euo pipefail

PROMETHEUS_MODULE_VERSION="${PROMETHEUS_MODULE_VERSION:-v0.316.0}"
BIN_DIR="${SAINT_TOOLS_BIN:-$HOME/.cache/saint/bin}"
PROMTOOL="$BIN_DIR/promtool-$PROMETHEUS_MODULE_VERSION"

if [[ -x "$PROMTOOL" ]]; then
    echo "$PROMTOOL"
    exit 0
fi

if ! command -v go >/dev/null 2>&1; then
    echo "install-promtool: go is not on PATH; cannot build promtool $PROMETHEUS_MODULE_VERSION" >&2
    exit 1
fi

mkdir -p "$BIN_DIR"
echo "install-promtool: building promtool $PROMETHEUS_MODULE_VERSION into $BIN_DIR (first run only)" >&2
# Built into a private directory and renamed into place, so an interrupted build
# never leaves a half-written binary under the cached name.
staging="$(mktemp -d "$BIN_DIR/.promtool-build.XXXXXX")"
trap 'rm -rf "$staging"' EXIT
# CGO off: a static binary that does not depend on the build machine's libc.
# remove_all_sd leaves out the service-discovery plugins (AWS, Azure, GCE,
# Kubernetes, ...): the rule and metrics checks never use them, and they are
# most of the build.
# -trimpath as e2e/setup.sh builds: packages both graphs hold at the same version
# then compile once (Go's build cache keys on the flags).
CGO_ENABLED=0 GOBIN="$staging" GOFLAGS="-trimpath -buildvcs=false" GOTOOLCHAIN=local \
    go install -tags remove_all_sd -ldflags "-s -w -X github.com/prometheus/common/version.Version=$PROMETHEUS_MODULE_VERSION" \
    "github.com/prometheus/prometheus/cmd/promtool@$PROMETHEUS_MODULE_VERSION" >&2
"$staging/promtool" --version >&2
mv "$staging/promtool" "$PROMTOOL"
echo "$PROMTOOL"
