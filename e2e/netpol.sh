#!/usr/bin/env bash
# NetworkPolicy enforcement for the end-to-end node: kube-router's network-policy
# firewall (iptables + ipset), built from its Go module pinned in
# e2e/tools-netpol/go.mod, plus the tiny static `probe` program and its image
# that e2e/tests/network_policy.rs runs in pods.
#
# Sourced by e2e/run.sh (after node_start, with KUBECONFIG set), or run:
#   e2e/netpol.sh build          build if missing (idempotent), print the directory
#   e2e/netpol.sh --print-dir    print the directory only
#
# Functions: netpol_build, netpol_start <run-dir>, netpol_stop.
# Cache: ~/.cache/saint/kube-router-<version>/ (or $SAINT_CACHE_DIR), stamped by
# a digest of go.mod, go.sum and the probe's source: bin/kube-router, bin/probe,
# probe.oci.tar (an OCI archive whose index names $netpol_probe_image).
# After netpol_start: SAINT_E2E_NETPOL_PROBE_IMAGE (imported into the node's
# containerd), SAINT_E2E_NETPOL_LOG (kube-router's log).
#
# Only kube-router's firewall runs (--run-firewall, no router and no service
# proxy): kube-proxy keeps Services, the CNI bridge keeps routing. Its rules go
# into the filter table's INPUT, FORWARD and OUTPUT through KUBE-ROUTER-* chains,
# so pod-to-pod traffic over the bridge is filtered only when br_netfilter
# hands bridged packets to iptables (net.bridge.bridge-nf-call-iptables=1).

netpol_here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
netpol_tools_dir="$netpol_here/tools-netpol"
netpol_node_name="${SAINT_E2E_NODE_NAME:-saint-e2e-node}"
netpol_pid=""
netpol_log=""

# Version and cache paths, read from go.mod so there is one place to bump them.
netpol_paths() {
	netpol_version="$(awk '$1 == "github.com/cloudnativelabs/kube-router/v2" && $2 ~ /^v/ {print $2; exit}' "$netpol_tools_dir/go.mod")"
	if [[ -z "$netpol_version" ]]; then
		echo "netpol.sh: failed to read kube-router's version from $netpol_tools_dir/go.mod" >&2
		return 1
	fi
	# The probe's source is an input too: a change to it must rebuild its image.
	netpol_digest="$(cat "$netpol_tools_dir/go.mod" "$netpol_tools_dir/go.sum" "$netpol_tools_dir/probe/main.go" |
		sha256sum | cut -c1-12)"
	netpol_dir="${SAINT_CACHE_DIR:-$HOME/.cache/saint}/kube-router-$netpol_version"
	netpol_stamp="$netpol_dir/complete-$netpol_digest"
	# Tagged by the input digest: a rebuilt probe is a new reference, never a
	# stale image the node still holds under the same name.
	netpol_probe_image="saint.work/e2e/netpol-probe:$netpol_digest"
}

