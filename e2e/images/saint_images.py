#!/usr/bin/env python3
"""Builds Saint's four images as OCI archives without a Docker engine or a registry.

The Dockerfiles stay the one definition: this reads each image's Dockerfile and carries
out its final stage (and the Debian stages it copies from) itself:

- `FROM rust:*` stages are the cargo build; build.sh runs the same cargo command on
  the host and `COPY --from=<that stage>` takes the stripped binary of the same name.
- `FROM debian:<suite>[-slim]` stages start from a debootstrap `minbase` root trimmed
  like Debian's slim image; their RUN lines run in a chroot of it, as `/bin/sh -c`,
  exactly as written. The result is cached as a tarball keyed by the stage's text.
- `FROM gcr.io/distroless/cc-debian12[:tag]` is emulated: the shared libraries `ldd`
  lists for the binaries the stage copies (from this machine, where they were built),
  CA certificates, nsswitch.conf, os-release, passwd/group, /tmp, and nothing else.

Any instruction or form this program does not understand fails the build with the
Dockerfile's line, so the two paths cannot drift silently. umoci writes the layers
(one for the base, one for the rest) and the config; the index names the full
reference so `ctr images import` and `skopeo copy oci-archive:…` need no other name.

Subcommands: `build` (build.sh calls it), `plan DOCKERFILE` (the parsed final stage
as JSON, which the tests compare with the built image), `check` (the tests).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

# Bump when the way a rootfs or an image is assembled changes: every cache key has it.
RECIPE_VERSION = "1"

REPOSITORY_ROOT = Path(__file__).resolve().parents[2]
IMAGES = {
    "operator": "operator/Dockerfile",
    "agent": "agent-pod/Dockerfile",
    "porter": "porter-sidecar/Dockerfile",
    "sandbox": "sandbox-image/Dockerfile",
}
DEFAULT_REPOSITORY_PREFIX = "ghcr.io/saint-work"
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
DISTROLESS_CC = re.compile(r"^gcr\.io/distroless/cc-debian12(:[A-Za-z0-9._-]+)?(@sha256:[0-9a-f]{64})?$")
DEBIAN = re.compile(r"^debian:(?P<suite>[a-z]+)(-slim)?$")
RUST = re.compile(r"^rust:[A-Za-z0-9._-]+$")
# Debian's suite -> the distroless base the emulation stands for.
DISTROLESS_SUITE = "bookworm"
# Timestamps in the images (config, history, files this build writes): fixed, so the
# same inputs give the same digests; 1970 like distroless' own images unless
# SOURCE_DATE_EPOCH says otherwise.
EPOCH = int(os.environ.get("SOURCE_DATE_EPOCH", "0"))
CREATED = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(EPOCH))


class BuildError(Exception):
    """A failure with a message naming what failed; printed as one line."""


def log(message: str) -> None:
    print(f"images: {message}", file=sys.stderr, flush=True)


def run(command: list[str], **options) -> subprocess.CompletedProcess:
    """Runs a command; a failure names the command and shows its output."""
    check = options.pop("check", False)
    result = subprocess.run(command, check=check, **options)
    if result.returncode != 0:
        output = ""
        for stream in (result.stdout, result.stderr) if options.get("capture_output") else ():
            if stream:
                output += stream if isinstance(stream, str) else stream.decode(errors="replace")
        raise BuildError(f"failed to run {shlex.join(command)} (exit {result.returncode}){': ' + output[-3000:] if output else ''}")
    return result


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


# ---------------------------------------------------------------- Dockerfile parsing


@dataclass
class Instruction:
    keyword: str
    arguments: str
    line: int

    def where(self, dockerfile: Path) -> str:
        return f"{shown(dockerfile)}:{self.line}: {self.keyword} {self.arguments[:80]}"


def shown(path: Path) -> str:
    """A path as messages show it: relative to the repository when inside it."""
    try:
        return str(path.relative_to(REPOSITORY_ROOT))
    except ValueError:
        return str(path)


@dataclass
class Stage:
    base: str
    name: str | None
    kind: str  # cargo | debian | distroless | scratch
    suite: str | None
    line: int
    instructions: list[Instruction] = field(default_factory=list)
    arguments: dict[str, str] = field(default_factory=dict)


@dataclass
class Dockerfile:
    path: Path
    stages: list[Stage]

    def stage(self, name: str) -> Stage:
        for stage in self.stages:
            if stage.name == name:
                return stage
        raise BuildError(f"{self.path}: no stage named {name!r}")


def logical_lines(text: str) -> list[tuple[int, str]]:
    """Joins backslash continuations and drops comments and blank lines, as Docker does."""
    lines: list[tuple[int, str]] = []
    current, start = "", 0
    for number, raw in enumerate(text.splitlines(), start=1):
        stripped = raw.strip()
        if stripped.startswith("#") or (not stripped and not current):
            continue
        if not current:
            start = number
        if stripped.endswith("\\"):
            current += stripped[:-1] + " "
            continue
        current += stripped
        lines.append((start, current.strip()))
        current = ""
    if current:
        lines.append((start, current.strip()))
    return lines


def expand(value: str, variables: dict[str, str], where: str) -> str:
    """Docker's ${NAME} and $NAME substitution (no modifiers: they fail loudly)."""

    def replace(match: re.Match) -> str:
        name = match.group(1) or match.group(2)
        if match.group(1) is not None and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise BuildError(f"{where}: the offline build does not understand ${{{name}}}")
        return variables.get(name, "")

    return re.sub(r"\$\{([^}]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)", replace, value)


