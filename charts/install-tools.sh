#!/usr/bin/env bash
# Prints the path of the helm the chart checks use, last on stdout: the one
# e2e/setup.sh builds with the control plane (pinned by e2e/tools/go.mod, stamped
# with the Kubernetes minor it targets), so lint, template and the e2e install run
# one helm and the Go build compiles it once. Idempotent: warm, it only checks.
#
# Why build instead of download: prebuilt binaries cannot be fetched here, but
# the Go module proxy can be reached.
set -euo pipefail

repository_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$repository_root/e2e/setup.sh" >&2
helm="$(bash "$repository_root/e2e/setup.sh" --print-bin-dir)/helm"
"$helm" version --short >&2
echo "$helm"
