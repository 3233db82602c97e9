# shellcheck shell=bash
# A real node for the end-to-end suite: containerd (Debian's), runc, the CNI
# bridge, kubelet, kube-proxy (iptables) and kube-scheduler (built by
# e2e/setup.sh from the pinned Kubernetes module). Sourced by e2e/run.sh after
# control_plane_start, when SAINT_E2E_NODE=1 (control-plane.sh then opens the
# API server to pods and authorizes kubelets).
#
# Functions: node_lock (optional, before node_start: take the machine's node
# lock early, waiting up to SAINT_E2E_NODE_LOCK_WAIT seconds, default 0),
# node_start <bin-dir> <run-dir>, node_stop, node_import_image
# <oci-archive> (also usable from a test: `source e2e/node.sh; node_import_image x`
# with the variables below), node_local_volume <namespace> <claim> <size>.
# After node_start: SAINT_E2E_NODE=saint-e2e-node, SAINT_E2E_HOST_IP=10.88.0.1
# (the host as pods see it: the bridge's gateway; servers a test runs for pods
# listen there), SAINT_E2E_PUBLIC_IP=203.0.113.1 (the host again, on an address
# outside every private range: to a pod's NetworkPolicy a server a test runs
# there is on the internet), SAINT_E2E_PAUSE_IMAGE and SAINT_E2E_PROBE_IMAGE (images in the
# node's containerd, see below), SAINT_E2E_CONTAINERD_ADDRESS and
# SAINT_E2E_SNAPSHOTTER (for node_import_image), SAINT_E2E_NODE_VOLUMES (where
# local volumes go).
#
# Everything lives under <run-dir>/node/: containerd's config, root, state and
# socket, runc's state, CNI config and IP allocations, the kubelet's root and
# pod logs, certificates, kubeconfigs, logs — never the system's default
# paths, so a crashed run cannot poison the next. What cannot live there:
#   - the bridge `saint0` (10.88.0.1/16 and 203.0.113.1/32), iptables chains KUBE-* and CNI-*
#     (IPv4 and IPv6), cgroups /sys/fs/cgroup/*/saint-e2e-node (the kubelet's
#     cgroupRoot), the kubelet's symlinks in /var/log/containers,
#     net.ipv4.ip_forward: node_stop removes or restores them, and node_start
#     removes what a crashed run left;
#   - a lock, /run/saint-e2e-node.lock: one node per machine (same bridge,
#     same addresses); its holders are this shell and what it started, so a
#     leftover kubelet of a killed run keeps the next run out with a message
#     instead of fighting it.
#
# Images, no registry: the pause image (pause.c of the pinned
# k8s.io/kubernetes module, `gcc -static`) is containerd's sandbox image, and
# the probe image (e2e/node/probe, static Go, standard library only: API server
# through the `kubernetes` Service, HTTP GET, file write, sleep) serves the
# node's tests.
# Both are packed with umoci as OCI archives whose index names the full
# reference (io.containerd.image.name), cached in
# ~/.cache/saint/node-images-<input-digest>/ and imported at every start
# (`ctr -n k8s.io images import`). Pods must use imagePullPolicy: Never or
# IfNotPresent: nothing can be pulled.
#
# Storage: the bot's PersistentVolumeClaim asks `storageClassName: local-path`
# and nothing provisions it. A test binds it with saint_e2e::node::provide_local_volume
# (e2e/src/node.rs), which creates the `local-path` StorageClass (no
# provisioner) and a `local` PersistentVolume for exactly that claim (claimRef),
# with nodeAffinity to this node and a directory under $SAINT_E2E_NODE_VOLUMES.
# By hand: `node_local_volume <namespace> <claim> <size>` (below) does the same.

node_name=saint-e2e-node
node_host_ip=10.88.0.1
# A documentation address (TEST-NET-3, RFC 5737) on the bridge too: pods reach the
# host there as they would a server on the internet, through the egress rule for
# public addresses (a bot pod's policy admits it, a sandbox's does not), with no
# route leaving the machine.
node_public_ip=203.0.113.1
node_pod_cidr=10.88.0.0/16
node_bridge=saint0
# Pods' cgroups go under /<this> in every v1 hierarchy, never under a
# kubepods of the machine's own.
node_cgroup=saint-e2e-node
node_lock_file=/run/saint-e2e-node.lock
# containerd apart: it is stopped last, after the kubelet stopped the pods.
node_pids=()
node_containerd_pid=""
node_kubelet_pid=""
node_scheduler_pid=""
node_dir=""
node_bin_dir=""
node_lock_fd=""
node_ip_forward_before=""

node_here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

node_log() {
	echo "node: $*"
}

node_fail() {
	echo "node: $*" >&2
	return 1
}