def parse_dockerfile(path: Path) -> Dockerfile:
    text = path.read_text()
    global_arguments: dict[str, str] = {}
    stages: list[Stage] = []
    for line, content in logical_lines(text):
        keyword, _, arguments = content.partition(" ")
        keyword, arguments = keyword.upper(), arguments.strip()
        instruction = Instruction(keyword, arguments, line)
        where = f"{shown(path)}:{line}"
        if keyword == "FROM":
            words = arguments.split()
            if len(words) not in (1, 3) or (len(words) == 3 and words[1].upper() != "AS") or words[0].startswith("--"):
                raise BuildError(f"{where}: the offline build understands `FROM image [AS name]` only")
            base = expand(words[0], global_arguments, where)
            name = words[2] if len(words) == 3 else None
            if RUST.match(base):
                stage = Stage(base, name, "cargo", None, line)
            elif (debian := DEBIAN.match(base)) is not None:
                stage = Stage(base, name, "debian", debian.group("suite"), line)
            elif DISTROLESS_CC.match(base):
                stage = Stage(base, name, "distroless", DISTROLESS_SUITE, line)
            elif base == "scratch":
                stage = Stage(base, name, "scratch", None, line)
            else:
                raise BuildError(f"{where}: the offline build has no recipe for the base image {base}")
            stages.append(stage)
            continue
        if not stages:
            if keyword != "ARG":
                raise BuildError(f"{where}: {keyword} before the first FROM")
            name, _, default = arguments.partition("=")
            global_arguments[name.strip()] = default.strip().strip('"')
            continue
        stage = stages[-1]
        if keyword == "ARG":
            name, equals, default = arguments.partition("=")
            name = name.strip()
            if equals:
                stage.arguments[name] = shlex.split(default)[0] if default.strip() else ""
            elif name in global_arguments:
                stage.arguments[name] = global_arguments[name]
            else:
                raise BuildError(f"{where}: ARG {name} has no default; the offline build takes no --build-arg")
        stage.instructions.append(instruction)
    if not stages:
        raise BuildError(f"{path}: no FROM")
    return Dockerfile(path, stages)


@dataclass
class Copy:
    source_stage: str | None  # None: the build context (the repository)
    sources: list[str]
    destination: str
    line: int


@dataclass
class FinalPlan:
    """What the final stage says, in the terms the image config and rootfs use."""

    base: str
    kind: str
    user: str
    entrypoint: list[str]
    command: list[str] | None
    environment: dict[str, str]
    workdir: str | None
    runs: list[str]
    copies: list[Copy]


def interpret_stage(dockerfile: Dockerfile, stage: Stage) -> tuple[list[tuple[Instruction, object]], dict]:
    """Turns each instruction of a stage into an operation the offline build performs.

    Returns the operations in order and the config they leave (user, env, ...).
    Anything outside this small vocabulary fails with the Dockerfile line.
    """
    variables = dict(stage.arguments)
    config: dict = {"user": None, "entrypoint": None, "command": None, "environment": {}, "workdir": None}
    operations: list[tuple[Instruction, object]] = []
    for instruction in stage.instructions:
        where = instruction.where(dockerfile.path)
        keyword, arguments = instruction.keyword, instruction.arguments
        if keyword == "ARG":
            continue
        if keyword == "RUN":
            if stage.kind not in ("debian", "cargo"):
                raise BuildError(f"{where}: RUN needs a shell; a {stage.kind} stage has none")
            if arguments.startswith(("[", "--")):
                raise BuildError(f"{where}: the offline build runs only shell-form RUN without flags")
            if config["user"] is not None:
                raise BuildError(f"{where}: RUN after USER is not supported by the offline build")
            operations.append((instruction, ("run", arguments)))
        elif keyword == "COPY":
            words = shlex.split(arguments)
            source_stage = None
            while words and words[0].startswith("--"):
                flag = words.pop(0)
                if flag.startswith("--from="):
                    source_stage = flag.removeprefix("--from=")
                else:
                    raise BuildError(f"{where}: the offline build does not understand COPY {flag}")
            if len(words) < 2:
                raise BuildError(f"{where}: COPY needs a source and a destination")
            words = [expand(word, variables | config["environment"], where) for word in words]
            if any(any(character in word for character in "*?[") for word in words):
                raise BuildError(f"{where}: the offline build does not expand COPY wildcards")
            if len(words) > 2 and not words[-1].endswith("/"):
                raise BuildError(f"{where}: COPY of several sources needs a destination ending in /")
            operations.append((instruction, ("copy", Copy(source_stage, words[:-1], words[-1], instruction.line))))
        elif keyword == "USER":
            user = expand(arguments, variables, where)
            if not re.fullmatch(r"[0-9]+:[0-9]+", user):
                raise BuildError(f"{where}: USER must be numeric uid:gid (the pods' runAsUser checks need numbers)")
            config["user"] = user
        elif keyword == "ENV":
            words = shlex.split(arguments)
            if words and "=" not in words[0]:
                config["environment"][words[0]] = " ".join(words[1:])
            else:
                for word in words:
                    name, equals, value = word.partition("=")
                    if not equals:
                        raise BuildError(f"{where}: ENV {word} is not NAME=value")
                    config["environment"][name] = expand(value, variables | config["environment"], where)
            operations.append((instruction, ("env", dict(config["environment"]))))
        elif keyword == "WORKDIR":
            workdir = expand(arguments, variables | config["environment"], where)
            if not workdir.startswith("/"):
                raise BuildError(f"{where}: WORKDIR must be absolute")
            config["workdir"] = workdir
            operations.append((instruction, ("workdir", workdir)))
        elif keyword in ("ENTRYPOINT", "CMD"):
            try:
                value = json.loads(arguments)
            except json.JSONDecodeError:
                value = None
            if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
                raise BuildError(f"{where}: {keyword} must be a JSON array (the shell form needs /bin/sh)")
            config["entrypoint" if keyword == "ENTRYPOINT" else "command"] = value
        else:
            raise BuildError(f"{where}: the offline build does not understand {keyword}")
    return operations, config


