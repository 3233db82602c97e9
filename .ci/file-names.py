#!/usr/bin/env python3
"""One meaning per file name across the workspace's crates.

A module's file name says what it holds, and a reader who knows a name in one crate
reads it the same way in the next: `registry.rs` once held Porter's registry of
credentials in one crate and the set of tool instances in another. Lists the `.rs`
files under each workspace member's `src/` (its library, binaries and their modules;
tests, benches and examples are cargo targets, named for what they exercise) and
leaves out the names whose meaning Rust's layout fixes (`lib.rs`, `main.rs`, `mod.rs`,
and `tests.rs`, a module's unit tests). A name found in two or more crates must be in
SHARED, which gives the one meaning it has in each; an entry no longer found in two
crates is an error too, so the table says only what is true. The table in DOCUMENT's
house rules must say the same, row for row. Prints each problem with the files it
names and exits 1 when there is one. Run from the repository root.
"""

import collections
import pathlib
import re
import sys
import tomllib

DOCUMENT = pathlib.Path("docs/architecture.md")
# A row of DOCUMENT's table: | `name.rs` | meaning |
ROW = re.compile(r"^\| `([A-Za-z0-9_]+\.rs)` \| (.+) \|$", re.MULTILINE)

# Names whose meaning Rust's module layout fixes.
STRUCTURAL = {"lib.rs", "main.rs", "mod.rs", "tests.rs"}

# A file name in several crates: the one meaning it has in every one of them.
SHARED = {
    "attachments.rs": "the files a person sent with a message: where they are kept, what the model sees of them",
    "browser.rs": "the sandbox's headless browser: its wire messages, the runner's Chromium",
    "channel_settings.rs": "a channel's `settings` and `secrets`: the keys each kind takes, reading them",
    "command_env.rs": "the environment one sandbox command gets: Porter's proxy settings, the runner's clean base",
    "control.rs": "Porter's control socket: its messages, the daemon's handler",
    "events.rs": "publishing Kubernetes Events about Saint's objects (the agent's on its own SaintBot)",
    "identity.rs": "channel identities, who a message is from: parsed, linked to Contacts, resolved to a contact and role",
    "inbound.rs": "taking in an incoming message: a raw mail made an inbox entry, a stored message made a turn",
    "mcp.rs": "MCP tool servers (`spec.mcp`, the config's `mcp`): the CRD, the contract, the operator's rendering",
    "media.rs": "the bot's `media` section (transcription, speech): the CRD, the contract, the operator's rendering",
    "message.rs": "a message to or from a person on a channel: its stored shape, the tool that sends one",
    "metrics.rs": "the process's Prometheus metrics",
    "model.rs": "the bot's model chain (`model`): the agent's resolved chain, the operator's rendering",
    "openai.rs": "an OpenAI-compatible HTTP API: chat completions, embeddings",
    "porter.rs": "Porter, the credential sidecar: its binary, the operator's rendering of its registry",
    "process.rs": "background processes in a sandbox: their wire messages, the `process` tool",
    "server.rs": "a daemon's serving loop: binding its sockets, serving connections, shutting down",
    "service_account.rs": "a Kubernetes ServiceAccount: the agent's, built by the operator; one the e2e tests act as",
    "session_directory.rs": "the session tools' read access to sessions: the trait and the session store's impl",
    "startup.rs": "what a subsystem does once as the agent starts: memory's start, the channels' checks",
    "state.rs": "what every connection or route of a server shares",
    "telemetry.rs": "traces over OpenTelemetry (`telemetry`): the agent's exporter, the operator's rendering",
    "transcription.rs": "speech to text (`media.transcription`): the agent's client, the operator's rendering",
    "validate.rs": "checking a bot's configuration beyond its types: the rendered config, the SaintBot",
    "webhook.rs": "a platform's signed inbound deliveries: the agent's endpoint, each platform's parsing",
}


def crates() -> dict[str, list[pathlib.Path]]:
    """Each member's source files, by member directory."""
    members = tomllib.loads(pathlib.Path("Cargo.toml").read_text())["workspace"]["members"]
    return {member: sorted(pathlib.Path(member, "src").rglob("*.rs")) for member in members}


def documented() -> list[str]:
    """How DOCUMENT's table differs from SHARED, one line a difference."""
    rows = dict(ROW.findall(DOCUMENT.read_text()))
    problems = []
    for name in sorted(set(rows) | set(SHARED)):
        if name not in rows:
            problems.append(f"{name} is in SHARED but has no row in {DOCUMENT}'s table of shared file names")
        elif name not in SHARED:
            problems.append(f"{name} has a row in {DOCUMENT}'s table of shared file names but is not in SHARED")
        elif rows[name] != SHARED[name]:
            problems.append(f'{name}: {DOCUMENT} says "{rows[name]}", SHARED says "{SHARED[name]}"')
    return problems


def main() -> int:
    found: dict[str, dict[str, list[pathlib.Path]]] = collections.defaultdict(dict)
    for member, files in crates().items():
        for path in files:
            if path.name not in STRUCTURAL:
                found[path.name].setdefault(member, []).append(path)
    shared = {name: by_crate for name, by_crate in found.items() if len(by_crate) > 1}
    failed = False
    for name in sorted(set(shared) - set(SHARED)):
        failed = True
        paths = ", ".join(path.as_posix() for files in shared[name].values() for path in files)
        print(
            f"{name} is a file name in {len(shared[name])} crates ({paths}): if it means one thing "
            f"in all of them, add it to SHARED in .ci/file-names.py with that meaning; otherwise "
            f"rename the files until each name means one thing",
            file=sys.stderr,
        )
    for name in sorted(set(SHARED) - set(shared)):
        failed = True
        print(
            f"{name} is in SHARED but no longer a file name in two crates: remove it from SHARED "
            f"in .ci/file-names.py (and from the table in docs/architecture.md)",
            file=sys.stderr,
        )
    for problem in documented():
        failed = True
        print(problem, file=sys.stderr)
    if not failed:
        print(f"file names: {len(SHARED)} shared by several crates, each with one meaning")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
