#!/usr/bin/env python3
"""Tests of the images build.sh writes, and of the Dockerfiles they come from.

Run through e2e/images/test.sh (it builds the images first and passes their directory
in SAINT_IMAGES_DIR). Needs root: the checks run each image's programs in a chroot of
its unpacked root, as the image's user, and start a throwaway containerd.

- The Dockerfiles: each final stage parses; anything the offline build does not
  understand fails with the Dockerfile line (shown here with one broken Dockerfile per
  kind of instruction); the USER lines are saint_config::uids.
- Each archive: its index names the chart's reference; its config is exactly the
  Dockerfile's final stage (user, entrypoint, env, workdir); non-root; no shell in
  operator, agent and porter; the entrypoint exists and runs `--help` in a chroot (so
  its libraries are all there); the porter image holds `porter` alone (no CLI); the
  sandbox has the userland the Dockerfile installs, gh runs and git reaches the point
  of connecting over HTTPS, and it runs the bot's init container command as 65532.
- containerd 1.6 (Debian's) imports every archive under its reference, and runc runs
  each image with a read-only root as its user.
- skopeo pushes each archive to a registry (Debian's, on a loopback port).
- A rebuild gives the same bytes (fixed timestamps).
- `saint_images.py derive` adds a file and environment variables to an image under
  another reference.
- The agent image holds the embedding model memory loads by default (the published
  sha256, readable by all), and `saint-agent run` in it, as its user with memory at its
  defaults, loads it and embeds a note; without it the same run refuses to start.
- `.dockerignore` keeps target/ and .git out of `docker build`'s context, and no file a
  Dockerfile copies.
"""

from __future__ import annotations

import json
import os
import re
import select
import shlex
import shutil
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
import unittest
from pathlib import Path
from typing import ClassVar

# No __pycache__ in the repository's tree.
sys.dont_write_bytecode = True
sys.path.insert(0, str(Path(__file__).resolve().parent))
import saint_images  # noqa: E402

REPOSITORY_ROOT = saint_images.REPOSITORY_ROOT
SHELLS = ["bin/sh", "usr/bin/sh", "bin/dash", "usr/bin/dash", "bin/bash", "usr/bin/bash", "bin/busybox", "usr/bin/busybox"]


def images_dir() -> Path:
    value = os.environ.get("SAINT_IMAGES_DIR")
    if not value:
        raise RuntimeError("SAINT_IMAGES_DIR is not set: run e2e/images/test.sh, which builds the images first")
    return Path(value)


def app_version() -> str:
    match = re.search(r'^appVersion:\s*"?([^"\s]+)"?', (REPOSITORY_ROOT / "charts/saint/Chart.yaml").read_text(), re.MULTILINE)
    assert match, "charts/saint/Chart.yaml has no appVersion"
    return match.group(1)


def uids() -> dict[str, int]:
    text = (REPOSITORY_ROOT / "agent-pod/config/src/uids.rs").read_text()
    return {name: int(value) for name, value in re.findall(r"pub const ([A-Z_]+): u32 = ([0-9]+);", text)}


def archive(name: str) -> Path:
    path = images_dir() / f"saint-{name}-{app_version()}.oci.tar"
    assert path.is_file(), f"{path} was not built"
    return path


def plan(name: str) -> saint_images.FinalPlan:
    return saint_images.final_plan(saint_images.parse_dockerfile(REPOSITORY_ROOT / saint_images.IMAGES[name]))