def final_plan(dockerfile: Dockerfile) -> FinalPlan:
    stage = dockerfile.stages[-1]
    where = f"{shown(dockerfile.path)}:{stage.line}"
    if stage.kind == "cargo":
        raise BuildError(f"{where}: the final stage must not be the cargo build stage")
    operations, config = interpret_stage(dockerfile, stage)
    if config["user"] is None:
        raise BuildError(f"{where}: the final stage has no USER; every Saint image runs as a fixed non-root uid:gid")
    if config["user"].split(":")[0] == "0":
        raise BuildError(f"{where}: the final stage runs as root")
    if config["entrypoint"] is None:
        raise BuildError(f"{where}: the final stage has no ENTRYPOINT")
    environment = {"PATH": DEFAULT_PATH}
    if stage.kind == "distroless":
        environment["SSL_CERT_FILE"] = "/etc/ssl/certs/ca-certificates.crt"
    environment.update(config["environment"])
    return FinalPlan(
        base=stage.base,
        kind=stage.kind,
        user=config["user"],
        entrypoint=config["entrypoint"],
        command=config["command"],
        environment=environment,
        workdir=config["workdir"],
        runs=[operation[1] for _, operation in operations if operation[0] == "run"],
        copies=[operation[1] for _, operation in operations if operation[0] == "copy"],
    )


def plan_json(plan: FinalPlan) -> dict:
    return {
        "base": plan.base,
        "kind": plan.kind,
        "user": plan.user,
        "entrypoint": plan.entrypoint,
        "command": plan.command,
        "environment": plan.environment,
        "workdir": plan.workdir,
        "runs": plan.runs,
        "copies": [
            {"from": copy.source_stage, "sources": copy.sources, "destination": copy.destination}
            for copy in plan.copies
        ],
    }


# ---------------------------------------------------------------- the build


@dataclass
class Context:
    cache: Path
    binaries: Path  # stripped release binaries, by cargo bin name
    work: Path  # scratch space, removed at the end
    mirror: str
    security_mirror: str
    architecture: str


def debian_mirrors() -> tuple[str, str]:
    """The Debian mirror apt uses here (the same packages as the host), or SAINT_DEBIAN_MIRROR."""
    main = os.environ.get("SAINT_DEBIAN_MIRROR")
    security = os.environ.get("SAINT_DEBIAN_SECURITY_MIRROR")
    uris: list[str] = []
    for source in sorted(Path("/etc/apt").glob("sources.list.d/*.sources")):
        for match in re.finditer(r"^URIs:\s*(\S+)", source.read_text(), re.MULTILINE):
            uris.append(match.group(1))
    sources_list = Path("/etc/apt/sources.list")
    if sources_list.exists():
        for match in re.finditer(r"^deb\s+(?:\[[^]]*\]\s+)?(\S+)", sources_list.read_text(), re.MULTILINE):
            uris.append(match.group(1))
    if main is None:
        main = next((uri for uri in uris if uri.rstrip("/").endswith("/debian")), "http://deb.debian.org/debian")
    if security is None:
        security = next(
            (uri for uri in uris if uri.rstrip("/").endswith("/debian-security")),
            "http://deb.debian.org/debian-security",
        )
    return main.rstrip("/"), security.rstrip("/")


def tar_directory(directory: Path, archive: Path) -> None:
    temporary = archive.with_name(f"{archive.name}.partial-{os.getpid()}")
    run(["tar", "--numeric-owner", "--xattrs", "-C", str(directory), "-cf", str(temporary), "."], capture_output=True)
    temporary.rename(archive)


