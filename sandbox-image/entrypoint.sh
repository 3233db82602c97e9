#!/bin/sh
# Starts the sandbox runner with the image's fixed paths. Everything that varies per
# sandbox arrives in the environment the agent filled into the Job, which the runner
# reads itself (saint-config's RunnerSettings; the lists are JSON arrays):
#   SAINT_RUNNER_SOCKET, SAINT_RUNNER_TOKEN, SAINT_SANDBOX_CLIS, SAINT_SANDBOX_SEED,
#   SAINT_RUNNER_IDLE_TIMEOUT_SECONDS.
# The Porter shims go into /tmp/saint-bin (the root filesystem is read-only; /tmp is
# an emptyDir), created fresh at every start from SAINT_SANDBOX_CLIS, so adding a CLI
# to the bot needs no new image.
set -eu
exec /usr/local/bin/saint-sandbox-runner \
    --workspace /workspace \
    --agent /agent \
    --shim-directory /tmp/saint-bin \
    --proxy /usr/local/bin/cliport-proxy \
    "$@"
