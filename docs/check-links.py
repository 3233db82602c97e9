#!/usr/bin/env python3
"""Checks that every relative link in the repository's Markdown documents resolves:
the file or directory is in the repository (tracked, or new and not ignored), and a
`#fragment` names a heading of the target document (GitHub's anchor rules: lower
case, punctuation dropped, spaces to hyphens, duplicates numbered) or an HTML
`id`/`name` in it. Inline links, images and reference definitions are checked; code
blocks and code spans are not. A link starting with `/` is from the repository's
root, as on GitHub. External links (http, https, mailto) are not fetched. The
README, the front page, must stay within README_MAX_LINES. Exits 1 listing each
broken link as path:line: link (reason).

Usage: docs/check-links.py [REPOSITORY_ROOT]"""

import os
import re
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote

# The README links to docs/ for everything past what it is, running a bot, running
# the tests and installing on Kubernetes.
README_MAX_LINES = 150

# [text](target) or ![alt](target), with an optional "title"; <target> may hold spaces.
INLINE = re.compile(r"\]\(\s*(<[^>]*>|[^)\s]+)(?:\s+(?:\"[^\"]*\"|'[^']*'|\([^)]*\)))?\s*\)")
DEFINITION = re.compile(r"^ {0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)")
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")
HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)(?:\s+#+)?\s*$")
HTML_ANCHOR = re.compile(r"<a\s[^>]*\b(?:id|name)=\"([^\"]+)\"")
FENCE = re.compile(r"^\s*(```|~~~)")
SCHEME = re.compile(r"^[a-z][a-z0-9+.-]*:", re.IGNORECASE)


def anchor(text: str) -> str:
    """GitHub's anchor for a heading's text."""
    text = re.sub(r"`([^`]*)`", r"\1", text)
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def prose_lines(path: Path):
    """(line number, line) outside fenced code blocks, code spans blanked."""
    in_fence = False
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if FENCE.match(line):
            in_fence = not in_fence
            continue
        if not in_fence:
            yield number, line


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    found = set()
    for _, line in prose_lines(path):
        found.update(HTML_ANCHOR.findall(line))
        match = HEADING.match(line)
        if match:
            base = anchor(match.group(2))
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
    return found


def links(path: Path):
    for number, line in prose_lines(path):
        line = CODE_SPAN.sub(lambda span: " " * len(span.group(0)), line)
        targets = [match.group(1) for match in INLINE.finditer(line)]
        definition = DEFINITION.match(line)
        if definition:
            targets.append(definition.group(1))
        for target in targets:
            yield number, target.removeprefix("<").removesuffix(">")


def repository_paths(root: Path) -> tuple[list[Path], set[Path]]:
    """The Markdown documents, and every file and directory git sees (tracked or new)."""
    listed = subprocess.run(
        ["git", "-C", str(root), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True, text=True, check=True,
    ).stdout.split("\0")
    files = [root / name for name in listed if name and (root / name).is_file()]
    paths = {root}
    for file in files:
        paths.add(file)
        paths.update(parent for parent in file.parents if parent.is_relative_to(root))
    return [file for file in files if file.suffix == ".md"], paths


def main() -> int:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent).resolve()
    documents, in_repository = repository_paths(root)
    broken = []
    checked = 0
    for document in sorted(documents):
        for number, target in links(document):
            if SCHEME.match(target):
                continue
            checked += 1
            file_part, _, fragment = target.partition("#")
            file_part = unquote(file_part)
            if not file_part:
                destination = document
            elif file_part.startswith("/"):
                destination = Path(os.path.normpath(root / file_part.lstrip("/")))
            else:
                destination = Path(os.path.normpath(document.parent / file_part))
            where = f"{document.relative_to(root)}:{number}: {target}"
            if destination not in in_repository:
                reason = "not in the repository" if destination.exists() else "no such file"
                broken.append(f"{where} ({reason})")
            elif fragment and destination.suffix == ".md" and unquote(fragment) not in anchors(destination):
                broken.append(f"{where} (no heading with anchor #{fragment})")
    readme = root / "README.md"
    readme_lines = len(readme.read_text(encoding="utf-8").splitlines())
    if readme_lines > README_MAX_LINES:
        broken.append(f"README.md: {readme_lines} lines, more than {README_MAX_LINES}: move the detail to docs/")
    for line in broken:
        print(line, file=sys.stderr)
    print(f"{len(documents)} Markdown documents, {checked} relative links checked, {len(broken)} broken")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