def untar(archive: Path, directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    run(["tar", "--numeric-owner", "--xattrs", "-C", str(directory), "-xpf", str(archive)], capture_output=True)


def remove_tree(path: Path) -> None:
    if path.exists() or path.is_symlink():
        shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()


def prune(pattern: str, keep: Path, directory: Path) -> None:
    """Removes older caches of the same kind: the disk is shared and small."""
    for old in directory.glob(pattern):
        if old != keep and ".partial" not in old.name:
            log(f"removing the outdated cache {old}")
            remove_tree(old)


SLIM_DPKG_EXCLUDES = """\
# As in Debian's slim images: no documentation, manuals or translations.
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/lintian/*
path-exclude /usr/share/linda/*
path-exclude /usr/share/locale/*
"""
APT_CLEAN = """\
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
"""


def official_sources(suite: str) -> str:
    return (
        "Types: deb\nURIs: http://deb.debian.org/debian\n"
        f"Suites: {suite} {suite}-updates\nComponents: main\n"
        "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\n"
        "Types: deb\nURIs: http://deb.debian.org/debian-security\n"
        f"Suites: {suite}-security\nComponents: main\n"
        "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n"
    )


def build_sources(context: Context, suite: str) -> str:
    return (
        f"Types: deb\nURIs: {context.mirror}\nSuites: {suite} {suite}-updates\nComponents: main\n"
        "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\n"
        f"Types: deb\nURIs: {context.security_mirror}\nSuites: {suite}-security\nComponents: main\n"
        "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n"
    )


def trim_debian_root(root: Path) -> None:
    """What the slim image leaves out, plus what a build leaves behind."""
    for pattern in (
        "var/lib/apt/lists/*",
        "var/cache/apt/*.bin",
        "var/cache/apt/archives/*.deb",
        "var/cache/debconf/*-old",
        "var/log/apt/*",
        "var/log/dpkg.log",
        "var/log/alternatives.log",
        "var/log/bootstrap.log",
        "usr/share/man/*",
        "usr/share/info/*",
        "usr/share/locale/*",
        "usr/share/lintian/*",
        "usr/share/groff/*",
        "root/.cache",
        "tmp/*",
    ):
        for path in root.glob(pattern):
            remove_tree(path)
    for document in (root / "usr/share/doc").glob("*"):
        if document.is_dir() and not document.is_symlink():
            for item in document.iterdir():
                if item.name != "copyright":
                    remove_tree(item)


def debian_base(context: Context, suite: str) -> Path:
    """A debootstrap --variant=minbase root of `suite`, trimmed like debian:<suite>-slim, cached."""
    key = hashlib.sha256(f"{RECIPE_VERSION}\n{suite}\n{context.mirror}\n{context.architecture}".encode()).hexdigest()[:16]
    archive = context.cache / f"rootfs-debian-{suite}-minbase-{key}.tar"
    if archive.exists():
        return archive
    root = context.work / f"debootstrap-{suite}"
    remove_tree(root)
    log(f"debootstrap --variant=minbase {suite} from {context.mirror} (once; cached as {archive.name})")
    started = time.monotonic()
    run(
        ["debootstrap", "--variant=minbase", f"--arch={context.architecture}", suite, str(root), context.mirror],
        capture_output=True,
        text=True,
    )
    (root / "etc/dpkg/dpkg.cfg.d").mkdir(parents=True, exist_ok=True)
    (root / "etc/dpkg/dpkg.cfg.d/docker").write_text(SLIM_DPKG_EXCLUDES)
    (root / "etc/apt/apt.conf.d/docker-clean").write_text(APT_CLEAN)
    sources_list = root / "etc/apt/sources.list"
    if sources_list.exists():
        sources_list.unlink()
    (root / "etc/apt/sources.list.d").mkdir(parents=True, exist_ok=True)
    (root / "etc/apt/sources.list.d/debian.sources").write_text(official_sources(suite))
    (root / "etc/resolv.conf").write_text("")
    (root / "etc/hostname").write_text("")
    trim_debian_root(root)
    tar_directory(root, archive)
    remove_tree(root)
    prune(f"rootfs-debian-{suite}-minbase-*.tar", archive, context.cache)
    log(f"debootstrap {suite} took {time.monotonic() - started:.0f} s")
    return archive


def context_file(source: str, where: str) -> Path:
    path = (REPOSITORY_ROOT / source).resolve()
    if REPOSITORY_ROOT not in path.parents or not path.exists():
        raise BuildError(f"{where}: COPY source {source} is not a file of the repository")
    if path.is_dir():
        raise BuildError(f"{where}: the offline build copies single files from the repository, not {source}")
    return path


def chroot_run(root: Path, command: str, environment: dict[str, str], workdir: str, where: str) -> None:
    """`RUN command` as Docker does it: /bin/sh -c in the stage's root, with /proc mounted.

    A private mount namespace keeps the /proc mount out of the host and ends with the
    command, even when it fails.
    """
    variables = {"PATH": DEFAULT_PATH, "HOME": "/root", "DEBIAN_FRONTEND": "noninteractive", "LANG": "C.UTF-8"}
    variables.update(environment)
    script = 'mount -t proc proc "$1/proc" && exec chroot "$1" /usr/bin/env -C "$2" /bin/sh -c "$3"'
    result = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "--", "/bin/sh", "-c", script, "sh", str(root), workdir, command],
        env=variables,
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise BuildError(f"{where}: failed in the chroot (exit {result.returncode}): {(result.stdout + result.stderr)[-3000:]}")


# This machine's CA bundle, and where Debian stages' RUN lines find it (see debian_stage).
HOST_CERTIFICATES = Path("/etc/ssl/certs/ca-certificates.crt")
BUILD_CERTIFICATES = "/.saint-build/host-ca-certificates.crt"


def stage_key(context: Context, dockerfile: Dockerfile, stage: Stage, instructions: list[Instruction]) -> str:
    digest = hashlib.sha256(f"{RECIPE_VERSION}\n{stage.base}\n{context.mirror}\n{context.architecture}\n".encode())
    digest.update(json.dumps(stage.arguments, sort_keys=True).encode())
    for instruction in instructions:
        digest.update(f"{instruction.keyword} {instruction.arguments}\n".encode())
        if instruction.keyword == "COPY" and "--from=" not in instruction.arguments:
            for source in shlex.split(instruction.arguments)[:-1]:
                digest.update(sha256_file(context_file(source, instruction.where(dockerfile.path))).encode())
    return digest.hexdigest()[:16]


def stage_label(dockerfile: Dockerfile, stage: Stage) -> str:
    image = next((name for name, path in IMAGES.items() if REPOSITORY_ROOT / path == dockerfile.path), "image")
    return f"{image}-{stage.name or 'final'}"


