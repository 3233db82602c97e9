#!/usr/bin/env bash
# The one Rust build every test section shares: `cargo test --workspace --no-run`
# (with saint-e2e's `cluster` feature, which builds its scenarios) compiles each
# crate of the workspace once, with one set of features, into
# $CARGO_TARGET_DIR/debug — every test binary and every binary target (a package
# with integration tests gets its binaries built too). The sections after it run
# what this built instead of asking cargo for a narrower build: `cargo build -p X`
# or `cargo test -p X` resolves features for X alone, which differ from the
# workspace's, and recompiled half of the dependency graph each time.
#
#   e2e/test-build.sh                     build (or find up to date); print nothing
#   e2e/test-build.sh --bin NAME...       then print the path of each binary target
#   e2e/test-build.sh --tests PACKAGE     then print "kind name path" for each test
#                                         executable of PACKAGE (kind: lib, bin, test)
#
# Progress and compiler messages go to stderr; only the requested paths go to
# stdout. Warm, it takes about a second (cargo checks fingerprints only).
set -euo pipefail

repository_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/saint/target}"

usage() {
	sed -n '10,15p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
	exit 2
}

mode=none
names=()
while (($# > 0)); do
	case "$1" in
	--bin) mode=bin; shift ;;
	--tests) mode=tests; shift ;;
	-h | --help) usage ;;
	-*) echo "test-build: unknown option $1" >&2; usage ;;
	*) names+=("$1"); shift ;;
	esac
done
if [[ "$mode" != none && ${#names[@]} -eq 0 ]]; then
	echo "test-build: --$mode needs at least one name" >&2
	usage
fi

index="$(mktemp)"
trap 'rm -f "$index"' EXIT
# cargo reports every unit, fresh or rebuilt, as a compiler-artifact message; the
# parser keeps the executables and writes them as "kind name package path" lines.
(cd "$repository_root" && cargo test --workspace --locked --no-run --features saint-e2e/cluster --message-format=json-render-diagnostics) |
	python3 -c '
import json, sys
for line in sys.stdin:
    if not line.startswith("{"):
        continue
    message = json.loads(line)
    if message.get("reason") != "compiler-artifact" or not message.get("executable"):
        continue
    target = message["target"]
    package = message["package_id"]
    # package_id: "path+file:///…/agent-pod#saint-agent@0.1.0" (or …/name#0.1.0).
    fragment = package.rsplit("#", 1)[-1]
    name = fragment.split("@", 1)[0] if "@" in fragment else package.rsplit("#", 1)[0].rsplit("/", 1)[-1]
    # "test": a test harness executable (of a lib, bin or tests/ target); "exe": a binary.
    role = "test" if message["profile"]["test"] else "exe"
    print(role, target["kind"][0], target["name"], name, message["executable"])
' > "$index"

case "$mode" in
none) ;;
bin)
	for name in "${names[@]}"; do
		path="$(awk -v name="$name" '$1 == "exe" && $2 == "bin" && $3 == name { print $5; exit }' "$index")"
		if [[ -z "$path" || ! -x "$path" ]]; then
			echo "test-build: the workspace test build has no binary '$name'" >&2
			exit 1
		fi
		echo "$path"
	done
	;;
tests)
	for name in "${names[@]}"; do
		lines="$(awk -v package="$name" '$1 == "test" && $4 == package { print $2, $3, $5 }' "$index")"
		if [[ -z "$lines" ]]; then
			echo "test-build: the workspace test build has no test executable of package '$name'" >&2
			exit 1
		fi
		echo "$lines"
	done
	;;
esac
