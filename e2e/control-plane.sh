# shellcheck shell=bash
# Starts and stops a real Kubernetes control plane on loopback: etcd,
# kube-apiserver and kube-controller-manager from the binaries e2e/setup.sh
# built. Sourced by e2e/run.sh; touches nothing outside its run directory and
# stops every process it started (each in its own process group).
#
# Functions: control_plane_start <bin-dir> <run-dir>, control_plane_stop.
# SAINT_E2E_SERVICE_CIDR: the Service range (default 10.0.0.0/24; 10.0.0.1, in the
# serving certificate, must stay its first address).
# SAINT_E2E_NODE=1 (e2e/node.sh will start a kubelet): the API server also
# listens where pods reach it (0.0.0.0, advertised as the pods' gateway
# 10.88.0.1, in the serving certificate), keeps the `kubernetes`
# Service's endpoints itself (lease reconciler), authorizes kubelets (Node,
# NodeRestriction) and reaches them with its own client certificate; the
# controller manager runs the controllers a node needs. Unset: loopback only.
# After a start: KUBECONFIG (admin), SAINT_E2E_API_SERVER, SAINT_E2E_CA_FILE.

control_plane_pids=()
# The address pods reach the host at (the CNI bridge's gateway, e2e/node.sh).
control_plane_node_host_ip=10.88.0.1

control_plane_with_node() {
	[[ -n "${SAINT_E2E_NODE:-}" && "${SAINT_E2E_NODE}" != 0 ]]
}