def debian_stage(context: Context, dockerfile: Dockerfile, stage: Stage, instructions: list[Instruction]) -> Path:
    """Runs a Debian stage's instructions (RUN, COPY from the repository, ENV, WORKDIR) on
    the minbase root; cached as a tarball keyed by their text and the files they copy."""
    key = stage_key(context, dockerfile, stage, instructions)
    label = stage_label(dockerfile, stage)
    archive = context.cache / f"rootfs-{label}-{key}.tar"
    if archive.exists():
        return archive
    base = debian_base(context, stage.suite)
    root = context.work / f"stage-{label}"
    remove_tree(root)
    untar(base, root)
    log(f"running {dockerfile.path.relative_to(REPOSITORY_ROOT)} stage {stage.name or '(final)'} in a chroot")
    started = time.monotonic()
    wall_started = time.time()
    (root / "etc/resolv.conf").write_text(Path("/etc/resolv.conf").read_text())
    (root / "etc/apt/sources.list.d/debian.sources").write_text(build_sources(context, stage.suite))
    # RUN fetches (pip, curl, git over HTTPS) trust what this machine trusts, so a build
    # behind a TLS-inspecting egress proxy works as on an open network. The bundle lives
    # outside the stage's own files and is removed before the stage is archived, so it
    # never reaches an image; what the stage installs keeps Debian's own certificates.
    build_environment: dict[str, str] = {}
    if HOST_CERTIFICATES.is_file():
        (root / BUILD_CERTIFICATES.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(HOST_CERTIFICATES, root / BUILD_CERTIFICATES.lstrip("/"))
        build_environment = {name: BUILD_CERTIFICATES for name in ("SSL_CERT_FILE", "PIP_CERT", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "GIT_SSL_CAINFO")}
    environment = dict(stage.arguments)
    workdir = "/"
    interpreted, _ = interpret_stage(dockerfile, Stage(stage.base, stage.name, stage.kind, stage.suite, stage.line, instructions, stage.arguments))
    for instruction, operation in interpreted:
        where = instruction.where(dockerfile.path)
        kind, value = operation
        if kind == "run":
            chroot_run(root, value, build_environment | environment, workdir, where)
        elif kind == "workdir":
            workdir = value
            (root / value.lstrip("/")).mkdir(parents=True, exist_ok=True)
        elif kind == "env":
            environment = dict(stage.arguments) | value
        elif kind == "copy":
            if value.source_stage is not None:
                raise BuildError(f"{where}: COPY --from before the last RUN is not supported by the offline build")
            apply_copy(context, dockerfile, value, root, where, {})
    remove_tree(root / BUILD_CERTIFICATES.lstrip("/").split("/")[0])
    (root / "etc/resolv.conf").write_text("")
    (root / "etc/apt/sources.list.d/debian.sources").write_text(official_sources(stage.suite))
    trim_debian_root(root)
    # What the stage wrote gets the fixed time now, not when the image is assembled: a
    # build from this cached stage then gives the same bytes as the one that made it
    # (packaged files keep their .deb times either way).
    clamp_times(root, wall_started - 2)
    tar_directory(root, archive)
    remove_tree(root)
    prune(f"rootfs-{label}-*.tar", archive, context.cache)
    log(f"stage {label} took {time.monotonic() - started:.0f} s")
    return archive


def ldd_libraries(binary: Path) -> list[str]:
    """The absolute paths `ldd` lists for a binary on this machine (loader included)."""
    result = run(["ldd", str(binary)], capture_output=True, text=True)
    libraries = []
    for line in result.stdout.splitlines():
        line = line.strip()
        if "not found" in line:
            raise BuildError(f"ldd {binary}: {line}")
        if "=>" in line:
            path = line.split("=>", 1)[1].split("(")[0].strip()
            if path:
                libraries.append(path)
        elif line.startswith("/"):
            libraries.append(line.split()[0])
    return libraries


DISTROLESS_PASSWD = (
    "root:x:0:0:root:/root:/sbin/nologin\n"
    "nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n"
    "nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"
)
DISTROLESS_GROUP = "root:x:0:\nnobody:x:65534:\ntty:x:5:\nstaff:x:50:\nnonroot:x:65532:\n"
NSSWITCH = (
    "passwd:         files\ngroup:          files\nshadow:         files\ngshadow:        files\n\n"
    "hosts:          files dns\nnetworks:       files\n\n"
    "protocols:      db files\nservices:       db files\nethers:         db files\nrpc:            db files\n\n"
    "netgroup:       nis\n"
)


def copy_dereferenced(source: Path, root: Path, destination: str) -> None:
    target = root / destination.lstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(source, target, follow_symlinks=True)


def distroless_base(context: Context, dockerfile: Dockerfile, plan: FinalPlan, root: Path) -> None:
    """gcr.io/distroless/cc-debian12 as far as Saint's binaries need it: the libraries
    ldd lists for the binaries the stage copies from the cargo stage, CA certificates
    (from a Debian stage with ca-certificates), nsswitch, os-release, passwd/group, /tmp."""
    certificates_stage = Stage(f"debian:{DISTROLESS_SUITE}-slim", "distroless-cc", "debian", DISTROLESS_SUITE, 0)
    certificates_stage.instructions = [
        Instruction("RUN", "apt-get update && apt-get install -y --no-install-recommends ca-certificates && rm -rf /var/lib/apt/lists/*", 0)
    ]
    pseudo = Dockerfile(REPOSITORY_ROOT / "e2e/images/distroless-cc", [certificates_stage])
    archive = debian_stage(context, pseudo, certificates_stage, certificates_stage.instructions)
    scratch = context.work / "distroless-cc"
    remove_tree(scratch)
    untar(archive, scratch)
    for path in ("etc/ssl/certs/ca-certificates.crt", "usr/lib/os-release"):
        copy_dereferenced(scratch / path, root, path)
    (root / "etc/os-release").symlink_to("../usr/lib/os-release")
    remove_tree(scratch)
    (root / "etc/passwd").write_text(DISTROLESS_PASSWD)
    (root / "etc/group").write_text(DISTROLESS_GROUP)
    (root / "etc/nsswitch.conf").write_text(NSSWITCH)
    for directory, mode, owner in (("tmp", 0o1777, 0), ("root", 0o700, 0), ("home/nonroot", 0o700, 65532)):
        path = root / directory
        path.mkdir(parents=True, exist_ok=True)
        os.chmod(path, mode)
        os.chown(path, owner, owner)
    libraries: set[str] = set()
    for copy in plan.copies:
        if copy.source_stage is not None and dockerfile.stage(copy.source_stage).kind == "cargo":
            for source in copy.sources:
                libraries.update(ldd_libraries(cargo_binary(context, source, f"{dockerfile.path}:{copy.line}")))
    for library in sorted(libraries):
        copy_dereferenced(Path(library), root, library)


def cargo_binary(context: Context, source: str, where: str) -> Path:
    binary = context.binaries / Path(source).name
    if not binary.is_file():
        raise BuildError(f"{where}: {source} is not one of the binaries build.sh builds ({', '.join(sorted(p.name for p in context.binaries.iterdir()))})")
    return binary


def install_tree(source: Path, destination: Path) -> None:
    """Copies a directory's contents into another, keeping modes, links and owners (tar)."""
    destination.mkdir(parents=True, exist_ok=True)
    packer = subprocess.Popen(["tar", "--numeric-owner", "-C", str(source), "-cf", "-", "."], stdout=subprocess.PIPE)
    run(["tar", "--numeric-owner", "-C", str(destination), "-xpf", "-"], stdin=packer.stdout, capture_output=True)
    if packer.wait() != 0:
        raise BuildError(f"failed to read {source}")


def apply_copy(context: Context, dockerfile: Dockerfile, copy: Copy, root: Path, where: str, stage_roots: dict[str, Path]) -> None:
    """COPY as Docker does it: files keep their mode and belong to root; a directory
    source copies its contents; a destination ending in / is a directory."""
    many = len(copy.sources) > 1 or copy.destination.endswith("/")
    for source in copy.sources:
        if copy.source_stage is None:
            path = context_file(source, where)
        else:
            stage = dockerfile.stage(copy.source_stage)
            if stage.kind == "cargo":
                path = cargo_binary(context, source, where)
            elif stage.kind == "debian":
                path = stage_roots[copy.source_stage] / source.lstrip("/")
                if not path.exists():
                    raise BuildError(f"{where}: stage {copy.source_stage} has no {source}")
            else:
                raise BuildError(f"{where}: COPY --from a {stage.kind} stage is not supported by the offline build")
        if path.is_dir():
            install_tree(path, root / copy.destination.lstrip("/"))
            continue
        target = root / copy.destination.lstrip("/")
        if many or target.is_dir():
            target = target / path.name
        target.parent.mkdir(parents=True, exist_ok=True)
        remove_tree(target)
        shutil.copyfile(path, target)
        shutil.copymode(path, target)
        os.chown(target, 0, 0)


def clamp_times(root: Path, since: float) -> None:
    """Sets what this build wrote (modified at or after `since`) to EPOCH; files from
    the cached Debian stages keep their packaged times."""
    for directory, directories, files in os.walk(root):
        for entry in [directory, *(os.path.join(directory, name) for name in directories + files)]:
            if os.lstat(entry).st_mtime >= since:
                os.utime(entry, (EPOCH, EPOCH), follow_symlinks=False)


def umoci(*arguments: str) -> None:
    run(["umoci", *arguments], capture_output=True, text=True)


def split_at_last_run(instructions: list[Instruction]) -> tuple[list[Instruction], list[Instruction]]:
    """The instructions up to the last RUN (the cached base layer) and those after it."""
    last_run = max((index for index, instruction in enumerate(instructions) if instruction.keyword == "RUN"), default=-1)
    return instructions[: last_run + 1], instructions[last_run + 1 :]


def assemble(context: Context, name: str, reference: str, output: Path) -> None:
    dockerfile = parse_dockerfile(REPOSITORY_ROOT / IMAGES[name])
    plan = final_plan(dockerfile)
    stage = dockerfile.stages[-1]
    started = time.monotonic()
    wall_started = time.time()
    work = context.work / f"image-{name}"
    remove_tree(work)
    layout, bundle = work / "layout", work / "bundle"
    tag = reference.rsplit(":", 1)[1]
    umoci("init", "--layout", str(layout))
    umoci("new", "--image", f"{layout}:{tag}")
    umoci("unpack", "--image", f"{layout}:{tag}", str(bundle))
    rootfs = bundle / "rootfs"

    # Layer 1: the base with every RUN (cached for Debian stages).
    prefix, rest = split_at_last_run(stage.instructions)
    if stage.kind == "debian":
        untar(debian_stage(context, dockerfile, stage, prefix), rootfs)
    elif stage.kind == "distroless":
        distroless_base(context, dockerfile, plan, rootfs)
    clamp_times(rootfs, wall_started - 2)
    umoci("repack", "--refresh-bundle", "--history.created", CREATED, "--history.created_by", f"{stage.base} (offline: e2e/images/saint_images.py)", "--image", f"{layout}:{tag}", str(bundle))

    # Layer 2: what follows the last RUN (COPY, WORKDIR).
    layer_started = time.time()
    stage_roots: dict[str, Path] = {}
    rest_stage = Stage(stage.base, stage.name, stage.kind, stage.suite, stage.line, rest, stage.arguments)
    operations, _ = interpret_stage(dockerfile, rest_stage)
    for instruction, (kind, value) in operations:
        where = instruction.where(dockerfile.path)
        if kind == "copy":
            if value.source_stage is not None and value.source_stage not in stage_roots:
                source = dockerfile.stage(value.source_stage)
                if source.kind == "debian":
                    directory = context.work / f"from-{name}-{value.source_stage}"
                    remove_tree(directory)
                    untar(debian_stage(context, dockerfile, source, source.instructions), directory)
                    stage_roots[value.source_stage] = directory
            apply_copy(context, dockerfile, value, rootfs, where, stage_roots)
        elif kind == "workdir":
            path = rootfs / value.lstrip("/")
            path.mkdir(parents=True, exist_ok=True)
    clamp_times(rootfs, layer_started - 2)
    umoci("repack", "--history.created", CREATED, "--history.created_by", f"{dockerfile.path.relative_to(REPOSITORY_ROOT)} after the last RUN", "--image", f"{layout}:{tag}", str(bundle))

    arguments = ["config", "--image", f"{layout}:{tag}", "--clear=config.env", "--clear=config.entrypoint", "--clear=config.cmd", "--config.user", plan.user]
    for variable, value in plan.environment.items():
        arguments += ["--config.env", f"{variable}={value}"]
    for item in plan.entrypoint:
        arguments += ["--config.entrypoint", item]
    for item in plan.command or []:
        arguments += ["--config.cmd", item]
    if plan.workdir:
        arguments += ["--config.workingdir", plan.workdir]
    arguments += ["--config.label", f"org.opencontainers.image.version={tag}", "--config.label", f"org.opencontainers.image.title=saint-{name}"]
    arguments += ["--created", CREATED, "--history.created", CREATED, "--history.created_by", "USER/ENV/WORKDIR/ENTRYPOINT of the final stage"]
    umoci(*arguments)
    umoci("gc", "--layout", str(layout))

    name_and_pack(layout, reference, context.architecture, output)
    for directory in stage_roots.values():
        remove_tree(directory)
    remove_tree(work)
    log(f"{name}: {output} ({output.stat().st_size / 1e6:.1f} MB) in {time.monotonic() - started:.0f} s")


def name_and_pack(layout: Path, reference: str, architecture: str, output: Path) -> None:
    """Names the full reference in the index (containerd's import reads
    io.containerd.image.name, OCI tools the ref.name tag) and writes the layout as an
    OCI archive, atomically."""
    index_path = layout / "index.json"
    index = json.loads(index_path.read_text())
    if len(index["manifests"]) != 1:
        raise BuildError(f"{layout}: expected one manifest in the layout, found {len(index['manifests'])}")
    descriptor = index["manifests"][0]
    descriptor["annotations"] = {"io.containerd.image.name": reference, "org.opencontainers.image.ref.name": reference.rsplit(":", 1)[1]}
    descriptor["platform"] = {"architecture": architecture, "os": "linux"}
    index_path.write_text(json.dumps(index, separators=(",", ":")))
    temporary = output.with_name(f"{output.name}.partial-{os.getpid()}")
    run(
        ["tar", "--sort=name", f"--mtime=@{EPOCH}", "--owner=0", "--group=0", "--numeric-owner", "--mode=u+rw,go+r,go-w",
         "-C", str(layout), "-cf", str(temporary), "oci-layout", "index.json", "blobs"],
        capture_output=True,
    )
    temporary.rename(output)


def command_derive(arguments: argparse.Namespace) -> None:
    """A test copy of a built image: the same layers plus one with the given files
    (e.g. a test CA certificate), and the given environment variables set in its
    config, under another reference. Files belong to root and keep the mode given
    (octal, default 0755)."""
    work = Path(tempfile.mkdtemp(prefix="saint-derive-"))
    try:
        layout, files = work / "layout", work / "files"
        layout.mkdir()
        run(["tar", "-C", str(layout), "-xf", arguments.archive], capture_output=True)
        index = json.loads((layout / "index.json").read_text())
        tag = index["manifests"][0]["annotations"]["org.opencontainers.image.ref.name"]
        architecture = index["manifests"][0].get("platform", {}).get("architecture", "amd64")
        for addition in arguments.add:
            parts = addition.split(":")
            if len(parts) not in (2, 3) or not parts[1].startswith("/"):
                raise BuildError(f"--add {addition}: expected SOURCE:/ABSOLUTE/DESTINATION[:MODE]")
            source, destination = Path(parts[0]), files / parts[1].lstrip("/")
            if not source.is_file():
                raise BuildError(f"--add {addition}: {source} is not a file")
            destination.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, destination)
            os.chmod(destination, int(parts[2], 8) if len(parts) == 3 else 0o755)
        for variable in arguments.env:
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", variable):
                raise BuildError(f"--env {variable}: expected NAME=VALUE")
        clamp_times(files, 0)
        if arguments.add:
            umoci("insert", "--history.created", CREATED, "--history.created_by", "e2e/images/saint_images.py derive", "--image", f"{layout}:{tag}", str(files), "/")
        if arguments.env:
            # Added to the image's own environment (a variable of the same name is replaced).
            settings = [argument for variable in arguments.env for argument in ("--config.env", variable)]
            umoci("config", "--image", f"{layout}:{tag}", "--history.created", CREATED, "--history.created_by", "e2e/images/saint_images.py derive --env", *settings)
        umoci("gc", "--layout", str(layout))
        name_and_pack(layout, arguments.reference, architecture, Path(arguments.output).resolve())
        log(f"{arguments.output}: {arguments.reference}")
    finally:
        remove_tree(work)


