#!/usr/bin/env python3
"""Every crate takes the workspace's lint table.

Each member's Cargo.toml says `[lints] workspace = true`, except saint-memory, which
copies the table with one change (`unsafe_code` is `deny`, not `forbid`, for its
three documented `unsafe` calls): the copy must stay equal to the workspace's in every
other lint. Run from the repository root; exits 1 naming what differs.
"""

import pathlib
import sys
import tomllib

COPYING_CRATE = "agent-pod/memory"


def main() -> int:
    root = tomllib.loads(pathlib.Path("Cargo.toml").read_text())
    table = root["workspace"]["lints"]
    problems = []
    for member in root["workspace"]["members"]:
        lints = tomllib.loads(pathlib.Path(member, "Cargo.toml").read_text()).get("lints")
        if member == COPYING_CRATE:
            expected = {group: dict(values) for group, values in table.items()}
            expected["rust"]["unsafe_code"] = "deny"
            if lints != expected:
                for group in sorted(set(expected) | set(lints or {})):
                    mine, theirs = (lints or {}).get(group, {}), expected.get(group, {})
                    for name in sorted(set(mine) | set(theirs)):
                        if mine.get(name) != theirs.get(name):
                            problems.append(
                                f"{member}/Cargo.toml [lints.{group}] {name}: "
                                f"{mine.get(name)!r}, workspace wants {theirs.get(name)!r}"
                            )
        elif lints != {"workspace": True}:
            problems.append(f"{member}/Cargo.toml: needs `[lints] workspace = true`")
    for problem in problems:
        print(problem, file=sys.stderr)
    if not problems:
        print(f"lint table: {len(root['workspace']['members'])} crates take the workspace's")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
