#!/usr/bin/env bash
# shellcheck disable=SC2317 # cleanup runs from the EXIT trap
# Checks the chart against a real API server:
# 1. `helm install` of the whole chart: the API server validates every
#    rendered object (CRDs, RBAC, Deployment, admission policy), and the
#    operator's pod is admitted in a namespace enforcing Pod Security
#    "restricted";
# 2. the examples (charts/saint/examples/) applied with `--dry-run=server` to a
#    namespace enforcing Pod Security "restricted": the CRDs' OpenAPI schemas
#    and CEL rules accept them; likewise the chart's optional monitoring
#    objects, against the Prometheus Operator's CRDs;
# 3. the sandbox admission policy's cases (charts/admission-cases.py): Jobs
#    created as a bot's agent ServiceAccount with `--dry-run=server`, so
#    authentication, RBAC and every admission plugin run;
# 4. the real saint-operator binary running as the chart's ServiceAccount
#    (charts/operator-with-chart-rbac.py): it reconciles the example bot with
#    no Forbidden error, cannot read Secrets, and the sandbox Job it renders is
#    admitted for the bot's agent; then again with watchNamespace set (Role
#    in one namespace instead of the ClusterRole).
#
# Without KUBECONFIG: starts the e2e control plane (e2e/setup.sh builds and
# caches the binaries; reused when warm) in a temporary directory, runs 1-4,
# and stops everything on exit, also on failure.
# With KUBECONFIG set (admin credentials): someone's cluster, so only 3: applies
# the policy and its binding, runs the cases, and removes them again.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"

helm="$(charts/install-tools.sh | tail -n 1)"
# The chart under test (a directory or a packaged .tgz); the repository's by default.
chart="${SAINT_CHART:-charts/saint}"
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
	# shellcheck source=SCRIPTDIR/../e2e/control-plane.sh
	source e2e/control-plane.sh
	run_dir="$(mktemp -d "${TMPDIR:-/tmp}/saint-admission.XXXXXX")"
	started_here=true
	control_plane_start "$bin_dir" "$run_dir"
	kubectl="$bin_dir/kubectl"
else
	kubectl="$(command -v kubectl)"
fi

if $started_here; then
	# A throwaway cluster: install the whole chart, so the API server validates
	# every rendered object (CRDs, RBAC, Deployment, policy) as a user's would.
	# The release namespace enforces Pod Security "restricted" too: the
	# operator's own pod must be admitted under it.
	"$kubectl" create namespace "$release_namespace"
	"$kubectl" label namespace "$release_namespace" pod-security.kubernetes.io/enforce=restricted
	"$helm" install saint "$chart" --namespace "$release_namespace" \
		--kubeconfig "$KUBECONFIG" --wait=false
	# No kubelet runs here, but the ReplicaSet controller creating the pod shows
	# Pod Security admitted it (a refused pod leaves only a FailedCreate event).
	deadline=$((SECONDS + 60))
	until [[ -n "$("$kubectl" -n "$release_namespace" get pods -l app.kubernetes.io/component=operator -o name)" ]]; do
		if ((SECONDS >= deadline)); then
			echo "the operator pod was not created within 60 s; events:" >&2
			"$kubectl" -n "$release_namespace" get events >&2
			exit 1
		fi
		sleep 1
	done
	echo "operator pod admitted under Pod Security \"restricted\": $("$kubectl" -n "$release_namespace" get pods -l app.kubernetes.io/component=operator -o name)"
	for crd in saintbots.saint.work contacts.saint.work roles.saint.work; do
		crd_wait_established "$kubectl" "$crd" 60
	done
	"$kubectl" create namespace saint-examples
	"$kubectl" label namespace saint-examples pod-security.kubernetes.io/enforce=restricted
	echo "examples: server-side dry run (schemas and CEL rules of the installed CRDs)"
	"$kubectl" apply --dry-run=server --namespace saint-examples -f charts/saint/examples/
	# The optional monitoring objects against the Prometheus Operator's own CRDs
	# (from its Go module): the API server checks their schemas and CEL rules.
	monitoring_crds="$(charts/monitoring-crds.sh | tail -n 1)"
	for kind in servicemonitors podmonitors prometheusrules; do
		"$kubectl" apply --server-side -f "$monitoring_crds/monitoring.coreos.com_$kind.yaml" >/dev/null
		crd_wait_established "$kubectl" "$kind.monitoring.coreos.com" 60
	done
	echo "monitoring: ServiceMonitor, PodMonitor, PrometheusRule and dashboard ConfigMap, server-side dry run"
	"$helm" template saint "$chart" --namespace "$release_namespace" \
		--set monitoring.serviceMonitor.enabled=true --set monitoring.podMonitor.enabled=true \
		--set monitoring.prometheusRule.enabled=true --set monitoring.grafanaDashboard.enabled=true \
		--show-only templates/servicemonitor.yaml --show-only templates/podmonitor.yaml \
		--show-only templates/prometheusrule.yaml --show-only templates/grafana-dashboard.yaml |
		"$kubectl" apply --dry-run=server --namespace "$release_namespace" -f -
else
	# Someone's cluster: touch only the policy and its binding, and remove them after.
	"$helm" template saint "$chart" --namespace "$release_namespace" \
		--show-only templates/admission-policy.yaml |
		"$kubectl" apply --server-side --field-manager=saint-admission-test -f -
fi

status=0
/usr/bin/python3 charts/admission-cases.py --kubectl "$kubectl" --sandbox-image "$sandbox_image" --verbose || status=$?

if $started_here && ((status == 0)); then
	echo "operator: the real binary as the chart's ServiceAccount reconciles the example bot"
	# The workspace's test build (e2e/test-build.sh): the same binary the other sections run.
	operator="$(bash e2e/test-build.sh --bin saint-operator)"
	/usr/bin/python3 charts/operator-with-chart-rbac.py --kubectl "$kubectl" \
		--operator "$operator" --ca-file "$SAINT_E2E_CA_FILE" \
		--examples charts/saint/examples --run-dir "$run_dir" || status=$?
fi
if $started_here && ((status == 0)); then
	echo "operator: the same with watchNamespace set (a Role in one namespace instead of the ClusterRole)"
	"$kubectl" create namespace saint-rbac-single
	"$helm" upgrade saint "$chart" --namespace "$release_namespace" --kubeconfig "$KUBECONFIG" \
		--reuse-values --set watchNamespace=saint-rbac-single --wait=false >/dev/null
	if "$kubectl" get clusterrole saint-operator >/dev/null 2>&1; then
		echo "watchNamespace set, yet the ClusterRole saint-operator is still there" >&2
		status=1
	fi
	/usr/bin/python3 charts/operator-with-chart-rbac.py --kubectl "$kubectl" \
		--operator "$operator" --ca-file "$SAINT_E2E_CA_FILE" \
		--examples charts/saint/examples --run-dir "$run_dir" \
		--namespace saint-rbac-single --watch-namespace || status=$?
fi

if ! $started_here; then
	"$helm" template saint "$chart" --namespace "$release_namespace" \
		--show-only templates/admission-policy.yaml |
		"$kubectl" delete --ignore-not-found -f - >/dev/null
fi
exit "$status"
