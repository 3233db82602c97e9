#!/usr/bin/env bash
# Runs the test sections that start servers several times in a row while other
# work loads the CPU, stopping at the first failure: the check that no test
# depends on timing (docs/testing.md, "Flakiness").
#
#   e2e/repeat-under-load.sh [--rounds N] [--load PERCENT] [SECTION...]
#
# SECTION: channels (the agent's channel and chat-page tests: WhatsApp, Telegram,
# Slack, Discord, Matrix against Synapse, e-mail against Dovecot and OpenSMTPD, `up`
# with Chromium, and what arrives or leaves through them: attachments, voice notes,
# spoken replies, approval buttons), apiserver, e2e, node (the ./test.sh sections of those names).
# Default: all four, 5 rounds, and stress-ng keeping every core busy at 60 % for the
# whole run. Run ./test.sh once first (it builds what these sections run).
set -uo pipefail

repository_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repository_root" || exit 1
exec </dev/null

rounds=5
load=60
sections=()
while (($# > 0)); do
	case "$1" in
	--rounds) rounds="${2:?--rounds needs a number}"; shift 2 ;;
	--load) load="${2:?--load needs a percentage}"; shift 2 ;;
	-h | --help) sed -n '2,12p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
	-*) echo "repeat-under-load: unknown option $1" >&2; exit 2 ;;
	channels | apiserver | e2e | node) sections+=("$1"); shift ;;
	*) echo "repeat-under-load: unknown section '$1' (channels apiserver e2e node)" >&2; exit 2 ;;
	esac
done
((${#sections[@]} > 0)) || sections=(channels apiserver e2e node)
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || { echo "repeat-under-load: --rounds must be a positive number, not '$rounds'" >&2; exit 2; }
if ! [[ "$load" =~ ^[0-9]+$ ]] || ((load > 100)); then
	echo "repeat-under-load: --load must be 0-100, not '$load'" >&2
	exit 2
fi

if ((load > 0)) && ! command -v stress-ng >/dev/null; then
	echo "repeat-under-load: installing stress-ng (Debian package)"
	{ apt-get install -y -qq --no-install-recommends stress-ng >/dev/null ||
		{ apt-get update -qq && apt-get install -y -qq --no-install-recommends stress-ng >/dev/null; }; } ||
		{ echo "repeat-under-load: failed to install stress-ng" >&2; exit 1; }
fi

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/saint/target}"
# As ./test.sh sets it: a different value would rebuild the workspace's crates.
if [[ "${CI:-}" == true ]]; then
	export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
fi
# What ./test.sh's memory and synapse sections export for the tests.
if [[ " ${sections[*]} " == *" channels "* ]]; then
	SAINT_SYNAPSE="$(./test.sh synapse | sed -n 's/^SAINT_SYNAPSE=\([^ ]*\).*/\1/p')"
	[[ -n "$SAINT_SYNAPSE" ]] || { echo "repeat-under-load: ./test.sh synapse printed no SAINT_SYNAPSE" >&2; exit 1; }
	export SAINT_SYNAPSE
fi

stress_pid=""
stop_stress() {
	[[ -n "$stress_pid" ]] && kill -- "-$stress_pid" 2>/dev/null
	wait 2>/dev/null
}
trap stop_stress EXIT
if ((load > 0)); then
	setsid stress-ng --cpu "$(nproc)" --cpu-load "$load" --quiet &
	stress_pid=$!
	echo "load: stress-ng, $(nproc) CPU workers at $load %"
fi

# The channel tests by test target name; --workspace keeps the features of the one
# test build (e2e/test-build.sh), so nothing is recompiled.
channel_tests=(whatsapp telegram slack discord matrix email up runtime_http crash_durability
	inbound_media voice_notes tts approval_buttons)
run_one() {
	case "$1" in
	channels)
		local arguments=() name
		for name in "${channel_tests[@]}"; do arguments+=(--test "$name"); done
		cargo test --workspace --locked --exclude saint-e2e "${arguments[@]}"
		;;
	*) ./test.sh "$1" ;;
	esac
}

passed=0
failed=0
for ((round = 1; round <= rounds; round++)); do
	for section in "${sections[@]}"; do
		started=$SECONDS
		log="$(mktemp "${TMPDIR:-/tmp}/saint-repeat-$section.XXXXXX")"
		if run_one "$section" >"$log" 2>&1; then
			passed=$((passed + 1))
			echo "round $round/$rounds: $section ok ($((SECONDS - started)) s)"
			rm -f "$log"
		else
			failed=$((failed + 1))
			echo "round $round/$rounds: $section FAILED ($((SECONDS - started)) s); its log: $log"
			tail -n 60 "$log"
			echo "$passed passed, $failed failed"
			exit 1
		fi
	done
done
echo "$passed passed, $failed failed"