class Unpacked:
    """An archive's layout and root filesystem (umoci unpack) in a temporary directory."""

    cache: ClassVar[dict[str, Unpacked]] = {}

    def __init__(self, name: str) -> None:
        self.directory = Path(tempfile.mkdtemp(prefix=f"saint-image-test-{name}-"))
        layout = self.directory / "layout"
        layout.mkdir()
        with tarfile.open(archive(name)) as tar:
            # Extraction filters came with Python 3.11.4; Debian 12's python3 is 3.11.2, and
            # its extractall trusts the archive as "fully_trusted" does (our own build's).
            if hasattr(tarfile, "fully_trusted_filter"):
                tar.extractall(layout, filter="fully_trusted")
            else:
                tar.extractall(layout)
        self.index = json.loads((layout / "index.json").read_text())
        tag = self.index["manifests"][0]["annotations"]["org.opencontainers.image.ref.name"]
        subprocess.run(["umoci", "unpack", "--image", f"{layout}:{tag}", str(self.directory / "bundle")], check=True, capture_output=True)
        self.rootfs = self.directory / "bundle/rootfs"
        inspected = subprocess.run(["skopeo", "inspect", "--config", f"oci-archive:{archive(name)}"], check=True, capture_output=True, text=True)
        self.config = json.loads(inspected.stdout)

    @classmethod
    def of(cls, name: str) -> Unpacked:
        if name not in cls.cache:
            cls.cache[name] = cls(name)
        return cls.cache[name]

    @classmethod
    def remove_all(cls) -> None:
        for unpacked in cls.cache.values():
            shutil.rmtree(unpacked.directory, ignore_errors=True)
        cls.cache.clear()

    def path(self, inside: str) -> Path:
        return self.rootfs / inside.lstrip("/")

    def chroot_command(self, user: str, *command: str) -> list[str]:
        """A command in a chroot of the root as `user` (uid:gid), with /proc and /dev as
        a container runtime gives them, in a private mount namespace. Every step execs,
        so the process started is the command itself."""
        script = (
            'set -e; root=$1; shift; user=$1; shift; mkdir -p "$root/proc" "$root/dev"; '
            'mount -t proc proc "$root/proc"; mount --rbind /dev "$root/dev"; '
            'exec chroot --userspec="$user" "$root" "$@"'
        )
        return ["unshare", "--mount", "--propagation", "private", "--", "/bin/sh", "-c", script, "sh", str(self.rootfs), user, *command]

    def environment(self, **extra: str) -> dict[str, str]:
        """The image's Env, plus `extra`."""
        return {variable.split("=", 1)[0]: variable.split("=", 1)[1] for variable in self.config["config"].get("Env", [])} | extra

    def run(self, user: str, *command: str, check: bool = True) -> subprocess.CompletedProcess:
        """Runs a command in a chroot of the root as `user` (see chroot_command)."""
        result = subprocess.run(
            self.chroot_command(user, *command),
            env=self.environment(),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if check and result.returncode != 0:
            raise AssertionError(f"{' '.join(command)} as {user} failed (exit {result.returncode}):\n{result.stdout}\n{result.stderr}")
        return result


def tearDownModule() -> None:  # unittest's name for the module's cleanup
    Unpacked.remove_all()


class DockerfilesTest(unittest.TestCase):
    def test_every_final_stage_is_understood_by_the_offline_build(self) -> None:
        for name in saint_images.IMAGES:
            with self.subTest(image=name):
                final = plan(name)
                self.assertTrue(final.entrypoint)

    def test_the_images_run_as_saint_config_uids(self) -> None:
        ids = uids()
        expected = {
            "operator": f"{ids['AGENT_UID']}:{ids['SHARED_GID']}",
            "agent": f"{ids['AGENT_UID']}:{ids['SHARED_GID']}",
            "porter": f"{ids['PORTER_UID']}:{ids['SHARED_GID']}",
            "sandbox": f"{ids['SANDBOX_UID']}:{ids['SHARED_GID']}",
        }
        self.assertEqual({name: plan(name).user for name in saint_images.IMAGES}, expected)

    def test_passwd_names_the_saint_ids(self) -> None:
        ids = uids()
        passwd = {line.split(":")[0]: line.split(":") for line in (REPOSITORY_ROOT / "e2e/images/etc/passwd").read_text().splitlines()}
        self.assertEqual((passwd["saint"][2], passwd["saint"][3]), (str(ids["AGENT_UID"]), str(ids["SHARED_GID"])))
        self.assertEqual((passwd["porter"][2], passwd["porter"][3]), (str(ids["PORTER_UID"]), str(ids["SHARED_GID"])))
        self.assertEqual((passwd["sandbox"][2], passwd["sandbox"][3]), (str(ids["SANDBOX_UID"]), str(ids["SHARED_GID"])))
        self.assertIn(f"saint:x:{ids['SHARED_GID']}:", (REPOSITORY_ROOT / "e2e/images/etc/group").read_text().splitlines())

    def test_what_the_offline_build_does_not_understand_fails_with_the_line(self) -> None:
        header = "FROM rust:1-bookworm AS build\nRUN cargo build\n"
        distroless = header + "FROM gcr.io/distroless/cc-debian12:nonroot\n"
        debian = header + "FROM debian:bookworm-slim\n"
        tail = 'USER 65532:65532\nENTRYPOINT ["/x"]\n'
        broken = {
            "LABEL": distroless + "LABEL a=b\n" + tail,
            "ADD": distroless + "ADD x /x\n" + tail,
            "EXPOSE": distroless + "EXPOSE 80\n" + tail,
            "HEALTHCHECK": distroless + "HEALTHCHECK CMD /x\n" + tail,
            "VOLUME": debian + "VOLUME /data\n" + tail,
            "SHELL": debian + 'SHELL ["/bin/bash", "-c"]\n' + tail,
            "RUN needs a shell": distroless + "RUN true\n" + tail,
            "RUN after USER": debian + "USER 65532:65532\nRUN true\n" + 'ENTRYPOINT ["/x"]\n',
            "RUN --mount": debian + "RUN --mount=type=cache,target=/x true\n" + tail,
            "must be a JSON array": distroless + "USER 65532:65532\nENTRYPOINT /x\n",
            "USER must be numeric": distroless + 'USER nonroot\nENTRYPOINT ["/x"]\n',
            "runs as root": distroless + 'USER 0:0\nENTRYPOINT ["/x"]\n',
            "no USER": distroless + 'ENTRYPOINT ["/x"]\n',
            "COPY --chown": distroless + "COPY --chown=1:1 --from=build /out/x /x\n" + tail,
            "wildcards": distroless + "COPY --from=build /out/* /x/\n" + tail,
            "no recipe for the base image": header + "FROM alpine:3\n" + tail,
            "FROM --platform": header + "FROM --platform=linux/arm64 debian:bookworm-slim\n" + tail,
            "${NAME:-default}": "ARG A=b\n" + distroless + "ENV X=${A:-c}\n" + tail,
            "no default": distroless + "ARG UNSET\n" + tail,
        }
        with tempfile.TemporaryDirectory() as directory:
            for case, text in broken.items():
                with self.subTest(case=case):
                    path = Path(directory) / "Dockerfile"
                    path.write_text(text)
                    with self.assertRaises(saint_images.BuildError) as raised:
                        saint_images.final_plan(saint_images.parse_dockerfile(path))
                    message = str(raised.exception)
                    self.assertRegex(message, r"Dockerfile:[0-9]+", f"{case}: the message names no line: {message}")


def dockerignored(path: str, patterns: list[str]) -> bool:
    """Whether Docker's context leaves `path` out: a pattern (leading / dropped, `**`
    any number of directories) matching the path or one of its parent directories; the
    last matching pattern wins, `!` re-includes."""

    def matches(pattern: str, candidate: str) -> bool:
        expression = ""
        for part in re.split(r"(\*\*/?|\*|\?)", pattern.strip("/")):
            if part.startswith("**"):
                expression += "(.*/)?" if part.endswith("/") else ".*"
            elif part == "*":
                expression += "[^/]*"
            elif part == "?":
                expression += "[^/]"
            else:
                expression += re.escape(part)
        return re.fullmatch(expression, candidate) is not None

    parts = path.strip("/").split("/")
    candidates = ["/".join(parts[: length]) for length in range(1, len(parts) + 1)]
    excluded = False
    for pattern in patterns:
        negated = pattern.startswith("!")
        if any(matches(pattern.removeprefix("!"), candidate) for candidate in candidates):
            excluded = not negated
    return excluded


class DockerignoreTest(unittest.TestCase):
    """`docker build` from the root sends neither cargo's target directory nor .git, and
    still sends every file a Dockerfile copies from the context."""

    def patterns(self) -> list[str]:
        path = REPOSITORY_ROOT / ".dockerignore"
        self.assertTrue(path.is_file(), "there is no .dockerignore at the repository root")
        return [line.strip() for line in path.read_text().splitlines() if line.strip() and not line.lstrip().startswith("#")]

    def test_build_output_and_history_stay_out(self) -> None:
        patterns = self.patterns()
        for path in ("target/release/saint-agent", ".git/HEAD", "e2e/.work/run/log", "web/node_modules/x/index.js", "bot-config.json", "porter.json"):
            with self.subTest(path=path):
                self.assertTrue(dockerignored(path, patterns), f"{path} would be sent to docker build")

    def test_every_file_the_dockerfiles_copy_is_sent(self) -> None:
        patterns = self.patterns()
        tracked = subprocess.run(["git", "-C", str(REPOSITORY_ROOT), "ls-files"], check=True, capture_output=True, text=True).stdout.splitlines()
        for name in saint_images.IMAGES:
            dockerfile = saint_images.parse_dockerfile(REPOSITORY_ROOT / saint_images.IMAGES[name])
            for stage in dockerfile.stages:
                for instruction in stage.instructions:
                    words = shlex.split(instruction.arguments) if instruction.keyword == "COPY" else []
                    if not words or any(word.startswith("--from=") for word in words):
                        continue
                    sources = [word for word in words if not word.startswith("--")][:-1]
                    # `COPY . .` (the cargo stages): every tracked file but the ignore files themselves.
                    paths = [path for path in tracked if path not in (".gitignore", ".dockerignore")] if sources == ["."] else sources
                    for path in paths:
                        with self.subTest(image=name, stage=stage.name, path=path):
                            self.assertFalse(dockerignored(path, patterns), f"{path} is copied by {saint_images.IMAGES[name]} but .dockerignore leaves it out")


class ArchivesTest(unittest.TestCase):
    def test_each_index_names_the_chart_reference(self) -> None:
        for name in saint_images.IMAGES:
            with self.subTest(image=name):
                descriptor = Unpacked.of(name).index["manifests"]
                self.assertEqual(len(descriptor), 1)
                annotations = descriptor[0]["annotations"]
                self.assertEqual(annotations["io.containerd.image.name"], f"ghcr.io/saint-work/saint-{name}:{app_version()}")
                self.assertEqual(annotations["org.opencontainers.image.ref.name"], app_version())

    def test_each_config_is_the_dockerfile_final_stage(self) -> None:
        for name in saint_images.IMAGES:
            with self.subTest(image=name):
                final, config = plan(name), Unpacked.of(name).config["config"]
                self.assertEqual(config.get("User"), final.user)
                self.assertEqual(config.get("Entrypoint"), final.entrypoint)
                self.assertEqual(config.get("Cmd"), final.command)
                self.assertEqual(config.get("WorkingDir") or None, final.workdir)
                self.assertEqual(config.get("Env"), [f"{variable}={value}" for variable, value in final.environment.items()])
                self.assertNotEqual(config["User"].split(":")[0], "0")

    def test_each_dockerfile_copy_is_in_the_image(self) -> None:
        for name in saint_images.IMAGES:
            final, unpacked = plan(name), Unpacked.of(name)
            for copy in final.copies:
                for source in copy.sources:
                    if source.endswith("/"):
                        continue  # a directory's contents; checked by the programs below
                    destination = copy.destination
                    if destination.endswith("/") or len(copy.sources) > 1:
                        destination = destination.rstrip("/") + "/" + Path(source).name
                    with self.subTest(image=name, path=destination):
                        self.assertTrue(unpacked.path(destination).is_file(), f"{destination} is missing")
                        if copy.source_stage is None:
                            expected = (REPOSITORY_ROOT / source).read_bytes()
                            self.assertEqual(unpacked.path(destination).read_bytes(), expected)

    def test_operator_agent_and_porter_have_no_shell(self) -> None:
        for name in ("operator", "agent", "porter"):
            rootfs = Unpacked.of(name).rootfs
            for shell in SHELLS:
                with self.subTest(image=name, shell=shell):
                    self.assertFalse(os.path.lexists(rootfs / shell), f"{name} has /{shell}")

    def test_each_entrypoint_exists_and_is_executable(self) -> None:
        for name in saint_images.IMAGES:
            with self.subTest(image=name):
                unpacked = Unpacked.of(name)
                program = unpacked.path(unpacked.config["config"]["Entrypoint"][0])
                self.assertTrue(program.is_file(), f"{program} is missing")
                self.assertTrue(program.stat().st_mode & 0o111, f"{program} is not executable")

    def test_each_binary_runs_help_as_the_image_user(self) -> None:
        commands = [
            ("operator", ["/usr/local/bin/saint-operator", "--help"]),
            ("agent", ["/usr/local/bin/saint-agent", "--help"]),
            # The chart's shared embedder runs the agent image with this command.
            ("agent", ["/usr/local/bin/saint-embedder", "--help"]),
            ("porter", ["/usr/local/bin/porter", "--help"]),
            ("sandbox", ["/usr/local/bin/saint-sandbox-runner", "--help"]),
        ]
        for name, command in commands:
            with self.subTest(image=name, program=command[0]):
                unpacked = Unpacked.of(name)
                result = unpacked.run(unpacked.config["config"]["User"], *command)
                self.assertIn("Usage", result.stdout + result.stderr)

    def test_distroless_images_have_certificates_passwd_and_tmp(self) -> None:
        for name in ("operator", "agent", "porter"):
            with self.subTest(image=name):
                unpacked = Unpacked.of(name)
                certificates = unpacked.path("/etc/ssl/certs/ca-certificates.crt")
                self.assertGreater(certificates.stat().st_size, 100_000)
                self.assertEqual(unpacked.path("/etc/passwd").read_text(), (REPOSITORY_ROOT / "e2e/images/etc/passwd").read_text())
                self.assertEqual(unpacked.path("/tmp").stat().st_mode & 0o7777, 0o1777)

    def test_porter_holds_porter_alone_and_no_cli(self) -> None:
        porter = Unpacked.of("porter")
        self.assertEqual(os.listdir(porter.path("/usr/local/bin")), ["porter"])
        for cli in ("/usr/bin/gh", "/usr/bin/git", "/usr/lib/git-core", "/usr/bin/curl"):
            with self.subTest(cli=cli):
                self.assertFalse(os.path.lexists(porter.path(cli)), f"{cli} is in the porter image")
        # Its defaults are saint_config::sandbox_contract's proxy socket and CA paths.
        help_text = porter.run(porter.config["config"]["User"], "/usr/local/bin/porter", "--help").stdout
        self.assertIn("/run/saint/porter/proxy.sock", help_text)
        self.assertIn("/run/saint/porter/ca.pem", help_text)

    def test_sandbox_has_the_userland_and_runs_the_init_container_command(self) -> None:
        sandbox = Unpacked.of("sandbox")
        user = sandbox.config["config"]["User"]
        for command in (
            ["/bin/sh", "-c", "echo ok"],
            ["python3", "-c", "print(1 + 1)"],
            ["jq", "--version"],
            ["git", "--version"],
            ["gh", "--version"],
            ["tini", "--version"],
            ["tree", "--version"],
        ):
            with self.subTest(command=command[0]):
                sandbox.run(user, "/usr/bin/env", f"PATH={saint_images.DEFAULT_PATH}", *command)
        self.assertIn("gh version 2.", sandbox.run(user, "/usr/bin/gh", "--version").stdout)
        # The CLIs run here and reach their hosts through Porter's proxy: git must get as
        # far as connecting over HTTPS (a closed port on loopback), which needs
        # git-remote-https and libcurl's whole TLS stack to load.
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        result = sandbox.run(user, "/usr/bin/git", "ls-remote", f"https://127.0.0.1:{port}/saint.git", check=False)
        self.assertNotEqual(result.returncode, 0)
        self.assertRegex(result.stderr, r"(Failed to connect|Could not connect|Connection refused)", result.stderr)
        agent_directory = sandbox.path("/agent")
        self.assertTrue(agent_directory.is_dir())
        self.assertEqual(agent_directory.stat().st_mode & 0o7777, 0o555)
        self.assertTrue(sandbox.path("/workspace").is_dir())
        self.assertTrue(os.access(sandbox.path("/usr/local/bin/saint-sandbox-entrypoint"), os.X_OK))
        self.assertIn("*", sandbox.run(user, "/usr/bin/git", "config", "--system", "--get-all", "safe.directory").stdout)
        # The bot Deployment's init container: /bin/sh -c as the agent's uid 65532.
        golden = (REPOSITORY_ROOT / "operator/tests/golden/deployment.yaml").read_text()
        script = re.search(r"- /bin/sh\n\s+- -c\n\s+- (set -eu;.*)\n", golden)
        self.assertIsNotNone(script, "operator/tests/golden/deployment.yaml has no /bin/sh -c init container")
        base = "/tmp/saint-init-check"
        result = sandbox.run(
            f"{uids()['AGENT_UID']}:{uids()['SHARED_GID']}",
            "/bin/sh", "-c", script.group(1), "prepare-workspace", f"{base}/run/porter", f"{base}/run/sandboxes", f"{base}/logs", f"{base}/logs/porter.jsonl",
        )
        self.assertEqual(result.returncode, 0)
        self.assertEqual(sandbox.path(f"{base}/logs").stat().st_mode & 0o777, 0o770)

    def test_no_apt_lists_or_documentation_in_the_sandbox(self) -> None:
        sandbox = Unpacked.of("sandbox")
        self.assertEqual(os.listdir(sandbox.path("/var/lib/apt/lists")) if sandbox.path("/var/lib/apt/lists").exists() else [], [])
        leftovers = [path for path in sandbox.path("/usr/share/doc").rglob("*") if path.is_file() and path.name != "copyright"]
        self.assertEqual(leftovers, [])


def published_model_sums() -> dict[str, str]:
    """The sha256 of each model file, as agent-pod/memory/fetch-model.sh checks them."""
    text = (REPOSITORY_ROOT / "agent-pod/memory/fetch-model.sh").read_text()
    sums = {name: digest for digest, name in re.findall(r"^([0-9a-f]{64})  (\S+)$", text, re.MULTILINE)}
    assert set(sums) == {"model.safetensors", "config.json", "tokenizer.json"}, f"fetch-model.sh lists {sorted(sums)}"
    return sums


class AgentMemoryTest(unittest.TestCase):
    """Memory is on by default and the agent refuses to start without its embedding
    model: the image ships it where the default config looks."""

    MODEL_DIR = "/opt/saint/models/all-MiniLM-L6-v2"

    def test_the_agent_image_holds_the_published_model_readable_by_all(self) -> None:
        agent = Unpacked.of("agent")
        default = re.search(r'model_dir: "([^"]+)"\.to_string\(\)', (REPOSITORY_ROOT / "agent-pod/config/src/lib.rs").read_text())
        self.assertIsNotNone(default, "agent-pod/config/src/lib.rs names no default model_dir")
        self.assertEqual(default.group(1), self.MODEL_DIR)
        for name, digest in published_model_sums().items():
            with self.subTest(file=name):
                path = agent.path(f"{self.MODEL_DIR}/{name}")
                self.assertTrue(path.is_file(), f"{self.MODEL_DIR}/{name} is missing")
                self.assertEqual(saint_images.sha256_file(path), digest)
                # Root's and not writable by others; world-readable, through directories
                # everyone may enter: the agent's uid reads it (the run below loads it).
                status = path.stat()
                self.assertEqual((status.st_uid, status.st_mode & 0o7777), (0, 0o644))
                for directory in [agent.path("/"), *[agent.path(str(parent)) for parent in Path(f"{self.MODEL_DIR}/{name}").parents if str(parent) != "/"]]:
                    mode = directory.stat().st_mode
                    self.assertEqual(mode & 0o005, 0o005, f"{directory} is not readable and searchable by others")
                    self.assertEqual(mode & 0o002, 0, f"{directory} is writable by others")

    def start_agent(self, name: str, memory: dict | None) -> tuple[subprocess.Popen, Path]:
        """`saint-agent run` in a chroot of the agent image, as the image's user, with the
        example bot's config (memory as given; None: the defaults, as the example company
        bot has), loopback ports the kernel picks, a model endpoint nothing answers on,
        and a memory note to index."""
        agent = Unpacked.of("agent")
        config = json.loads((REPOSITORY_ROOT / "agent-pod/config/tests/fixtures/acme-bot-config.json").read_text())
        config.pop("memory", None)
        if memory is not None:
            config["memory"] = memory
        config["model"]["baseUrl"] = "http://127.0.0.1:9"
        inside = f"/tmp/saint-memory-check-{name}"
        base = agent.path(inside)
        shutil.rmtree(base, ignore_errors=True)
        (base / "workspace/memory").mkdir(parents=True)
        (base / "workspace/memory/prices.md").write_text("# Prices\n\nAn anvil costs 40 euros.\n")
        (base / "bot-config.json").write_text(json.dumps(config))
        uid, gid = (int(part) for part in agent.config["config"]["User"].split(":"))
        for directory, _, files in os.walk(base):
            for entry in [directory, *(os.path.join(directory, file) for file in files)]:
                os.chown(entry, uid, gid)
        process = subprocess.Popen(
            agent.chroot_command(
                agent.config["config"]["User"], *agent.config["config"]["Entrypoint"], "run",
                "--config", f"{inside}/bot-config.json", "--workspace", f"{inside}/workspace",
                "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0",
            ),
            env=agent.environment(
                SAINT_MODEL_API_KEY="sk-unused", SAINT_CHANNEL_API_TOKEN="unused",
                # What the operator's pod mounts at /var/lib/saint; here a directory the user owns.
                SAINT_SANDBOX_STATE=f"{inside}/sandbox-state",
            ),
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        )
        return process, base

    def read_until(self, process: subprocess.Popen, done, seconds: float) -> str:
        """The process's output until `done(output)` holds, it exits, or the deadline passes."""
        output, deadline = b"", time.monotonic() + seconds
        while not done(output.decode(errors="replace")) and time.monotonic() < deadline:
            ready, _, _ = select.select([process.stdout], [], [], max(0.0, min(1.0, deadline - time.monotonic())))
            if ready:
                chunk = os.read(process.stdout.fileno(), 65536)
                if not chunk:
                    break
                output += chunk
        return output.decode(errors="replace")

    def stop(self, process: subprocess.Popen) -> None:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=30)
        process.stdout.close()

    def test_the_agent_starts_with_default_memory_as_its_user_and_embeds_a_note(self) -> None:
        process, base = self.start_agent("default", None)
        try:
            output = self.read_until(process, lambda text: "memory reindex finished" in text and "saint-agent listening" in text, 90)
            self.assertIsNone(process.poll(), f"saint-agent exited (status {process.returncode}):\n{output[-4000:]}")
            finished = [json.loads(line) for line in output.splitlines() if "memory reindex finished" in line]
            self.assertTrue(finished, f"no 'memory reindex finished' within 90 s:\n{output[-4000:]}")
            # The note was embedded with the image's model: inference ran, not only the load.
            self.assertEqual(finished[0]["fields"]["chunks_embedded"], 1, finished[0])
            self.assertRegex(output, r"saint-agent listening http=127\.0\.0\.1:[0-9]+")
        finally:
            self.stop(process)
            shutil.rmtree(base, ignore_errors=True)

    def test_without_the_model_the_same_agent_refuses_to_start(self) -> None:
        """The check above could fail: pointed at a directory without the model, the same
        run exits at start, saying memory could not start."""
        missing = {"embeddings": {"kind": "local", "modelDir": "/opt/saint/models/absent"}}
        process, base = self.start_agent("missing", missing)
        try:
            # Until its output ends (it exits, or the deadline passes); then it must be gone.
            output = self.read_until(process, lambda text: False, 60)
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.fail(f"saint-agent kept running without its model:\n{output[-4000:]}")
            self.assertNotEqual(process.returncode, 0)
            self.assertIn("failed to start memory", output)
            self.assertNotIn("saint-agent listening", output)
        finally:
            self.stop(process)
            shutil.rmtree(base, ignore_errors=True)


