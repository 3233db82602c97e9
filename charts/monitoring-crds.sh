#!/usr/bin/env bash
# Prints the directory holding the Prometheus Operator's CRDs
# (monitoring.coreos.com: ServiceMonitor, PodMonitor, PrometheusRule, ...), the
# schemas charts/check-monitoring.py validates the chart's monitoring objects
# against. They ship in the operator's Go module (example/prometheus-operator-crd),
# so the Go module proxy serves them; once in the module cache, nothing is fetched.
set -euo pipefail

PROMETHEUS_OPERATOR_VERSION="${PROMETHEUS_OPERATOR_VERSION:-v0.85.0}"
module="github.com/prometheus-operator/prometheus-operator@$PROMETHEUS_OPERATOR_VERSION"
directory="$(go env GOMODCACHE)/$module/example/prometheus-operator-crd"

if [[ ! -f "$directory/monitoring.coreos.com_prometheusrules.yaml" ]]; then
    echo "monitoring-crds: downloading $module (first run only)" >&2
    # Run outside any module: `go mod download module@version` then needs no go.mod.
    (cd / && go mod download "$module") >&2
fi
if [[ ! -f "$directory/monitoring.coreos.com_prometheusrules.yaml" ]]; then
    echo "monitoring-crds: $module has no CRDs under example/prometheus-operator-crd" >&2
    exit 1
fi
echo "$directory"