def input_hash(repository_prefix: str, version: str, context: Context) -> str:
    """Everything an image depends on: this program, build.sh, the Dockerfiles, the
    repository files they copy, the binaries, the host libraries ldd finds for them,
    the Debian stages' text (through the Dockerfiles), the reference."""
    digest = hashlib.sha256(f"{RECIPE_VERSION}\n{repository_prefix}\n{version}\n{context.mirror}\n".encode())
    # The build's own programs; the files the Dockerfiles copy are hashed below.
    here = Path(__file__).resolve().parent
    for path in (here / "build.sh", here / "saint_images.py"):
        digest.update(f"{path.name} {sha256_file(path)}\n".encode())
    libraries: set[str] = set()
    for name in sorted(IMAGES):
        dockerfile = parse_dockerfile(REPOSITORY_ROOT / IMAGES[name])
        digest.update(f"{name} {sha256_file(dockerfile.path)}\n".encode())
        for stage in dockerfile.stages:
            if stage.kind == "cargo":
                continue
            for instruction in stage.instructions:
                if instruction.keyword != "COPY":
                    continue
                words = [word for word in shlex.split(instruction.arguments) if not word.startswith("--")]
                source_stage = next((word.removeprefix("--from=") for word in shlex.split(instruction.arguments) if word.startswith("--from=")), None)
                for source in words[:-1]:
                    if source_stage is None:
                        digest.update(f"{source} {sha256_file(context_file(source, instruction.where(dockerfile.path)))}\n".encode())
                    elif dockerfile.stage(source_stage).kind == "cargo":
                        binary = cargo_binary(context, source, instruction.where(dockerfile.path))
                        digest.update(f"{binary.name} {sha256_file(binary)}\n".encode())
                        libraries.update(ldd_libraries(binary))
    for library in sorted(libraries):
        digest.update(f"{library} {sha256_file(Path(library))}\n".encode())
    return digest.hexdigest()[:16]