class ReproducibleTest(unittest.TestCase):
    def test_a_rebuild_gives_the_same_bytes(self) -> None:
        """Fixed timestamps: the same inputs give the same digests, so a rebuilt cache
        pushes and imports nothing new."""
        with tempfile.TemporaryDirectory(prefix="saint-rebuild-") as directory:
            subprocess.run(
                [str(Path(saint_images.__file__).with_name("build.sh")), "--output", directory, "operator", "sandbox"],
                check=True, capture_output=True, text=True,
            )
            for name in ("operator", "sandbox"):
                with self.subTest(image=name):
                    rebuilt = Path(directory) / archive(name).name
                    self.assertEqual(saint_images.sha256_file(rebuilt), saint_images.sha256_file(archive(name)))


class DeriveTest(unittest.TestCase):
    def test_derive_adds_a_file_and_environment_under_another_reference(self) -> None:
        directory = Path(tempfile.mkdtemp(prefix="saint-derive-test-"))
        try:
            certificate = directory / "upstream-ca.pem"
            certificate.write_text("not a real certificate\n")
            output = directory / "porter-e2e.oci.tar"
            subprocess.run(
                [sys.executable, str(Path(saint_images.__file__)), "derive", "--archive", str(archive("porter")),
                 "--reference", "ghcr.io/saint-work/saint-porter-e2e:test", "--output", str(output),
                 "--add", f"{certificate}:/etc/saint-e2e/upstream-ca.pem:0644",
                 "--env", "PORTER_UPSTREAM_CA_FILE=/etc/saint-e2e/upstream-ca.pem",
                 "--env", "PORTER_UPSTREAM_OVERRIDES=api.github.com=203.0.113.1:443,github.com=203.0.113.1:443"],
                check=True, capture_output=True, text=True,
            )
            with tarfile.open(output) as tar:
                index = json.load(tar.extractfile("index.json"))
            self.assertEqual(index["manifests"][0]["annotations"]["io.containerd.image.name"], "ghcr.io/saint-work/saint-porter-e2e:test")
            layout, bundle = directory / "layout", directory / "bundle"
            layout.mkdir()
            subprocess.run(["tar", "-C", str(layout), "-xf", str(output)], check=True)
            subprocess.run(["umoci", "unpack", "--image", f"{layout}:test", str(bundle)], check=True, capture_output=True)
            added = bundle / "rootfs/etc/saint-e2e/upstream-ca.pem"
            self.assertEqual(added.read_text(), "not a real certificate\n")
            self.assertEqual((added.stat().st_mode & 0o777, added.stat().st_uid), (0o644, 0))
            self.assertTrue((bundle / "rootfs/usr/local/bin/porter").is_file())
            config = json.loads(subprocess.run(["skopeo", "inspect", "--config", f"oci-archive:{output}"], check=True, capture_output=True, text=True).stdout)
            self.assertEqual(config["config"]["User"], plan("porter").user)
            # The image's own environment, then the variables added.
            self.assertEqual(
                config["config"]["Env"],
                [f"{variable}={value}" for variable, value in plan("porter").environment.items()]
                + ["PORTER_UPSTREAM_CA_FILE=/etc/saint-e2e/upstream-ca.pem",
                   "PORTER_UPSTREAM_OVERRIDES=api.github.com=203.0.113.1:443,github.com=203.0.113.1:443"],
            )
        finally:
            shutil.rmtree(directory, ignore_errors=True)