# Debian's packages for what the node runs. containerd 1.6.20 (Debian 12)
# serves CRI v1, the only CRI version kubelet 1.34 speaks.
node_require_packages() {
	local missing=()
	command -v containerd > /dev/null || missing+=(containerd)
	command -v ctr > /dev/null || missing+=(containerd)
	command -v runc > /dev/null || missing+=(runc)
	[[ -x /usr/lib/cni/bridge && -x /usr/lib/cni/host-local && -x /usr/lib/cni/loopback && -x /usr/lib/cni/portmap ]] ||
		missing+=(containernetworking-plugins)
	command -v iptables > /dev/null || missing+=(iptables)
	command -v conntrack > /dev/null || missing+=(conntrack)
	command -v ipset > /dev/null || missing+=(ipset)
	command -v ip > /dev/null || missing+=(iproute2)
	command -v umoci > /dev/null || missing+=(umoci)
	command -v gcc > /dev/null || missing+=(gcc)
	[[ -f /usr/lib/x86_64-linux-gnu/libc.a || -f /usr/lib/aarch64-linux-gnu/libc.a ]] || missing+=(libc6-dev)
	command -v flock > /dev/null || missing+=(util-linux)
	if ((${#missing[@]} == 0)); then
		return 0
	fi
	node_log "installing ${missing[*]} from Debian's packages"
	# Debian's containerd package would start its service on installation;
	# this node runs its own containerd and never the system's.
	if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" > /dev/null; then
		apt-get update -qq &&
			DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" > /dev/null ||
			node_fail "failed to install ${missing[*]} with apt-get" || return 1
	fi
}

# Packs files into an OCI archive whose index names <reference>.
# Usage: node_pack_image <archive> <reference> <user> <entrypoint> <file>...
node_pack_image() {
	local archive="$1" reference="$2" user="$3" entrypoint="$4"
	shift 4
	local work
	work="$(mktemp -d "${TMPDIR:-/tmp}/saint-node-image.XXXXXX")"
	if ! node_pack_image_in "$work" "$archive" "$reference" "$user" "$entrypoint" "$@"; then
		rm -rf "$work"
		node_fail "failed to pack $reference into $archive" || return 1
	fi
	rm -rf "$work"
}

# node_pack_image's steps, each checked (set -e does not hold in a function
# called from a condition).
node_pack_image_in() {
	local work="$1" archive="$2" reference="$3" user="$4" entrypoint="$5"
	shift 5
	umoci init --layout "$work/layout" &&
		umoci new --image "$work/layout:image" &&
		umoci unpack --image "$work/layout:image" "$work/bundle" > /dev/null || return 1
	local file
	for file in "$@"; do
		install -m 0755 "$file" "$work/bundle/rootfs/$(basename "$file")" || return 1
	done
	umoci repack --image "$work/layout:image" "$work/bundle" &&
		umoci config --image "$work/layout:image" --os linux --architecture "$(go env GOARCH)" \
			--config.user "$user" --config.entrypoint "$entrypoint" \
			--config.env PATH=/usr/local/bin:/usr/bin:/bin &&
		umoci gc --layout "$work/layout" || return 1
	# umoci names the image by tag only; containerd's import reads the full
	# reference from io.containerd.image.name.
	python3 - "$work/layout/index.json" "$reference" <<-'PYTHON' || return 1
		import json, sys
		path, reference = sys.argv[1], sys.argv[2]
		index = json.load(open(path))
		for manifest in index["manifests"]:
		    annotations = manifest.setdefault("annotations", {})
		    annotations["io.containerd.image.name"] = reference
		    annotations["org.opencontainers.image.ref.name"] = reference
		json.dump(index, open(path, "w"))
	PYTHON
	tar -C "$work/layout" -cf "$archive.partial" . && mv "$archive.partial" "$archive"
}

# Builds (or reuses) the pause and probe images; sets node_pause_image,
# node_probe_image and node_images_dir.
node_build_images() {
	local tools_dir="$node_here/tools" probe_dir="$node_here/node/probe"
	local kubernetes_dir
	# The pinned module's own pause.c (e2e/setup.sh downloaded the module).
	kubernetes_dir="$(cd "$tools_dir" && GOFLAGS=-mod=readonly GOTOOLCHAIN=local go list -m -f '{{.Dir}}' k8s.io/kubernetes)" ||
		node_fail "failed to find the k8s.io/kubernetes module (run e2e/setup.sh first)" || return 1
	local pause_c="$kubernetes_dir/build/pause/linux/pause.c"
	[[ -f "$pause_c" ]] || node_fail "failed to find $pause_c" || return 1
	local digest
	# Inputs: sources, the tools that turn them into images, and this file's
	# packing recipe (node_pack_image).
	digest="$({
		cat "$pause_c" "$probe_dir/go.mod" "$probe_dir/main.go"
		go version
		gcc --version | head -n 1
		umoci --version
		declare -f node_pack_image_in
	} | sha256sum | cut -c1-12)"
	node_images_dir="${SAINT_CACHE_DIR:-$HOME/.cache/saint}/node-images-$digest"
	node_pause_image="saint.work/e2e/pause:$digest"
	node_probe_image="saint.work/e2e/probe:$digest"
	if [[ -f "$node_images_dir/complete" ]]; then
		return 0
	fi
	node_log "building the pause and probe images into $node_images_dir"
	local started=$SECONDS
	rm -rf "$node_images_dir"
	mkdir -p "$node_images_dir/bin"
	gcc -Os -static -Wall -DVERSION=saint-e2e -o "$node_images_dir/bin/pause" "$pause_c" ||
		node_fail "failed to compile $pause_c with gcc -static" || return 1
	strip "$node_images_dir/bin/pause"
	(cd "$probe_dir" && CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS="-trimpath -buildvcs=false -mod=readonly" \
		go build -ldflags "-s -w" -o "$node_images_dir/bin/probe" .) ||
		node_fail "failed to build the probe ($probe_dir)" || return 1
	# The pause image runs as nobody, like Kubernetes' own (USER 65535).
	node_pack_image "$node_images_dir/pause.oci.tar" "$node_pause_image" 65535:65535 /pause \
		"$node_images_dir/bin/pause" || return 1
	node_pack_image "$node_images_dir/probe.oci.tar" "$node_probe_image" 65532:65532 /probe \
		"$node_images_dir/bin/probe" || return 1
	touch "$node_images_dir/complete"
	# Older builds (other inputs) are never used again.
	local old
	for old in "${node_images_dir%-*}"-*; do
		[[ "$old" == "$node_images_dir" ]] || rm -rf "$old"
	done
	node_log "images built in $((SECONDS - started)) s: $(du -h "$node_images_dir/pause.oci.tar" | cut -f1) pause, $(du -h "$node_images_dir/probe.oci.tar" | cut -f1) probe"
}

# Client and serving certificates for the node's components, signed by the
# run's CA (control-plane.sh made it in <run-dir>/pki).
node_certificates() {
	local ca_dir="$1" pki="$2"
	mkdir -p "$pki" &&
		printf 'extendedKeyUsage = clientAuth\n' > "$pki/client.ext" &&
		printf 'subjectAltName = IP:%s, DNS:%s\nextendedKeyUsage = serverAuth\n' \
			"$node_host_ip" "$node_name" > "$pki/kubelet-serving.ext" &&
		# The Node authorizer and NodeRestriction know a kubelet by this name.
		node_issue "$ca_dir" "$pki" kubelet "/O=system:nodes/CN=system:node:$node_name" client.ext &&
		node_issue "$ca_dir" "$pki" kubelet-serving "/CN=system:node:$node_name" kubelet-serving.ext &&
		# Bound by the API server's bootstrap policy: system:node-proxier,
		# system:kube-scheduler and system:volume-scheduler.
		node_issue "$ca_dir" "$pki" kube-proxy "/CN=system:kube-proxy" client.ext &&
		node_issue "$ca_dir" "$pki" kube-scheduler "/CN=system:kube-scheduler" client.ext ||
		node_fail "failed to issue the node's certificates in $pki" || return 1
}

# Usage: node_issue <ca-dir> <pki> <name> <subject> <extensions-file>
node_issue() {
	local ca_dir="$1" pki="$2" name="$3" subject="$4" extensions="$5"
	openssl req -newkey rsa:2048 -nodes -subj "$subject" -keyout "$pki/$name.key" -out "$pki/$name.csr" 2> /dev/null &&
		openssl x509 -req -in "$pki/$name.csr" -CA "$ca_dir/ca.crt" -CAkey "$ca_dir/ca.key" \
			-CAcreateserial -CAserial "$pki/ca.srl" -days 2 -extfile "$pki/$extensions" \
			-out "$pki/$name.crt" 2> /dev/null
}

node_kubeconfig() {
	local path="$1" user="$2" pki="$3" ca="$4"
	cat > "$path" <<-EOF
		apiVersion: v1
		kind: Config
		clusters:
		- name: saint-e2e
		  cluster:
		    server: $SAINT_E2E_API_SERVER
		    certificate-authority: $ca
		users:
		- name: $user
		  user:
		    client-certificate: $pki/$user.crt
		    client-key: $pki/$user.key
		contexts:
		- name: saint-e2e
		  context: {cluster: saint-e2e, user: $user}
		current-context: saint-e2e
	EOF
}

node_start_process() {
	local name="$1" log="$2"
	shift 2
	setsid "$@" > "$log" 2>&1 < /dev/null &
	node_last_pid=$!
	node_log "started $name (pid $!, log $log)"
}

# Who holds the node lock (pids and commands), for the refusal message.
node_lock_holders() {
	local fd
	for fd in /proc/[0-9]*/fd/*; do
		if [[ "$(readlink "$fd" 2> /dev/null)" == "$node_lock_file" ]]; then
			local pid="${fd#/proc/}"
			pid="${pid%%/*}"
			echo "$pid ($(tr '\0' ' ' 2> /dev/null < "/proc/$pid/cmdline" | cut -c1-80))"
		fi
	done | sort -u | paste -sd ';'
}

node_free_port() {
	python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Waits until a command succeeds; on timeout fails with the tail of a log.
node_wait_for() {
	local what="$1" seconds="$2" log="$3"
	shift 3
	local deadline=$((SECONDS + seconds))
	until "$@" > /dev/null 2>&1; do
		if ((SECONDS >= deadline)); then
			echo "node: failed to see $what within ${seconds}s; last lines of $log:" >&2
			tail -n 40 "$log" >&2
			return 1
		fi
		sleep 0.5
	done
}

node_ctr() {
	ctr --address "${SAINT_E2E_CONTAINERD_ADDRESS:-$node_dir/containerd/containerd.sock}" --namespace k8s.io "$@"
}

# Imports an OCI archive into the node's containerd (namespace k8s.io, where
# the kubelet looks) and unpacks it for the node's snapshotter, so pods start
# it with imagePullPolicy: Never/IfNotPresent. The reference is the one the
# archive's index names (io.containerd.image.name or a full
# org.opencontainers.image.ref.name); prints it.
node_import_image() {
	local archive="$1"
	[[ -n "${SAINT_E2E_CONTAINERD_ADDRESS:-}" ]] ||
		node_fail "failed to import $archive: SAINT_E2E_CONTAINERD_ADDRESS is not set (node_start sets it)" || return 1
	local output
	output="$(node_ctr images import --all-platforms --snapshotter "${SAINT_E2E_SNAPSHOTTER:-overlayfs}" "$archive" 2>&1)" ||
		node_fail "failed to import $archive into containerd: $output" || return 1
	# ctr prints "unpacking <reference> (sha256:…)...done" per image.
	local references
	references="$(awk '$1 == "unpacking" {print $2}' <<< "$output")"
	[[ -n "$references" ]] ||
		node_fail "importing $archive named no image (its index needs io.containerd.image.name): $output" || return 1
	echo "$references"
}

node_is_ready() {
	local status
	status="$("$node_bin_dir/kubectl" get node "$node_name" \
		-o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2> /dev/null)" || return 1
	[[ "$status" == True ]]
}

# kube-proxy has written the `kubernetes` Service's rule.
node_proxy_synced() {
	iptables -w -t nat -S KUBE-SERVICES 2> /dev/null | grep -q -- "-d 10.0.0.1/32 .*--dport 443"
}

node_scheduler_healthy() {
	"$node_bin_dir/kubectl" --server "https://127.0.0.1:$1" --insecure-skip-tls-verify get --raw /healthz
}

# Removes what lives outside the run directory: iptables chains named KUBE-*
# and CNI-* (kubelet's, kube-proxy's, the CNI plugins', and kube-router's when
# the network-policy firewall ran), the bridge, the pods' cgroups and log
# symlinks. Called by node_stop, and by node_start for the leftovers of a
# killed run (the lock guarantees no other node is running).
node_remove_host_state() {
	# Best effort: each step says what it failed to remove, and the rest still runs.
	local -
	set +e
	# containerd and its shims (which outlive it: their own process groups)
	# of any node run, known by their run directory's containerd paths.
	local proc
	for proc in /proc/[0-9]*; do
		if tr '\0' ' ' 2> /dev/null < "$proc/cmdline" | grep -qE '^[^ ]*containerd[^ ]* .*/saint-e2e\.[^/ ]+/node/containerd/'; then
			kill -KILL "${proc#/proc/}" 2> /dev/null || true
		fi
	done
	# Any process still in the pods' cgroups belongs to a pod of a node.
	local hierarchy pid deadline=$((SECONDS + 10))
	while pid="$(find /sys/fs/cgroup/*/"$node_cgroup" -name cgroup.procs -exec cat {} + 2> /dev/null)" &&
		[[ -n "$pid" ]]; do
		if ((SECONDS >= deadline)); then
			echo "node: failed to stop the processes left in the pods' cgroups: $pid" >&2
			break
		fi
		# shellcheck disable=SC2086 # one pid per word
		kill -KILL $pid 2> /dev/null || true
		sleep 0.2
	done
	# Mounts a killed run left in its run directory (container root
	# filesystems, network namespaces, pod volumes), deepest first.
	local mount_point
	while read -r mount_point; do
		umount "$mount_point" 2> /dev/null || umount -l "$mount_point" 2> /dev/null ||
			echo "node: failed to unmount $mount_point" >&2
	done < <(awk '$5 ~ /\/saint-e2e\.[^\/]+\/node\// {print $5}' /proc/self/mountinfo | sort -r)
	local family table rules
	# The kubelet and kube-proxy write IPv6 chains too.
	for family in iptables ip6tables; do
		for table in filter nat mangle; do
			rules="$("$family-save" -t "$table" 2> /dev/null)" || continue
			if grep -qE '(KUBE|CNI)-' <<< "$rules"; then
				# Everything else in the table is restored as it was.
				grep -vE '(KUBE|CNI)-' <<< "$rules" | "$family-restore" -w -T "$table" ||
					echo "node: failed to remove the KUBE-/CNI- chains from $family table $table" >&2
			fi
		done
	done
	if ip link show "$node_bridge" > /dev/null 2>&1; then
		ip link delete "$node_bridge" || echo "node: failed to delete the bridge $node_bridge" >&2
	fi
	for hierarchy in /sys/fs/cgroup/*/"$node_cgroup"; do
		[[ -d "$hierarchy" ]] || continue
		find "$hierarchy" -depth -type d -exec rmdir {} + 2> /dev/null ||
			echo "node: failed to remove the cgroup $hierarchy (processes still in it?)" >&2
	done
	# The kubelet links each container's log there (a fixed path); links of
	# this node's pods, or dangling ones of a removed run directory.
	local link target
	for link in /var/log/containers/*.log; do
		[[ -L "$link" ]] || continue
		target="$(readlink "$link")"
		if [[ ! -e "$link" || (-n "$node_dir" && "$target" == "$node_dir/"*) ]]; then
			rm -f "$link"
		fi
	done
}

# The kubelet's cgroupRoot must exist in every hierarchy; cpuset children
# start with no CPUs and memory nodes, so they get the root's.
node_create_cgroups() {
	local hierarchy
	for hierarchy in /sys/fs/cgroup/*/; do
		[[ -f "$hierarchy/cgroup.procs" ]] || continue
		mkdir -p "$hierarchy$node_cgroup" || node_fail "failed to create the cgroup $hierarchy$node_cgroup" || return 1
		if [[ -f "$hierarchy/cpuset.cpus" ]]; then
			cat "$hierarchy/cpuset.cpus" > "$hierarchy$node_cgroup/cpuset.cpus" &&
				cat "$hierarchy/cpuset.mems" > "$hierarchy$node_cgroup/cpuset.mems" ||
				node_fail "failed to give $hierarchy$node_cgroup the root's CPUs and memory nodes" || return 1
		fi
	done
}

# overlayfs when the run directory's filesystem takes an overlay mount (the
# test below is what containerd's snapshotter does), else native (copies,
# works anywhere); SAINT_E2E_SNAPSHOTTER chooses.
node_pick_snapshotter() {
	local dir="$1/overlay-check"
	if [[ -n "${SAINT_E2E_SNAPSHOTTER:-}" ]]; then
		echo "$SAINT_E2E_SNAPSHOTTER"
		return 0
	fi
	mkdir -p "$dir/lower" "$dir/upper" "$dir/work" "$dir/merged"
	if mount -t overlay overlay -o "lowerdir=$dir/lower,upperdir=$dir/upper,workdir=$dir/work" "$dir/merged" 2> /dev/null; then
		umount "$dir/merged"
		echo overlayfs
	else
		echo "node: overlay mounts fail under $1; containerd uses the native snapshotter" >&2
		echo native
	fi
	rm -rf "$dir"
}

# One node per machine (same bridge, addresses, iptables chains). Held by
# this shell and inherited by the kubelet, kube-proxy and the scheduler, so a
# killed run's live components keep the next run out instead of fighting it.
node_lock() {
	local wait="${SAINT_E2E_NODE_LOCK_WAIT:-0}"
	exec {node_lock_fd}> "$node_lock_file"
	if ! flock -w "$wait" "$node_lock_fd"; then
		exec {node_lock_fd}>&-
		node_lock_fd=""
		node_fail "another node holds $node_lock_file (processes: $(node_lock_holders)); one node per machine:" \
			"wait for that run (SAINT_E2E_NODE_LOCK_WAIT=<seconds> waits), or, if it was killed, stop those" \
			"pids (the next start removes the rest)" || return 1
	fi
}

node_start() {
	node_bin_dir="$1"
	local run_dir="$2"
	local started=$SECONDS
	local binary
	for binary in kubelet kube-proxy kube-scheduler kubectl; do
		[[ -x "$node_bin_dir/$binary" ]] || node_fail "failed to find $node_bin_dir/$binary (run e2e/setup.sh)" || return 1
	done
	[[ -n "${SAINT_E2E_API_SERVER:-}" && -f "$run_dir/pki/ca.key" ]] ||
		node_fail "start the control plane first (control_plane_start, with SAINT_E2E_NODE=1)" || return 1
	node_require_packages || return 1

	if [[ -z "$node_lock_fd" ]]; then
		node_lock || return 1
	fi
	# From here on node_stop has something to stop (never before the lock:
	# it would remove another node's bridge and chains).
	node_dir="$run_dir/node"
	node_remove_host_state

	node_build_images || return 1
	local logs="$run_dir/logs" pki="$node_dir/pki" containerd_dir="$node_dir/containerd"
	mkdir -p "$logs" "$node_dir/cni/net.d" "$node_dir/cni/ipam" "$node_dir/kubelet" "$node_dir/pod-logs" \
		"$node_dir/volumes" "$containerd_dir"
	node_certificates "$run_dir/pki" "$pki" || return 1
	local ca="$run_dir/pki/ca.crt"
	node_kubeconfig "$node_dir/kubelet.kubeconfig" kubelet "$pki" "$ca"
	node_kubeconfig "$node_dir/kube-proxy.kubeconfig" kube-proxy "$pki" "$ca"
	node_kubeconfig "$node_dir/kube-scheduler.kubeconfig" kube-scheduler "$pki" "$ca"

	# The bridge exists before any pod, with the gateway address, so the
	# kubelet can serve on it and report it as the node's InternalIP; the CNI
	# bridge plugin adopts it.
	ip link add "$node_bridge" type bridge &&
		ip address add "$node_host_ip/16" dev "$node_bridge" &&
		ip address add "$node_public_ip/32" dev "$node_bridge" &&
		ip link set "$node_bridge" up ||
		node_fail "failed to create the bridge $node_bridge with $node_host_ip/16 and $node_public_ip/32" || return 1
	# Pods reach Services through kube-proxy's rules: bridged packets must go
	# through iptables. The CNI bridge plugin turns forwarding on; restored
	# at node_stop.
	node_ip_forward_before="$(cat /proc/sys/net/ipv4/ip_forward)"
	if [[ "$(cat /proc/sys/net/bridge/bridge-nf-call-iptables 2> /dev/null)" != 1 ]]; then
		echo 1 > /proc/sys/net/bridge/bridge-nf-call-iptables ||
			node_fail "failed to set net.bridge.bridge-nf-call-iptables=1 (br_netfilter)" || return 1
	fi

	# CNI: the bridge with host-local addresses from 10.88.0.0/16 (allocations
	# under the run directory), portmap for hostPort; containerd adds loopback.
	# No masquerading: pods only talk to this host and each other.
	cat > "$node_dir/cni/net.d/10-saint-e2e.conflist" <<-EOF
		{
		  "cniVersion": "0.4.0",
		  "name": "saint-e2e",
		  "plugins": [
		    {
		      "type": "bridge",
		      "bridge": "$node_bridge",
		      "isGateway": true,
		      "ipMasq": false,
		      "hairpinMode": true,
		      "ipam": {
		        "type": "host-local",
		        "dataDir": "$node_dir/cni/ipam",
		        "ranges": [[{"subnet": "$node_pod_cidr", "gateway": "$node_host_ip"}]],
		        "routes": [{"dst": "0.0.0.0/0"}]
		      }
		    },
		    {"type": "portmap", "capabilities": {"portMappings": true}}
		  ]
		}
	EOF

	# containerd with its own root, state, socket and runc root.
	local snapshotter
	snapshotter="$(node_pick_snapshotter "$containerd_dir")"
	cat > "$containerd_dir/config.toml" <<-EOF
		version = 2
		root = "$containerd_dir/root"
		state = "$containerd_dir/state"
		disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs"]
		[grpc]
		  address = "$containerd_dir/containerd.sock"
		[ttrpc]
		  address = "$containerd_dir/containerd.sock.ttrpc"
		[plugins."io.containerd.internal.v1.opt"]
		  path = "$containerd_dir/opt"
		[plugins."io.containerd.grpc.v1.cri"]
		  sandbox_image = "$node_pause_image"
		  netns_mounts_under_state_dir = true
		  # This machine withholds CAP_SYS_RESOURCE even from root: runc
		  # cannot lower oom_score_adj (the kubelet asks -998 for sandboxes,
		  # "nsexec: failed to update /proc/self/oom_score_adj: Permission
		  # denied"); never ask below containerd's own value.
		  restrict_oom_score_adj = true
		  stream_server_address = "127.0.0.1"
		  stream_server_port = "0"
		  [plugins."io.containerd.grpc.v1.cri".containerd]
		    snapshotter = "$snapshotter"
		    default_runtime_name = "runc"
		    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
		      runtime_type = "io.containerd.runc.v2"
		      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
		        SystemdCgroup = false
		        Root = "$containerd_dir/runc"
		  [plugins."io.containerd.grpc.v1.cri".cni]
		    bin_dir = "/usr/lib/cni"
		    conf_dir = "$node_dir/cni/net.d"
		    max_conf_num = 1
	EOF
	# Without the lock: containerd would hand it to its shims, and a killed
	# run's shims alone must not keep the next run out (node_start kills
	# them). The kubelet, kube-proxy and the scheduler keep it.
	setsid containerd --config "$containerd_dir/config.toml" > "$logs/containerd.log" 2>&1 < /dev/null {node_lock_fd}>&- &
	node_containerd_pid=$!
	node_log "started containerd (pid $!, log $logs/containerd.log)"
	export SAINT_E2E_CONTAINERD_ADDRESS="$containerd_dir/containerd.sock"
	export SAINT_E2E_SNAPSHOTTER="$snapshotter"
	node_wait_for "containerd answering" 30 "$logs/containerd.log" node_ctr version || return 1
	local image imported
	for image in "$node_images_dir/pause.oci.tar" "$node_images_dir/probe.oci.tar"; do
		imported="$(node_import_image "$image")" || return 1
		node_log "imported $imported"
	done
	node_ctr images check "name==$node_pause_image" | grep -q complete ||
		node_fail "containerd does not hold $node_pause_image after the import" || return 1

	# The kubelet. Flags this machine needs: cgroup v1 (failCgroupV1: false,
	# cgroupfs), no swap check, relaxed eviction and no image GC (the disk is
	# often above 70 % used, and the images cannot be pulled back).
	local kubelet_port kubelet_healthz_port
	kubelet_port="$(node_free_port)"
	kubelet_healthz_port="$(node_free_port)"
	cat > "$node_dir/kubelet.yaml" <<-EOF
		apiVersion: kubelet.config.k8s.io/v1beta1
		kind: KubeletConfiguration
		address: $node_host_ip
		port: $kubelet_port
		readOnlyPort: 0
		healthzBindAddress: 127.0.0.1
		healthzPort: $kubelet_healthz_port
		tlsCertFile: $pki/kubelet-serving.crt
		tlsPrivateKeyFile: $pki/kubelet-serving.key
		authentication:
		  anonymous: {enabled: false}
		  webhook: {enabled: true}
		  x509: {clientCAFile: $ca}
		authorization:
		  mode: Webhook
		containerRuntimeEndpoint: unix://$containerd_dir/containerd.sock
		cgroupDriver: cgroupfs
		cgroupRoot: /$node_cgroup
		failCgroupV1: false
		failSwapOn: false
		podLogsDir: $node_dir/pod-logs
		clusterDomain: cluster.local
		maxPods: 110
		imageGCHighThresholdPercent: 100
		imageGCLowThresholdPercent: 99
		evictionHard:
		  memory.available: 100Mi
		  nodefs.available: 1%
		  nodefs.inodesFree: 1%
		  imagefs.available: 1%
		  imagefs.inodesFree: 1%
		evictionPressureTransitionPeriod: 10s
		serializeImagePulls: false
		registerNode: true
		nodeStatusUpdateFrequency: 5s
		syncFrequency: 10s
		fileCheckFrequency: 10s
		shutdownGracePeriod: 0s
		logging: {format: text}
	EOF
	node_create_cgroups || return 1
	node_start_process kubelet "$logs/kubelet.log" "$node_bin_dir/kubelet" \
		--config "$node_dir/kubelet.yaml" \
		--kubeconfig "$node_dir/kubelet.kubeconfig" \
		--root-dir "$node_dir/kubelet" \
		--cert-dir "$pki" \
		--hostname-override "$node_name" \
		--node-ip "$node_host_ip" \
		--v 2
	node_kubelet_pid=$node_last_pid
	node_pids+=("$node_kubelet_pid")
	node_wait_for "node $node_name Ready" 120 "$logs/kubelet.log" node_is_ready || return 1

	cat > "$node_dir/kube-proxy.yaml" <<-EOF
		apiVersion: kubeproxy.config.k8s.io/v1alpha1
		kind: KubeProxyConfiguration
		clientConnection: {kubeconfig: $node_dir/kube-proxy.kubeconfig}
		hostnameOverride: $node_name
		mode: iptables
		clusterCIDR: $node_pod_cidr
		bindAddress: 127.0.0.1
		healthzBindAddress: 127.0.0.1:$(node_free_port)
		metricsBindAddress: 127.0.0.1:$(node_free_port)
		# Leave the host's conntrack sysctls alone.
		conntrack: {maxPerCore: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
		iptables: {localhostNodePorts: false}
		nodePortAddresses: ["$node_host_ip/32"]
	EOF
	node_start_process kube-proxy "$logs/kube-proxy.log" "$node_bin_dir/kube-proxy" \
		--config "$node_dir/kube-proxy.yaml"
	node_pids+=("$node_last_pid")
	node_wait_for "kube-proxy's rule for the kubernetes Service" 60 "$logs/kube-proxy.log" node_proxy_synced || return 1

	local scheduler_port
	scheduler_port="$(node_free_port)"
	node_start_process kube-scheduler "$logs/kube-scheduler.log" "$node_bin_dir/kube-scheduler" \
		--kubeconfig "$node_dir/kube-scheduler.kubeconfig" \
		--authentication-kubeconfig "$node_dir/kube-scheduler.kubeconfig" \
		--authorization-kubeconfig "$node_dir/kube-scheduler.kubeconfig" \
		--authentication-skip-lookup \
		--bind-address 127.0.0.1 \
		--secure-port "$scheduler_port" \
		--leader-elect=false
	node_scheduler_pid=$node_last_pid
	node_pids+=("$node_last_pid")
	node_wait_for "kube-scheduler healthy" 60 "$logs/kube-scheduler.log" node_scheduler_healthy "$scheduler_port" || return 1

	export SAINT_E2E_NODE="$node_name"
	export SAINT_E2E_HOST_IP="$node_host_ip"
	export SAINT_E2E_PUBLIC_IP="$node_public_ip"
	export SAINT_E2E_PAUSE_IMAGE="$node_pause_image"
	export SAINT_E2E_PROBE_IMAGE="$node_probe_image"
	export SAINT_E2E_NODE_VOLUMES="$node_dir/volumes"
	node_log "$node_name Ready in $((SECONDS - started)) s (pods on $node_pod_cidr, host $node_host_ip)"
}

node_stop_group() {
	local pid="$1"
	kill -TERM -- "-$pid" 2> /dev/null || true
	local deadline=$((SECONDS + 10))
	while kill -0 -- "-$pid" 2> /dev/null && ((SECONDS < deadline)); do
		sleep 0.1
	done
	kill -KILL -- "-$pid" 2> /dev/null || true
	wait "$pid" 2> /dev/null || true
}

# Stops the node: pods first (the kubelet stops their sandboxes, which
# releases their network), then every process, shims and containers included,
# mounts, the bridge, iptables chains and cgroups. Safe to call after a
# partial start or twice.
node_stop() {
	[[ -n "$node_dir" && -n "$node_lock_fd" ]] || return 0
	# Best effort (it runs from run.sh's exit trap): every step is tried.
	local -
	set +e
	local started=$SECONDS
	local kubectl="$node_bin_dir/kubectl"
	if [[ -n "$node_kubelet_pid" ]] && kill -0 "$node_kubelet_pid" 2> /dev/null; then
		# The scheduler first: controllers replace deleted pods (a Deployment's
		# ReplicaSet), and the replacements must stay unscheduled.
		if [[ -n "$node_scheduler_pid" ]]; then
			node_stop_group "$node_scheduler_pid"
		fi
		"$kubectl" delete pods --all-namespaces --field-selector "spec.nodeName=$node_name" \
			--grace-period 1 --wait=false > /dev/null 2>&1 || true
		local deadline=$((SECONDS + 30))
		while ((SECONDS < deadline)) &&
			[[ -n "$("$kubectl" get pods --all-namespaces --field-selector "spec.nodeName=$node_name" -o name 2> /dev/null)" ]]; do
			sleep 0.5
		done
		if ((SECONDS >= deadline)); then
			echo "node: pods still on $node_name after 30 s (stopping their containers directly):" \
				"$("$kubectl" get pods --all-namespaces --field-selector "spec.nodeName=$node_name" -o name 2> /dev/null | paste -sd ' ')" >&2
		fi
	fi
	# containerd last: what the kubelet left is removed through it.
	local index
	for ((index = ${#node_pids[@]} - 1; index >= 0; index--)); do
		node_stop_group "${node_pids[index]}"
	done
	node_pids=()
	node_kubelet_pid=""
	node_scheduler_pid=""
	local socket="$node_dir/containerd/containerd.sock"
	if [[ -S "$socket" ]] && node_ctr version > /dev/null 2>&1; then
		local task container
		for task in $(node_ctr tasks list --quiet 2> /dev/null); do
			node_ctr tasks kill --signal SIGKILL "$task" > /dev/null 2>&1 || true
		done
		sleep 0.5
		for task in $(node_ctr tasks list --quiet 2> /dev/null); do
			node_ctr tasks delete --force "$task" > /dev/null 2>&1 || true
		done
		for container in $(node_ctr containers list --quiet 2> /dev/null); do
			node_ctr containers delete "$container" > /dev/null 2>&1 || true
		done
	fi
	if [[ -n "$node_containerd_pid" ]]; then
		node_stop_group "$node_containerd_pid"
		node_containerd_pid=""
	fi
	# Shims, mounts, cgroups, the bridge, iptables chains.
	node_remove_host_state
	if [[ -n "$node_ip_forward_before" ]]; then
		echo "$node_ip_forward_before" > /proc/sys/net/ipv4/ip_forward || true
		node_ip_forward_before=""
	fi
	node_unlock
	node_dir=""
	node_log "stopped in $((SECONDS - started)) s"
}

node_unlock() {
	if [[ -n "$node_lock_fd" ]]; then
		exec {node_lock_fd}>&-
		node_lock_fd=""
	fi
}

# A `local` PersistentVolume for one claim of storage class local-path (the
# bot's workspace): a directory under the run directory, bound to exactly that
# claim, reachable only on this node. The Rust twin is
# saint_e2e::node::bind_local_path.
# Usage: node_local_volume <namespace> <claim> <size, e.g. 1Gi>
node_local_volume() {
	local namespace="$1" claim="$2" size="$3"
	local path="$SAINT_E2E_NODE_VOLUMES/$namespace-$claim"
	mkdir -p "$path" && chmod 0777 "$path"
	"$node_bin_dir/kubectl" apply -f - <<-EOF
		apiVersion: storage.k8s.io/v1
		kind: StorageClass
		metadata: {name: local-path}
		provisioner: kubernetes.io/no-provisioner
		volumeBindingMode: Immediate
		---
		apiVersion: v1
		kind: PersistentVolume
		metadata: {name: $namespace-$claim}
		spec:
		  capacity: {storage: $size}
		  accessModes: [ReadWriteOnce]
		  persistentVolumeReclaimPolicy: Retain
		  storageClassName: local-path
		  claimRef: {namespace: $namespace, name: $claim}
		  local: {path: $path}
		  nodeAffinity:
		    required:
		      nodeSelectorTerms:
		      - matchExpressions:
		        - {key: kubernetes.io/hostname, operator: In, values: [$node_name]}
	EOF
}
