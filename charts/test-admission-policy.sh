#!/usr/bin/env bash
# Runs the sandbox admission policy's cases (charts/admission-cases.py) against
# a real API server: installs only the chart's ValidatingAdmissionPolicy and
# binding, then creates Jobs as a bot's agent ServiceAccount with
# `--dry-run=server`.
#
# With KUBECONFIG set, uses that cluster (admin credentials). Without it, starts
# the e2e control plane (e2e/setup.sh builds and caches the binaries; reused
# when warm) in a temporary directory and stops it on exit, also on failure.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"

helm="$(charts/install-tools.sh | tail -n 1)"
release_namespace=saint-system
sandbox_image="ghcr.io/saint-work/saint-sandbox:$(awk '$1 == "appVersion:" {gsub(/"/, "", $2); print $2}' charts/saint/Chart.yaml)"

started_here=false
run_dir=""
cleanup() {
	if $started_here; then
		control_plane_stop
		rm -rf "$run_dir"
	fi
}
trap cleanup EXIT

if [[ -z "${KUBECONFIG:-}" ]]; then
	bash e2e/setup.sh >&2
	bin_dir="$(bash e2e/setup.sh --print-bin-dir)"
	# shellcheck source=../e2e/control-plane.sh
	source e2e/control-plane.sh
	run_dir="$(mktemp -d "${TMPDIR:-/tmp}/saint-admission.XXXXXX")"
	started_here=true
	control_plane_start "$bin_dir" "$run_dir"
	kubectl="$bin_dir/kubectl"
else
	kubectl="$(command -v kubectl)"
fi

"$helm" template saint charts/saint --namespace "$release_namespace" \
	--show-only templates/admission-policy.yaml |
	"$kubectl" apply --server-side --field-manager=saint-admission-test -f -

status=0
/usr/bin/python3 charts/admission-cases.py --kubectl "$kubectl" --sandbox-image "$sandbox_image" --verbose || status=$?

"$helm" template saint charts/saint --namespace "$release_namespace" \
	--show-only templates/admission-policy.yaml |
	"$kubectl" delete --ignore-not-found -f - >/dev/null
exit "$status"