class ContainerdImportTest(unittest.TestCase):
    """Debian's containerd 1.6, started under a temporary directory with its own root,
    state and socket, imports each archive under the chart's reference, and runc starts
    each image from it."""

    def test_ctr_import_yields_the_chart_references(self) -> None:
        version = subprocess.run(["containerd", "--version"], check=True, capture_output=True, text=True).stdout
        self.assertIn(" 1.6.", version)
        directory = Path(tempfile.mkdtemp(prefix="saint-containerd-"))
        address = directory / "containerd.sock"
        (directory / "config.toml").write_text(
            "version = 2\n"
            f'root = "{directory}/root"\nstate = "{directory}/state"\n'
            'disabled_plugins = ["io.containerd.grpc.v1.cri"]\n'
            f'[grpc]\n  address = "{address}"\n'
            f'[ttrpc]\n  address = "{directory}/containerd.ttrpc.sock"\n'
            f'[plugins."io.containerd.internal.v1.opt"]\n  path = "{directory}/opt"\n'
        )
        log = open(directory / "containerd.log", "w")
        process = subprocess.Popen(["containerd", "--config", str(directory / "config.toml")], stdout=log, stderr=log)
        try:
            deadline = time.monotonic() + 30
            while subprocess.run(["ctr", "--address", str(address), "version"], capture_output=True, check=False).returncode != 0:
                self.assertIsNone(process.poll(), f"containerd exited: {(directory / 'containerd.log').read_text()[-2000:]}")
                self.assertLess(time.monotonic(), deadline, "containerd did not answer within 30 s")
                time.sleep(0.2)
            expected = []
            for name in saint_images.IMAGES:
                subprocess.run(
                    ["ctr", "--address", str(address), "-n", "k8s.io", "images", "import", "--all-platforms", str(archive(name))],
                    check=True, capture_output=True, text=True,
                )
                expected.append(f"ghcr.io/saint-work/saint-{name}:{app_version()}")
            listed = subprocess.run(["ctr", "--address", str(address), "-n", "k8s.io", "images", "ls", "-q"], check=True, capture_output=True, text=True)
            self.assertEqual(sorted(listed.stdout.split()), sorted(expected))
            # Unpacked for the snapshotter a kubelet uses: the layers are valid.
            for reference in expected:
                checked = subprocess.run(["ctr", "--address", str(address), "-n", "k8s.io", "images", "check", f"name=={reference}"], check=True, capture_output=True, text=True)
                self.assertIn("complete", checked.stdout)
            # Started by runc as a kubelet would: read-only root, the image's user.
            runs = {
                "operator": (["/usr/local/bin/saint-operator", "--help"], "Usage"),
                "agent": (["/usr/local/bin/saint-agent", "--help"], "Usage"),
                "porter": (["/usr/local/bin/porter", "--version"], "porter "),
                "sandbox": (["/bin/sh", "-c", "id -u; id -g; python3 -c 'print(6 * 7)'"], f"{uids()['SANDBOX_UID']}\n{uids()['SHARED_GID']}\n42"),
            }
            for name, (command, wanted) in runs.items():
                with self.subTest(image=name):
                    reference = f"ghcr.io/saint-work/saint-{name}:{app_version()}"
                    result = subprocess.run(
                        ["ctr", "--address", str(address), "-n", "k8s.io", "run", "--rm", "--read-only", reference, f"saint-images-test-{name}-{os.getpid()}", *command],
                        capture_output=True, text=True, timeout=120,
                        check=False,
                    )
                    self.assertEqual(result.returncode, 0, f"{name}: {result.stdout}{result.stderr}")
                    self.assertIn(wanted, result.stdout)
        finally:
            process.terminate()
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            log.close()
            subprocess.run(["umount", "-R", str(directory / "root")], capture_output=True, check=False)
            shutil.rmtree(directory, ignore_errors=True)