# iptables and ipset are what kube-router drives (iptables-save/-restore, ipset
# save/restore); Debian 12 ships iptables but not always ipset.
netpol_require_tools() {
	local missing=()
	command -v iptables-restore > /dev/null || missing+=(iptables)
	command -v ipset > /dev/null || missing+=(ipset)
	if ((${#missing[@]} == 0)); then
		return 0
	fi
	echo "netpol.sh: installing ${missing[*]} from Debian's packages"
	if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"; }; then
		echo "netpol.sh: failed to install ${missing[*]} (apt-get); kube-router needs them" >&2
		return 1
	fi
}

# Writes an OCI image archive holding only the static probe at /probe, run as
# nobody (65534), whose index names $netpol_probe_image (containerd's
# io.containerd.image.name annotation, so `ctr images import` yields exactly that
# reference). Deterministic: fixed owners, mode and mtime.
netpol_pack_probe_image() {
	local probe="$1" archive="$2"
	local work
	work="$(mktemp -d "${TMPDIR:-/tmp}/netpol-image.XXXXXX")"
	mkdir -p "$work/rootfs" "$work/layout/blobs/sha256"
	install -m 0755 "$probe" "$work/rootfs/probe"
	tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 --format=posix \
		--pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime \
		-C "$work/rootfs" -cf "$work/layer.tar" probe
	gzip -n -9 < "$work/layer.tar" > "$work/layer.tar.gz"
	local diff_id layer_digest layer_size
	diff_id="$(sha256sum < "$work/layer.tar" | cut -d' ' -f1)"
	layer_digest="$(sha256sum < "$work/layer.tar.gz" | cut -d' ' -f1)"
	layer_size="$(stat -c %s "$work/layer.tar.gz")"
	mv "$work/layer.tar.gz" "$work/layout/blobs/sha256/$layer_digest"

	printf '{"architecture":"amd64","os":"linux","config":{"User":"65534:65534","Entrypoint":["/probe"],"Cmd":["serve","8080"]},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]}}' \
		"$diff_id" > "$work/config.json"
	local config_digest config_size
	config_digest="$(sha256sum < "$work/config.json" | cut -d' ' -f1)"
	config_size="$(stat -c %s "$work/config.json")"
	mv "$work/config.json" "$work/layout/blobs/sha256/$config_digest"

	printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:%s","size":%s},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar+gzip","digest":"sha256:%s","size":%s}]}' \
		"$config_digest" "$config_size" "$layer_digest" "$layer_size" > "$work/manifest.json"
	local manifest_digest manifest_size
	manifest_digest="$(sha256sum < "$work/manifest.json" | cut -d' ' -f1)"
	manifest_size="$(stat -c %s "$work/manifest.json")"
	mv "$work/manifest.json" "$work/layout/blobs/sha256/$manifest_digest"

	printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:%s","size":%s,"platform":{"architecture":"amd64","os":"linux"},"annotations":{"io.containerd.image.name":"%s","org.opencontainers.image.ref.name":"%s"}}]}' \
		"$manifest_digest" "$manifest_size" "$netpol_probe_image" "${netpol_probe_image##*:}" > "$work/layout/index.json"
	printf '{"imageLayoutVersion":"1.0.0"}' > "$work/layout/oci-layout"
	tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -C "$work/layout" -cf "$archive" oci-layout index.json blobs
	rm -rf "$work"
}

# Builds kube-router and the probe (static, CGO_ENABLED=0: kube-router drives
# iptables and ipset through their commands and netlink through syscalls) and
# packs the probe's image. Reuses a complete build with the same digest.
netpol_build() {
	netpol_paths || return 1
	netpol_require_tools || return 1
	if [[ -f "$netpol_stamp" && -x "$netpol_dir/bin/kube-router" && -x "$netpol_dir/bin/probe" && -f "$netpol_dir/probe.oci.tar" ]]; then
		echo "netpol.sh: kube-router $netpol_version already built in $netpol_dir"
		return 0
	fi
	if ! command -v go > /dev/null; then
		echo "netpol.sh: failed to find the Go toolchain (go) on PATH; it is needed to build kube-router" >&2
		return 1
	fi
	local staging="$netpol_dir/bin.partial" started finished
	rm -rf "$staging"
	mkdir -p "$staging"
	echo "netpol.sh: building kube-router $netpol_version and the probe with $(go version | awk '{print $3}') into $netpol_dir"
	started=$(date +%s)
	if ! (
		cd "$netpol_tools_dir"
		# Never let go.mod fetch another toolchain; build with the one installed.
		export GOTOOLCHAIN=local GOFLAGS="-trimpath -buildvcs=false -mod=readonly" CGO_ENABLED=0
		# No build date: the same inputs link the same binary, from Go's cache.
		go build -ldflags "-s -w -X github.com/cloudnativelabs/kube-router/v2/pkg/version.Version=$netpol_version" \
			-o "$staging/kube-router" github.com/cloudnativelabs/kube-router/v2/cmd/kube-router
		go build -ldflags "-s -w" -o "$staging/probe" ./probe
	); then
		echo "netpol.sh: failed to build kube-router $netpol_version or the probe (go build in $netpol_tools_dir)" >&2
		return 1
	fi
	finished=$(date +%s)
	"$staging/kube-router" --version
	netpol_pack_probe_image "$staging/probe" "$netpol_dir/probe.oci.tar.partial" || return 1
	rm -rf "${netpol_dir:?}/bin"
	mv "$staging" "$netpol_dir/bin"
	mv "$netpol_dir/probe.oci.tar.partial" "$netpol_dir/probe.oci.tar"
	rm -f "$netpol_dir"/complete-*
	touch "$netpol_stamp"
	echo "netpol.sh: built in $((finished - started)) s; kube-router $(du -h "$netpol_dir/bin/kube-router" | cut -f1), probe image $(du -h "$netpol_dir/probe.oci.tar" | cut -f1)"
}

# br_netfilter: bridged pod-to-pod packets reach iptables only with this on.
netpol_require_bridge_netfilter() {
	local setting=/proc/sys/net/bridge/bridge-nf-call-iptables
	if [[ ! -f "$setting" ]]; then
		echo "netpol.sh: failed to find $setting: the kernel has no br_netfilter, so pod-to-pod traffic over the bridge would bypass NetworkPolicy" >&2
		return 1
	fi
	if [[ "$(cat "$setting")" != 1 ]]; then
		echo 1 > "$setting" || {
			echo "netpol.sh: failed to set $setting to 1" >&2
			return 1
		}
	fi
}

# Imports the probe image into the node's containerd (namespace k8s.io, the
# CRI's), so pods use it with imagePullPolicy: Never.
netpol_import_probe_image() {
	local address="${SAINT_E2E_CONTAINERD_ADDRESS:-/run/containerd/containerd.sock}"
	if ! ctr --address "$address" -n k8s.io images import --all-platforms "$netpol_dir/probe.oci.tar" > /dev/null; then
		echo "netpol.sh: failed to import $netpol_dir/probe.oci.tar into containerd at $address" >&2
		return 1
	fi
	local check
	check="$(ctr --address "$address" -n k8s.io images check "name==$netpol_probe_image")" || return 1
	if [[ "$check" != *complete* ]]; then
		echo "netpol.sh: containerd at $address does not hold $netpol_probe_image after the import" >&2
		return 1
	fi
}

# True once kube-router finished a full sync that was not aborted and its
# top-level chains are in place.
netpol_synced() {
	local forward
	grep -q "sync iptables took" "$netpol_log" &&
		! grep -q "Aborting sync" "$netpol_log" &&
		forward="$(iptables -w -S FORWARD 2> /dev/null)" &&
		[[ "$forward" == *"-j KUBE-ROUTER-FORWARD"* ]]
}

# Starts kube-router's firewall against the node and waits for its first full
# sync. Needs KUBECONFIG (admin) and the node registered.
netpol_start() {
	local run_dir="$1"
	if [[ -z "${KUBECONFIG:-}" ]]; then
		echo "netpol.sh: failed to start kube-router: KUBECONFIG is not set (start the control plane first)" >&2
		return 1
	fi
	netpol_build || return 1
	netpol_require_bridge_netfilter || return 1
	netpol_import_probe_image || return 1
	# A killed run leaves ipsets behind (node_start already removed the chains
	# that used them); the sync would adopt them, but a clean start reads better.
	netpol_cleanup || return 1
	mkdir -p "$run_dir/logs"
	netpol_log="$run_dir/logs/kube-router.log"
	# The Service range must be the API server's: kube-router refuses to start
	# without one and lets pods reach addresses in it (kube-proxy's business).
	# No health or metrics listener: readiness is read from the log and the
	# chains, and nothing else of ours should bind ports on the host.
	setsid "$netpol_dir/bin/kube-router" \
		--run-firewall=true --run-router=false --run-service-proxy=false \
		--kubeconfig="$KUBECONFIG" \
		--hostname-override="$netpol_node_name" \
		--service-cluster-ip-range="${SAINT_E2E_SERVICE_CIDR:-10.0.0.0/24}" \
		--health-port=0 --metrics-port=0 \
		--v=1 > "$netpol_log" 2>&1 < /dev/null &
	netpol_pid=$!
	echo "netpol.sh: started kube-router firewall (pid $netpol_pid, log $netpol_log)"
	local deadline=$((SECONDS + 60))
	until netpol_synced; do
		if ! kill -0 "$netpol_pid" 2> /dev/null; then
			echo "netpol.sh: kube-router exited before its first sync; last lines of $netpol_log:" >&2
			tail -n 40 "$netpol_log" >&2
			netpol_pid=""
			return 1
		fi
		if grep -q "Aborting sync" "$netpol_log" || ((SECONDS >= deadline)); then
			echo "netpol.sh: failed to see kube-router's first complete sync within 60 s; last lines of $netpol_log:" >&2
			tail -n 40 "$netpol_log" >&2
			return 1
		fi
		sleep 0.2
	done
	echo "netpol.sh: kube-router synced after $((SECONDS - deadline + 60)) s"
	export SAINT_E2E_NETPOL_PROBE_IMAGE="$netpol_probe_image"
	export SAINT_E2E_NETPOL_LOG="$netpol_log"
}

# Removes what kube-router's firewall left in the filter table and ipsets:
# jumps from INPUT/FORWARD/OUTPUT to its KUBE-ROUTER-* chains, then its own
# chains (KUBE-ROUTER-*, KUBE-POD-FW-*, KUBE-NWPLCY-*), then its ipsets
# (KUBE-SRC-*, KUBE-DST-*). One iptables-restore --noflush, so rules other
# programs own (kube-proxy's) are untouched.
netpol_cleanup() {
	local chain_pattern='KUBE-(ROUTER|POD-FW|NWPLCY)-[A-Z0-9-]*'
	local saved script
	saved="$(iptables-save -t filter)" || return 1
	script="$(
		echo '*filter'
		# Jumps from the built-in chains (a rule's line, with -A turned into -D).
		grep -E "^-A (INPUT|FORWARD|OUTPUT) .*-j $chain_pattern( |\$)" <<< "$saved" | sed 's/^-A /-D /'
		# Flush every own chain first (they jump to each other), then delete them.
		grep -oE "^:$chain_pattern" <<< "$saved" | sed 's/^:/-F /'
		grep -oE "^:$chain_pattern" <<< "$saved" | sed 's/^:/-X /'
		echo 'COMMIT'
	)"
	if ! iptables-restore -w --noflush <<< "$script"; then
		echo "netpol.sh: failed to remove kube-router's iptables chains; the script was:" >&2
		echo "$script" >&2
		return 1
	fi
	# Without ipset kube-router cannot have made any sets.
	command -v ipset > /dev/null || return 0
	local set
	for set in $(ipset list -n | grep -E '^(inet6:)?KUBE-(SRC|DST)-'); do
		ipset destroy "$set" || {
			echo "netpol.sh: failed to destroy kube-router's ipset $set" >&2
			return 1
		}
	done
}

# Stops kube-router (its process group) and removes its chains and ipsets.
# Call it before node_stop: kube-router rewrites the filter table on every
# sync and would put back chains that node_stop removed under it.
netpol_stop() {
	if [[ -n "$netpol_pid" ]]; then
		kill -TERM -- "-$netpol_pid" 2> /dev/null || true
		local deadline=$((SECONDS + 10))
		while kill -0 "$netpol_pid" 2> /dev/null && ((SECONDS < deadline)); do
			sleep 0.2
		done
		kill -KILL -- "-$netpol_pid" 2> /dev/null || true
		wait "$netpol_pid" 2> /dev/null || true
		netpol_pid=""
	fi
	netpol_cleanup
}

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
	set -euo pipefail
	case "${1:-}" in
		build) netpol_build && echo "$netpol_dir" ;;
		--print-dir) netpol_paths && echo "$netpol_dir" ;;
		*)
			echo "usage: e2e/netpol.sh build | --print-dir" >&2
			exit 2
			;;
	esac
fi
