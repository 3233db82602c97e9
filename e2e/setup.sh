#!/usr/bin/env bash
# Builds the control plane the end-to-end suite runs against, from source:
# kube-apiserver, kube-controller-manager, kubectl, etcd and helm, plus the
# node's kubelet, kube-proxy and kube-scheduler (e2e/node.sh), all pinned by
# e2e/tools/go.mod. Binaries land in ~/.cache/saint/k8s-<version>/bin/ and are
# reused while that directory holds a complete build (idempotent, keyed by
# version and go.sum digest). The same directory gets `kstatus` (cli-utils' status
# library as GitOps tools run it, e2e/tools-kstatus/). Nothing prebuilt is
# downloaded: only Go modules, through the configured Go module proxy.
#
# Usage: e2e/setup.sh            build if missing, print the bin directory
#        e2e/setup.sh --print-bin-dir   print the bin directory only
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
tools_dir="$here/tools"

# The versions are read from go.mod so there is one place to bump them.
kubernetes_version="$(awk '$1 == "k8s.io/kubernetes" && $2 ~ /^v/ {print $2; exit}' "$tools_dir/go.mod")"
helm_version="$(awk '$1 == "helm.sh/helm/v3" && $2 ~ /^v/ {print $2; exit}' "$tools_dir/go.mod")"
if [[ -z "$kubernetes_version" || -z "$helm_version" ]]; then
	echo "setup.sh: failed to read the pinned versions from $tools_dir/go.mod" >&2
	exit 1
fi

# Key by every pinned version (and the go.sum digest) so a bump never reuses
# binaries built from other sources.
# This script is an input too: it holds the build flags.
tools_digest="$(cat "$tools_dir/go.mod" "$tools_dir/go.sum" "${BASH_SOURCE[0]}" | sha256sum | cut -c1-12)"
cache_root="${SAINT_CACHE_DIR:-$HOME/.cache/saint}"
install_dir="$cache_root/k8s-$kubernetes_version"
bin_dir="$install_dir/bin"
stamp="$install_dir/complete-$tools_digest"
control_plane_binaries=(kube-apiserver kube-controller-manager kubectl etcd helm)
node_binaries=(kubelet kube-proxy kube-scheduler)
binaries=("${control_plane_binaries[@]}" "${node_binaries[@]}")

if [[ "${1:-}" == "--print-bin-dir" ]]; then
	echo "$bin_dir"
	exit 0
fi

all_built() {
	[[ -f "$stamp" ]] || return 1
	local binary
	for binary in "${binaries[@]}"; do
		[[ -x "$bin_dir/$binary" ]] || return 1
	done
}

# The kstatus program of e2e/tests/kstatus.rs (cli-utils' status library, pinned by
# e2e/tools-kstatus/go.mod), built into the same bin directory and stamped by a digest
# of its own module, so it is rebuilt when that changes or the control plane is.
kstatus_dir="$here/tools-kstatus"
kstatus_digest="$(cat "$kstatus_dir/go.mod" "$kstatus_dir/go.sum" "$kstatus_dir/main.go" | sha256sum | cut -c1-12)"
kstatus_stamp="$bin_dir/kstatus-$kstatus_digest"
build_kstatus() {
	if [[ -f "$kstatus_stamp" && -x "$bin_dir/kstatus" ]]; then
		return 0
	fi
	echo "setup.sh: building kstatus (sigs.k8s.io/cli-utils) into $bin_dir"
	(
		cd "$kstatus_dir"
		GOTOOLCHAIN=local GOFLAGS="-trimpath -buildvcs=false -mod=readonly" CGO_ENABLED=0 \
			go build -ldflags "-s -w" -o "$bin_dir/kstatus.partial" .
	)
	mv "$bin_dir/kstatus.partial" "$bin_dir/kstatus"
	rm -f "$bin_dir"/kstatus-*
	touch "$kstatus_stamp"
}

if all_built; then
	build_kstatus
	echo "setup.sh: control plane $kubernetes_version already built in $bin_dir"
	exit 0
fi

if ! command -v go > /dev/null; then
	echo "setup.sh: failed to find the Go toolchain (go) on PATH; it is needed to build the control plane" >&2
	exit 1
fi

# Never let go.mod fetch another toolchain; build with the one installed.
export GOTOOLCHAIN=local
export GOFLAGS="-trimpath -buildvcs=false -mod=readonly"
export CGO_ENABLED=0

build_date="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
minor="${kubernetes_version#v1.}"
minor="${minor%%.*}"
# The same version stamps Kubernetes' own build sets (hack/lib/version.sh), so
# the API server reports v1.34.x and helm's kubeVersion checks work.
version_flags=""
for package in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
	version_flags+=" -X $package.gitVersion=$kubernetes_version"
	version_flags+=" -X $package.gitMajor=1 -X $package.gitMinor=$minor"
	version_flags+=" -X $package.gitTreeState=clean -X $package.buildDate=$build_date"
done
version_flags+=" -X helm.sh/helm/v3/internal/version.version=$helm_version"
# helm's release build stamps the Kubernetes version it targets into its lint rules
# and default capabilities; without it `helm lint`/`template` assume Kubernetes 1.20.
# This helm is also the chart checks' (charts/install-tools.sh prints it).
for package in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
	version_flags+=" -X $package.k8sVersionMajor=1 -X $package.k8sVersionMinor=$minor"
done

staging_dir="$install_dir/bin.partial"
rm -rf "$staging_dir"
mkdir -p "$staging_dir"

echo "setup.sh: building Kubernetes $kubernetes_version (control plane and node), etcd and helm $helm_version with $(go version | awk '{print $3}') into $bin_dir"
started=$(date +%s)
(
	cd "$tools_dir"
	# One go build for all of them: the packages they share compile once and the
	# links run in parallel. etcd's main package is its server module's root
	# (go.etcd.io/etcd/server/v3), so go build names it "server" (renamed below).
	go build -ldflags "-s -w $version_flags" -o "$staging_dir/" \
		k8s.io/kubernetes/cmd/kube-apiserver \
		k8s.io/kubernetes/cmd/kube-controller-manager \
		k8s.io/kubernetes/cmd/kubectl \
		helm.sh/helm/v3/cmd/helm \
		go.etcd.io/etcd/server/v3 \
		k8s.io/kubernetes/cmd/kubelet \
		k8s.io/kubernetes/cmd/kube-proxy \
		k8s.io/kubernetes/cmd/kube-scheduler
	mv "$staging_dir/server" "$staging_dir/etcd"
)
finished=$(date +%s)

for binary in "${binaries[@]}"; do
	if [[ ! -x "$staging_dir/$binary" ]]; then
		echo "setup.sh: failed to build $binary (missing from $staging_dir)" >&2
		exit 1
	fi
done
"$staging_dir/kube-apiserver" --version
# awk reads all of etcd's output: `head -1` would close the pipe early, and
# under pipefail etcd's SIGPIPE (exit 141) would fail a complete build.
"$staging_dir/etcd" --version | awk 'NR == 1'
"$staging_dir/helm" version --short
"$staging_dir/kubelet" --version

rm -rf "$bin_dir"
mv "$staging_dir" "$bin_dir"
rm -f "$install_dir"/complete-*
touch "$stamp"
build_kstatus
echo "setup.sh: built in $((finished - started)) s; $(du -sh "$bin_dir" | cut -f1) in $bin_dir"
