#!/bin/sh
# Starts the sandbox runner with the image's fixed paths. Everything that varies per
# sandbox arrives in the environment the agent filled into the Job, which the runner
# reads itself (saint-config's RunnerSettings; the seed list is a JSON array):
#   SAINT_RUNNER_SOCKET, SAINT_RUNNER_TOKEN, SAINT_SANDBOX_SEED,
#   SAINT_RUNNER_IDLE_TIMEOUT_SECONDS.
# The runner also relays 127.0.0.1:3128 to Porter's proxy socket
# (/run/saint/porter/proxy.sock, mounted read-only): the CLIs here (gh, git) reach
# their hosts only through it, holding placeholders, and Porter puts the credential
# on the wire.
set -eu
exec /usr/local/bin/saint-sandbox-runner \
    --workspace /workspace \
    --agent /agent \
    "$@"
