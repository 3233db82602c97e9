#!/usr/bin/env bash
# The end-to-end suite's single entry point: builds (or reuses) the control
# plane binaries, builds the operator and the scenarios, starts etcd,
# kube-apiserver and kube-controller-manager on loopback, runs every scenario
# against them, and stops every process it started — also on failure or
# interruption.
#
# Usage: e2e/run.sh [test-name-filter ...]   (extra arguments go to the test harness)
# Environment: SAINT_E2E_KEEP=1 keeps the run directory (certificates, logs);
#              SAINT_E2E_TEST=<file> runs only e2e/tests/<file>.rs;
#              SAINT_E2E_NODE=1 also starts a node (e2e/node.sh: containerd,
#              kubelet, kube-proxy, kube-scheduler), then kube-router's
#              network-policy firewall (e2e/netpol.sh), imports the product
#              images (SAINT_E2E_IMAGES_DIR, or e2e/images/build.sh --print-dir
#              when e2e/tests/node.rs runs) and runs the node scenarios
#              ($node_tests below) instead of the others. Without it the node
#              scenarios never run: they are left out of the selection, and
#              SAINT_E2E_TEST naming one is refused.
#              SAINT_E2E_BENCH=fleet runs the fleet benchmark instead of the
#              scenarios, with a release build of the operator (e2e/README.md,
#              "Benchmarks"); its run directory is kept for the JSON and logs.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
# shellcheck source=e2e/control-plane.sh
source "$here/control-plane.sh"

# Scenario files (e2e/tests/<name>.rs) that need the node: run only with it.
node_tests=(node_smoke node network_policy)
with_node=0
if [[ -n "${SAINT_E2E_NODE:-}" && "${SAINT_E2E_NODE}" != 0 ]]; then
	with_node=1
	if [[ -n "${SAINT_E2E_BENCH:-}" ]]; then
		echo "run.sh: the benchmarks run without a node; unset SAINT_E2E_NODE" >&2
		exit 2
	fi
	# shellcheck source=e2e/node.sh
	source "$here/node.sh"
	if [[ -f "$here/netpol.sh" ]]; then
		# shellcheck source=e2e/netpol.sh
		source "$here/netpol.sh"
	fi
	# Before any build: a machine already running a node says so at once.
	node_lock
fi
is_node_test() {
	local name="$1" node_test
	for node_test in "${node_tests[@]}"; do
		[[ "$name" == "$node_test" ]] && return 0
	done
	return 1
}
# Which scenario files run: SAINT_E2E_TEST's, or every file of this kind of
# run (node files with the node, the others without), each named to cargo.
test_selection=()
first_tests=()
if [[ -n "${SAINT_E2E_TEST:-}" ]]; then
	if is_node_test "$SAINT_E2E_TEST" && ((with_node == 0)); then
		echo "run.sh: e2e/tests/$SAINT_E2E_TEST.rs needs the node: run it with SAINT_E2E_NODE=1" >&2
		exit 2
	fi
	test_selection=(--test "$SAINT_E2E_TEST")