def image_names(arguments: argparse.Namespace) -> list[str]:
    """The images named on the command line (all when none), each checked."""
    names = arguments.names or list(IMAGES)
    for name in names:
        if name not in IMAGES:
            raise BuildError(f"unknown image {name!r}; the images are {', '.join(IMAGES)}")
    return names


def new_context(arguments: argparse.Namespace, binaries: Path | None) -> Context:
    """The cache, a fresh scratch directory and this machine's Debian settings. Without
    `binaries` (Debian stages only) the context points at an empty directory: stage
    keys and Debian stages never read binaries."""
    cache = Path(arguments.cache).resolve()
    cache.mkdir(parents=True, exist_ok=True)
    architecture = run(["dpkg", "--print-architecture"], capture_output=True, text=True).stdout.strip()
    mirror, security = debian_mirrors()
    work = Path(tempfile.mkdtemp(prefix="saint-images-", dir=arguments.work))
    return Context(cache, binaries or work / "no-binaries", work, mirror, security, architecture)


def command_build(arguments: argparse.Namespace) -> None:
    names = image_names(arguments)
    context = new_context(arguments, Path(arguments.binaries).resolve())
    cache, work = context.cache, context.work
    try:
        key = input_hash(arguments.repository_prefix, arguments.version, context)
        if arguments.output:
            output = Path(arguments.output).resolve()
        else:
            output = cache / f"images-{key}"
        output.mkdir(parents=True, exist_ok=True)
        stamp = f"{key}\n"
        for name in names:
            archive = output / f"saint-{name}-{arguments.version}.oci.tar"
            marker = output / f".saint-{name}.input"
            if archive.exists() and marker.exists() and marker.read_text() == stamp:
                log(f"{name}: {archive} is up to date")
                continue
            reference = f"{arguments.repository_prefix}/saint-{name}:{arguments.version}"
            assemble(context, name, reference, archive)
            marker.write_text(stamp)
        if not arguments.output:
            # Keep the newest two image directories: another process may still read the previous one.
            directories = sorted(cache.glob("images-*"), key=lambda path: path.stat().st_mtime, reverse=True)
            for old in directories[2:]:
                if old != output:
                    log(f"removing the outdated image directory {old}")
                    remove_tree(old)
        print(output)
    finally:
        remove_tree(work)