class RegistryPushTest(unittest.TestCase):
    """How a user publishes the images: `skopeo copy oci-archive:… docker://…`, here to
    Debian's registry on a loopback port, then read back from it."""

    def test_skopeo_pushes_each_archive_to_a_registry(self) -> None:
        binary = os.environ.get("SAINT_REGISTRY_BINARY")
        self.assertTrue(binary and os.access(binary, os.X_OK), "SAINT_REGISTRY_BINARY is not set: run e2e/images/test.sh")
        directory = Path(tempfile.mkdtemp(prefix="saint-registry-"))
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        (directory / "config.yml").write_text(
            f"version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: {directory}/data\n"
            f"http:\n  addr: 127.0.0.1:{port}\n"
        )
        log = open(directory / "registry.log", "w")
        process = subprocess.Popen([binary, "serve", str(directory / "config.yml")], stdout=log, stderr=log)
        registry = f"127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    self.assertIsNone(process.poll(), f"the registry exited: {(directory / 'registry.log').read_text()[-2000:]}")
                    self.assertLess(time.monotonic(), deadline, "the registry did not listen within 30 s")
                    time.sleep(0.2)
            for name in saint_images.IMAGES:
                with self.subTest(image=name):
                    destination = f"docker://{registry}/saint-work/saint-{name}:{app_version()}"
                    subprocess.run(
                        ["skopeo", "copy", "--dest-tls-verify=false", f"oci-archive:{archive(name)}", destination],
                        check=True, capture_output=True, text=True,
                    )
                    inspected = subprocess.run(
                        ["skopeo", "inspect", "--tls-verify=false", "--config", destination], check=True, capture_output=True, text=True
                    )
                    self.assertEqual(json.loads(inspected.stdout)["config"]["User"], plan(name).user)
        finally:
            process.terminate()
            process.wait(timeout=20)
            log.close()
            shutil.rmtree(directory, ignore_errors=True)


class SizesReport(unittest.TestCase):
    def test_zz_report_the_sizes(self) -> None:
        for name in saint_images.IMAGES:
            unpacked = Unpacked.of(name)
            used = subprocess.run(["du", "-sb", str(unpacked.rootfs)], check=True, capture_output=True, text=True).stdout.split()[0]
            print(f"\n  {name}: archive {archive(name).stat().st_size / 1e6:.1f} MB, unpacked {int(used) / 1e6:.1f} MB", end="", file=sys.stderr)
        print(file=sys.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