# A free loopback port: bind port 0 and let the kernel choose. The short race
# until the server binds it is acceptable on a test machine.
free_port() {
	python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Per-run certificates: one CA signs the API server's serving certificate and
# the client certificates of the admin and the controller manager; a separate
# key pair signs service-account tokens.
control_plane_certificates() {
	local pki="$1"
	mkdir -p "$pki"
	(
		cd "$pki" || exit 1
		openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=saint-e2e-ca" \
			-keyout ca.key -out ca.crt 2> /dev/null
		cat > serving.ext <<-EOF
			subjectAltName = IP:127.0.0.1, IP:10.0.0.1, IP:$control_plane_node_host_ip, DNS:localhost, DNS:kubernetes, DNS:kubernetes.default, DNS:kubernetes.default.svc, DNS:kubernetes.default.svc.cluster.local
			extendedKeyUsage = serverAuth
		EOF
		printf 'extendedKeyUsage = clientAuth\n' > client.ext
		issue() {
			local name="$1" subject="$2" extensions="$3"
			openssl req -newkey rsa:2048 -nodes -subj "$subject" -keyout "$name.key" -out "$name.csr" 2> /dev/null
			openssl x509 -req -in "$name.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 \
				-extfile "$extensions" -out "$name.crt" 2> /dev/null
		}
		issue serving "/CN=kube-apiserver" serving.ext
		issue admin "/O=system:masters/CN=saint-e2e-admin" client.ext
		issue controller-manager "/CN=system:kube-controller-manager" client.ext
		# The API server's identity towards kubelets (logs, exec, port-forward).
		issue kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" client.ext
		openssl genrsa -out service-account.key 2048 2> /dev/null
		openssl rsa -in service-account.key -pubout -out service-account.pub 2> /dev/null
	)
}

write_kubeconfig() {
	local path="$1" server="$2" pki="$3" user="$4"
	cat > "$path" <<-EOF
		apiVersion: v1
		kind: Config
		clusters:
		- name: saint-e2e
		  cluster:
		    server: $server
		    certificate-authority: $pki/ca.crt
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

# Starts one process in its own session/process group, logging to a file.
start_process() {
	local name="$1" log="$2"
	shift 2
	setsid "$@" > "$log" 2>&1 < /dev/null &
	control_plane_pids+=("$!")
	echo "control-plane: started $name (pid $!, log $log)"
}

# etcd's /health over bash's /dev/tcp (no curl needed on the machine).
etcd_healthy() {
	local port="$1" answer
	exec 3<> "/dev/tcp/127.0.0.1/$port" || return 1
	printf 'GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' >&3
	answer="$(cat <&3)"
	exec 3<&-
	[[ "$answer" == *'"health":"true"'* ]]
}

# Waits until a command succeeds, failing with the tail of a log otherwise.
wait_for() {
	local what="$1" seconds="$2" log="$3"
	shift 3
	local deadline=$((SECONDS + seconds))
	until "$@" > /dev/null 2>&1; do
		if ((SECONDS >= deadline)); then
			echo "control-plane: failed to see $what within ${seconds}s; last lines of $log:" >&2
			tail -n 40 "$log" >&2
			return 1
		fi
		sleep 0.2
	done
}

# Waits until a CRD's Established condition is True. `kubectl wait
# --for=condition=Established` fails outright ("<nil> is of the type <nil>") when it
# reads the CRD before the API server wrote any status, so this polls the condition
# itself: an absent status reads as "not yet", not as an error.
crd_wait_established() {
	local kubectl="$1" crd="$2" seconds="${3:-60}" status
	local deadline=$((SECONDS + seconds))
	while :; do
		status="$("$kubectl" get "crd/$crd" -o 'jsonpath={.status.conditions[?(@.type=="Established")].status}' 2> /dev/null)" || status=""
		[[ "$status" == True ]] && return 0
		if ((SECONDS >= deadline)); then
			echo "control-plane: crd/$crd not Established within ${seconds}s (condition: '${status:-absent}')" >&2
			"$kubectl" get "crd/$crd" -o yaml >&2 || true
			return 1
		fi
		sleep 0.2
	done
}

control_plane_start() {
	local bin_dir="$1" run_dir="$2"
	local pki="$run_dir/pki" logs="$run_dir/logs"
	mkdir -p "$logs"
	local started=$SECONDS
	control_plane_certificates "$pki"

	local etcd_port etcd_peer_port api_port
	etcd_port="$(free_port)"
	etcd_peer_port="$(free_port)"
	api_port="$(free_port)"
	local etcd_url="http://127.0.0.1:$etcd_port"
	local api_url="https://127.0.0.1:$api_port"

	# etcd without fsync: the data is thrown away after the run anyway.
	start_process etcd "$logs/etcd.log" "$bin_dir/etcd" \
		--name saint-e2e \
		--data-dir "$run_dir/etcd" \
		--listen-client-urls "$etcd_url" \
		--advertise-client-urls "$etcd_url" \
		--listen-peer-urls "http://127.0.0.1:$etcd_peer_port" \
		--initial-advertise-peer-urls "http://127.0.0.1:$etcd_peer_port" \
		--initial-cluster "saint-e2e=http://127.0.0.1:$etcd_peer_port" \
		--unsafe-no-fsync \
		--log-level warn
	wait_for "etcd healthy" 30 "$logs/etcd.log" etcd_healthy "$etcd_port" || return 1

	# Without a node nothing but the host talks to the API server: loopback,
	# and no endpoints for the `kubernetes` Service (nothing could use them).
	local api_listen=(--bind-address 127.0.0.1 --advertise-address 127.0.0.1 --endpoint-reconciler-type none)
	local authorization=RBAC admission=PodSecurity,ValidatingAdmissionPolicy kubelet_access=()
	if control_plane_with_node; then
		# Pods reach the API server through the `kubernetes` Service, which
		# kube-proxy sends to the advertised address: the bridge's gateway
		# (created by node_start, after this; nothing here needs it to exist
		# yet). 0.0.0.0 keeps loopback working for the host's clients.
		api_listen=(--bind-address 0.0.0.0 --advertise-address "$control_plane_node_host_ip" --endpoint-reconciler-type lease)
		authorization=Node,RBAC
		admission+=,NodeRestriction
		kubelet_access=(
			--kubelet-client-certificate "$pki/kubelet-client.crt"
			--kubelet-client-key "$pki/kubelet-client.key"
			--kubelet-certificate-authority "$pki/ca.crt"
			# The node's host name is not in any DNS: reach it by its IP.
			--kubelet-preferred-address-types InternalIP
		)
	fi
	# The default admission plugins already include PodSecurity and
	# ValidatingAdmissionPolicy; naming them keeps the suite honest if the
	# defaults ever change.
	start_process kube-apiserver "$logs/kube-apiserver.log" "$bin_dir/kube-apiserver" \
		--etcd-servers "$etcd_url" \
		"${api_listen[@]}" \
		--secure-port "$api_port" \
		--tls-cert-file "$pki/serving.crt" \
		--tls-private-key-file "$pki/serving.key" \
		--client-ca-file "$pki/ca.crt" \
		--service-account-issuer https://kubernetes.default.svc.cluster.local \
		--service-account-key-file "$pki/service-account.pub" \
		--service-account-signing-key-file "$pki/service-account.key" \
		--service-cluster-ip-range "${SAINT_E2E_SERVICE_CIDR:-10.0.0.0/24}" \
		--authorization-mode "$authorization" \
		--enable-admission-plugins "$admission" \
		"${kubelet_access[@]}" \
		--allow-privileged=false \
		--profiling=false
	write_kubeconfig "$run_dir/admin.kubeconfig" "$api_url" "$pki" admin
	write_kubeconfig "$run_dir/controller-manager.kubeconfig" "$api_url" "$pki" controller-manager
	wait_for "kube-apiserver ready" 90 "$logs/kube-apiserver.log" \
		"$bin_dir/kubectl" --kubeconfig "$run_dir/admin.kubeconfig" get --raw /readyz || return 1

	# Only the controllers the scenarios need: without the node no kubelet and
	# no scheduler, so pods are admitted and stored but never run.
	local controllers=garbage-collector-controller,job-controller,deployment-controller,replicaset-controller
	controllers+=,serviceaccount-controller,serviceaccount-token-controller,namespace-controller
	controllers+=,root-ca-certificate-publisher-controller,persistentvolumeclaim-protection-controller
	if control_plane_with_node; then
		# Services get EndpointSlices (kube-proxy routes them), claims bind to
		# volumes, the node's not-ready taint is lifted once it is Ready, and
		# pods of a gone node or finished Jobs are collected.
		controllers+=,endpointslice-controller,endpointslice-mirroring-controller,endpoints-controller
		controllers+=,persistentvolume-binder-controller,persistentvolume-protection-controller
		controllers+=,persistentvolume-attach-detach-controller,node-lifecycle-controller,taint-eviction-controller
		controllers+=,pod-garbage-collector-controller,ttl-after-finished-controller
	fi
	start_process kube-controller-manager "$logs/kube-controller-manager.log" "$bin_dir/kube-controller-manager" \
		--kubeconfig "$run_dir/controller-manager.kubeconfig" \
		--authentication-kubeconfig "$run_dir/controller-manager.kubeconfig" \
		--authorization-kubeconfig "$run_dir/controller-manager.kubeconfig" \
		--authentication-skip-lookup \
		--bind-address 127.0.0.1 \
		--secure-port "$(free_port)" \
		--controllers "$controllers" \
		--use-service-account-credentials \
		--service-account-private-key-file "$pki/service-account.key" \
		--root-ca-file "$pki/ca.crt" \
		--leader-elect=false
	# The service-account controller creating "default" in a namespace shows
	# the controller manager is up and reconciling.
	wait_for "kube-controller-manager creating the default ServiceAccount" 90 "$logs/kube-controller-manager.log" \
		"$bin_dir/kubectl" --kubeconfig "$run_dir/admin.kubeconfig" get serviceaccount default --namespace default || return 1

	export KUBECONFIG="$run_dir/admin.kubeconfig"
	export SAINT_E2E_API_SERVER="$api_url"
	export SAINT_E2E_CA_FILE="$pki/ca.crt"
	export SAINT_E2E_RUN_DIR="$run_dir"
	echo "control-plane: ready at $api_url in $((SECONDS - started)) s"
}

# Stops every process this file started: SIGTERM to each process group, then
# SIGKILL to whatever is still alive after five seconds.
control_plane_stop() {
	local pid
	for pid in "${control_plane_pids[@]}"; do
		kill -TERM -- "-$pid" 2> /dev/null || true
	done
	local deadline=$((SECONDS + 5))
	for pid in "${control_plane_pids[@]}"; do
		while kill -0 -- "-$pid" 2> /dev/null && ((SECONDS < deadline)); do
			sleep 0.1
		done
		kill -KILL -- "-$pid" 2> /dev/null || true
		wait "$pid" 2> /dev/null || true
	done
	control_plane_pids=()
}
