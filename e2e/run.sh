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
#              SAINT_E2E_BENCH=fleet runs the fleet benchmark instead of the
#              scenarios, with a release build of the operator (e2e/README.md,
#              "Benchmarks"); its run directory is kept for the JSON and logs.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
# shellcheck source=e2e/control-plane.sh
source "$here/control-plane.sh"

"$here/setup.sh"
bin_dir="$("$here/setup.sh" --print-bin-dir)"

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/saint/target}"
cd "$repo"
# Compile before the control plane starts so a slow build never races its
# readiness, and so a compile error fails here with cargo's own words.
bench="${SAINT_E2E_BENCH:-}"
case "$bench" in
	"")
		cargo build --locked -p saint-operator --bin saint-operator
		cargo test --locked -p saint-e2e --no-run
		;;
	fleet)
		# Memory and speed are measured on the release operator; release
		# artifacts get their own target directory so they never evict the
		# shared debug build.
		release_target="${SAINT_RELEASE_TARGET_DIR:-$HOME/.cache/saint/target-release}"
		CARGO_TARGET_DIR="$release_target" cargo build --locked --release \
			-p saint-operator -p saint-e2e --bin saint-operator --bin fleet-bench
		;;
	*)
		echo "run.sh: unknown SAINT_E2E_BENCH=$bench (known: fleet)" >&2
		exit 2
		;;
esac

run_dir="$(mktemp -d "${TMPDIR:-/tmp}/saint-e2e.XXXXXX")"
finish() {
	local status=$?
	trap - EXIT INT TERM
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
	control_plane_stop
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

export SAINT_E2E_BIN_DIR="$bin_dir"
export SAINT_E2E_REPO="$repo"
export SAINT_E2E_OPERATOR_BIN="$CARGO_TARGET_DIR/debug/saint-operator"
export PATH="$bin_dir:$PATH"
if [[ -n "$bench" ]]; then
	export SAINT_E2E_OPERATOR_BIN="$release_target/release/saint-operator"
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
test_selection=()
if [[ -n "${SAINT_E2E_TEST:-}" ]]; then
	test_selection=(--test "$SAINT_E2E_TEST")
fi
# The scenarios run in their own process group (with the operators, kubectl
# and helm they spawn), so an interrupted run can stop all of them at once.
setsid cargo test --locked -p saint-e2e "${test_selection[@]}" -- --test-threads=1 "$@" &
test_group=$!
wait "$test_group"
test_group=""