def command_stages(arguments: argparse.Namespace) -> None:
    """Builds (or finds cached) every Debian stage the images start from or copy out
    of, without the binaries: the slow, network-bound part of a cold image build,
    which ./test.sh runs in the background while cargo compiles."""
    names = image_names(arguments)
    context = new_context(arguments, None)
    try:
        for name in names:
            dockerfile = parse_dockerfile(REPOSITORY_ROOT / IMAGES[name])
            stage = dockerfile.stages[-1]
            if stage.kind == "debian":
                prefix, _ = split_at_last_run(stage.instructions)
                log(f"{name}: {debian_stage(context, dockerfile, stage, prefix).name}")
            for source in dockerfile.stages[:-1]:
                if source.kind == "debian":
                    log(f"{name}: {debian_stage(context, dockerfile, source, source.instructions).name}")
    finally:
        remove_tree(context.work)


def command_plan(arguments: argparse.Namespace) -> None:
    plan = final_plan(parse_dockerfile(Path(arguments.dockerfile).resolve()))
    print(json.dumps(plan_json(plan), indent=2))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    subcommands = parser.add_subparsers(dest="command", required=True)
    build = subcommands.add_parser("build")
    build.add_argument("--binaries", required=True, help="directory with the stripped release binaries")
    build.add_argument("--cache", required=True)
    build.add_argument("--work", default=None, help="scratch directory (default: the system's temporary directory)")
    build.add_argument("--output", default=None)
    build.add_argument("--repository-prefix", default=DEFAULT_REPOSITORY_PREFIX)
    build.add_argument("--version", required=True)
    build.add_argument("names", nargs="*")
    stages = subcommands.add_parser("stages", help="only the Debian stages, cached (no binaries needed)")
    stages.add_argument("--cache", required=True)
    stages.add_argument("--work", default=None, help="scratch directory (default: the system's temporary directory)")
    stages.add_argument("names", nargs="*")
    plan = subcommands.add_parser("plan")
    plan.add_argument("dockerfile")
    derive = subcommands.add_parser("derive", help="a test copy of an image with files and environment added, under another reference")
    derive.add_argument("--archive", required=True, help="a built .oci.tar")
    derive.add_argument("--reference", required=True, help="the new image's full reference")
    derive.add_argument("--output", required=True, help="the new .oci.tar")
    derive.add_argument("--add", action="append", default=[], metavar="SOURCE:/DESTINATION[:MODE]")
    derive.add_argument("--env", action="append", default=[], metavar="NAME=VALUE")
    arguments = parser.parse_args()
    try:
        {"build": command_build, "stages": command_stages, "plan": command_plan, "derive": command_derive}[arguments.command](arguments)
    except BuildError as error:
        print(f"images: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