else
	for file in "$here"/tests/*.rs; do
		name="$(basename "$file" .rs)"
		if is_node_test "$name"; then
			# node_smoke runs first, alone (below).
			if ((with_node == 1)) && [[ "$name" != node_smoke ]]; then
				test_selection+=(--test "$name")
			fi
		elif ((with_node == 0)); then
			test_selection+=(--test "$name")
		fi
	done
	if ((with_node == 0)); then
		# What a bare `cargo test -p saint-e2e` also ran: the library's and
		# the fleet benchmark's unit tests.
		test_selection+=(--lib --bins)
	fi
	if ((with_node == 1)); then
		if [[ ! -f "$here/tests/node_smoke.rs" ]]; then
			echo "run.sh: failed to find $here/tests/node_smoke.rs, the node's own check" >&2
			exit 2
		fi
		# The node's own check gates the rest: when a pod cannot even run,
		# the bot scenarios would only fail further away from the cause.
		# Past it, every node file runs even if one fails (each tells its
		# own story).
		first_tests=(--test node_smoke)
		test_selection+=(--no-fail-fast)
	fi
fi

"$here/setup.sh"
bin_dir="$("$here/setup.sh" --print-bin-dir)"

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/saint/target}"
cd "$repo"
# Compile before the control plane starts so a slow build never races its
# readiness, and so a compile error fails here with cargo's own words.
bench="${SAINT_E2E_BENCH:-}"
operator_bin=""
e2e_executables=()
case "$bench" in
	"")
		# The workspace's one test build (e2e/test-build.sh), which ./test.sh's
		# earlier sections already compiled: `cargo test -p saint-e2e` would
		# resolve features for this package alone and rebuild much of the graph.
		operator_bin="$(bash "$here/test-build.sh" --bin saint-operator)"
		mapfile -t e2e_executables < <(bash "$here/test-build.sh" --tests saint-e2e)
		if ((${#e2e_executables[@]} == 0)); then
			echo "run.sh: the test build listed no test executable of saint-e2e" >&2
			exit 1
		fi
		;;
	fleet)
		# Memory and speed are measured on the release operator; release
		# artifacts get their own target directory so they never evict the
		# shared debug build.
		release_target="${SAINT_RELEASE_TARGET_DIR:-$HOME/.cache/saint/target-release}"
		CARGO_TARGET_DIR="$release_target" cargo build --locked --release \
			-p saint-e2e --bin fleet-bench
		# The operator as it ships: its own profile (Cargo.toml, built for size).
		CARGO_TARGET_DIR="$release_target" cargo build --locked --profile operator \
			-p saint-operator --bin saint-operator
		;;
	*)
		echo "run.sh: unknown SAINT_E2E_BENCH=$bench (known: fleet)" >&2
		exit 2
		;;
esac

# The product images (operator, agent, porter, sandbox) for the node
# scenarios that run Saint (e2e/tests/node.rs): built, or found up to date, by
# e2e/images/build.sh before anything starts, like the binaries above. The
# node's own check and the network-policy scenarios do not need them.
if ((with_node == 1)) && [[ -z "${SAINT_E2E_IMAGES_DIR:-}" ]] &&
	[[ -z "${SAINT_E2E_TEST:-}" || "${SAINT_E2E_TEST}" == node ]]; then
	SAINT_E2E_IMAGES_DIR="$("$here/images/build.sh" --print-dir)"
fi

run_dir="$(mktemp -d "${TMPDIR:-/tmp}/saint-e2e.XXXXXX")"
finish() {
	local status=$?
	trap - EXIT INT TERM
	# Every stop step runs even when one fails: under set -e a failing netpol or
	# node step would leave the kubelet, containerd and the API server running.
	set +e
	if ((status != 0)); then
		echo "run.sh: failed (exit $status); control-plane logs are in $run_dir/logs" >&2
		for log in "$run_dir"/logs/*.log; do
			[[ -f "$log" ]] || continue
			echo "----- last lines of $log" >&2
			tail -n 10 "$log" >&2
		done
	fi
	if [[ -n "${test_group:-}" ]]; then
		kill -TERM -- "-$test_group" 2> /dev/null || true
		sleep 1
		kill -KILL -- "-$test_group" 2> /dev/null || true
	fi
	if ((with_node == 1)); then
		if declare -F netpol_stop > /dev/null; then
			netpol_stop
		fi
		node_stop
		node_unlock
	fi
	control_plane_stop
	# The node scenario's measurements (apply to Ready, message to reply, exec cold
	# and warm, idle memory, Contact edit to agent), kept in the test log.
	if [[ -f "$run_dir/node-figures.json" ]]; then
		echo "run.sh: node figures: $(tr -d ' \n' < "$run_dir/node-figures.json")"
	fi
	if [[ -n "${bench:-}" ]]; then
		# A benchmark's run directory keeps its JSON and logs; etcd's data is
		# thousands of throwaway objects.
		rm -rf "$run_dir/etcd"
		echo "run.sh: benchmark results and logs are in $run_dir" >&2
	elif ((status == 0)) && [[ "${SAINT_E2E_KEEP:-0}" != 1 ]]; then
		rm -rf "$run_dir"
	fi
	exit "$status"
}
trap finish EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

if [[ -n "$bench" ]]; then
	# Every bot has a ClusterIP Service, and the suite's service range
	# (10.0.0.0/24) holds 254: the API server would refuse the rest of a
	# 1,000-bot fleet ("range is full").
	export SAINT_E2E_SERVICE_CIDR=10.0.0.0/16
fi
control_plane_start "$bin_dir" "$run_dir"
if ((with_node == 1)); then
	node_start "$bin_dir" "$run_dir"
	if declare -F netpol_start > /dev/null; then
		netpol_start "$run_dir"
	fi
	# The product images, imported under the references the chart names.
	if [[ -n "${SAINT_E2E_IMAGES_DIR:-}" ]]; then
		shopt -s nullglob
		archives=("$SAINT_E2E_IMAGES_DIR"/saint-*.oci.tar)
		shopt -u nullglob
		if ((${#archives[@]} == 0)); then
			echo "run.sh: no image archives in $SAINT_E2E_IMAGES_DIR (run e2e/images/build.sh); scenarios needing them will fail" >&2
		fi
		for archive in "${archives[@]}"; do
			# Assigned first: a failed import inside echo's $(…) would pass unnoticed
			# and surface later as a pod that cannot find its image.
			imported="$(node_import_image "$archive")" || exit 1
			echo "run.sh: imported $(paste -sd ' ' <<< "$imported") from $archive"
		done
		export SAINT_E2E_IMAGES_DIR
	fi
fi

export SAINT_E2E_BIN_DIR="$bin_dir"
export SAINT_E2E_REPO="$repo"
export SAINT_E2E_OPERATOR_BIN="$operator_bin"
export PATH="$bin_dir:$PATH"
if [[ -n "$bench" ]]; then
	export SAINT_E2E_OPERATOR_BIN="$release_target/operator/saint-operator"
	# Its own process group, like the scenarios, so an interruption stops the
	# operators it spawned too.
	setsid "$release_target/release/fleet-bench" "$@" &
	test_group=$!
	wait "$test_group"
	test_group=""
	exit 0
fi
# One scenario at a time: operator scenarios start their own operator
# processes, and two of them at once would reconcile each other's bots.
# The scenarios run in their own process group (with the operators, kubectl
# and helm they spawn), so an interrupted run can stop all of them at once.
# Arguments as cargo test's: --test NAME, --lib, --bins, --no-fail-fast; each names
# executables of the test build, run as cargo would run them (from the package's
# directory, with CARGO_MANIFEST_DIR set).
run_scenarios() {
	local selected=() fail_fast=true argument kind name path line failed=0
	for argument in "$@"; do
		case "$argument" in
			--no-fail-fast) fail_fast=false ;;
		esac
	done
	while (($# > 0)); do
		case "$1" in
			--test) selected+=("test $2"); shift 2 ;;
			--lib) selected+=("lib"); shift ;;
			--bins) selected+=("bin"); shift ;;
			--no-fail-fast) shift ;;
			*) echo "run.sh: run_scenarios: unknown argument $1" >&2; return 2 ;;
		esac
	done
	local wanted matched
	for wanted in "${selected[@]}"; do
		matched=false
		for line in "${e2e_executables[@]}"; do
			read -r kind name path <<< "$line"
			if [[ "$wanted" == "$kind" || "$wanted" == "$kind $name" ]]; then
				matched=true
				echo "     Running $kind $name ($path)"
				(cd "$here" && CARGO_MANIFEST_DIR="$here" exec setsid "$path" --test-threads=1 "${harness_arguments[@]}") &
				test_group=$!
				if ! wait "$test_group"; then
					failed=$((failed + 1))
					echo "run.sh: $kind $name failed" >&2
					if $fail_fast; then
						test_group=""
						return 1
					fi
				fi
				test_group=""
			fi
		done
		if ! $matched; then
			echo "run.sh: the test build has no saint-e2e test executable for '$wanted'" >&2
			return 1
		fi
	done
	((failed == 0))
}
harness_arguments=("$@")
if ((${#first_tests[@]} > 0)); then
	run_scenarios "${first_tests[@]}"
fi
if [[ "${test_selection[*]}" == --no-fail-fast ]]; then
	exit 0
fi
run_scenarios "${test_selection[@]}"
