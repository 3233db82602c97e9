#!/usr/bin/env python3
"""Checks that every relative link in the repository's Markdown documents resolves:
the file or directory exists, and a `#fragment` names a heading of the target
document (GitHub's anchor rules: lower case, punctuation dropped, spaces to
hyphens, duplicates numbered). External links (http, https, mailto) are not
fetched. Exits 1 listing each broken link as path:line: link (reason).

Usage: docs/check-links.py [REPOSITORY_ROOT]"""

import re
import subprocess
import sys
from pathlib import Path

LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
FENCE = re.compile(r"^\s*(```|~~~)")


def anchor(text: str) -> str:
    text = re.sub(r"`([^`]*)`", r"\1", text)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    found = set()
    in_fence = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line):
            in_fence = not in_fence
            continue
        match = None if in_fence else HEADING.match(line)
        if match:
            base = anchor(match.group(2))
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
    return found


def links(path: Path):
    in_fence = False
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if FENCE.match(line):
            in_fence = not in_fence
            continue
        if in_fence:
            continue
        for match in LINK.finditer(line):
            yield number, match.group(1)


def documents(root: Path) -> list[Path]:
    listed = subprocess.run(
        ["git", "-C", str(root), "ls-files", "--cached", "--others", "--exclude-standard", "*.md"],
        capture_output=True, text=True, check=True,
    ).stdout.split()
    return [root / name for name in listed if (root / name).is_file()]


def main() -> int:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent).resolve()
    broken = []
    checked = 0
    for document in documents(root):
        for number, target in links(document):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):
                continue
            checked += 1
            file_part, _, fragment = target.partition("#")
            destination = (document.parent / file_part).resolve() if file_part else document
            where = f"{document.relative_to(root)}:{number}: {target}"
            if not destination.exists():
                broken.append(f"{where} (no such file)")
            elif fragment and destination.suffix == ".md" and fragment not in anchors(destination):
                broken.append(f"{where} (no heading with anchor #{fragment})")
    for line in broken:
        print(line, file=sys.stderr)
    print(f"{checked} relative links checked, {len(broken)} broken")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
