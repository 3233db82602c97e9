#!/usr/bin/env python3
"""Functions longer than LIMIT lines in the workspace's Rust sources.

A long function hides its steps: the hot paths read as a short driver of named steps
(a house rule). Counts each `fn` from its `fn` line to its closing brace, in every
workspace member's `src/`, leaving out test code: `#[cfg(test)]` modules (inline or
in their own file), `#[test]` functions, the modules gated on a test-only feature (the
test fixtures), and the test-doubles crate (the scripted platform and model servers).
A function in ALLOWED may be longer, for the reason given; an entry that no longer
needs to be there is an error too, so the list only shrinks. Prints `file:line
function N lines (limit LIMIT)` for each offender and exits 1 when there is one. Run
from the repository root.
"""

import pathlib
import re
import sys
import tomllib

LIMIT = 120

# `path::function`: why it may be longer than LIMIT.
ALLOWED = {
    "agent-pod/src/metering.rs::default": "the metric registration table: one register call per metric",
}

# Module gates whose code is built for tests only.
TEST_GATES = (
    re.compile(r"#\[cfg\(test\)\]"),
    re.compile(r"#\[cfg\(any\(test,\s*feature\s*=\s*\"fixtures\"\)\)\]"),
)

# Crates that only tests link: the scripted platform and model servers.
TEST_DOUBLE_CRATES = {"agent-pod/scripted"}
GATED_MODULE = re.compile(r"\s*(?:#\[[^\]]*\]\s*)*(?:pub(?:\([a-z]+\))?\s+)?mod\s+([A-Za-z_][A-Za-z0-9_]*)\s*([;{])")
FUNCTION = re.compile(r"\bfn\s+([A-Za-z_][A-Za-z0-9_]*)")
TEST_ATTRIBUTE = re.compile(r"#\[(?:(?:[a-z_]+::)*test\b[^\]]*|cfg\(test\))\]\s*(?:#\[[^\]]*\]\s*)*$")
QUALIFIERS = re.compile(r"(?:\b(?:pub(?:\([a-z]+\))?|async|const|unsafe|extern)\s*)*$")


def blank(text: str) -> str:
    """`text` with comments and string and character literals replaced by spaces
    (newlines kept), so braces and `fn` are found only in code."""
    out = list(text)
    length, index = len(text), 0

    def clear(start: int, end: int) -> None:
        for position in range(start, min(end, length)):
            if out[position] != "\n":
                out[position] = " "

    while index < length:
        character = text[index]
        if text.startswith("//", index):
            end = text.find("\n", index)
            end = length if end < 0 else end
            clear(index, end)
            index = end
        elif text.startswith("/*", index):
            depth, end = 1, index + 2
            while end < length and depth:
                if text.startswith("/*", end):
                    depth, end = depth + 1, end + 2
                elif text.startswith("*/", end):
                    depth, end = depth - 1, end + 2
                else:
                    end += 1
            clear(index, end)
            index = end
        elif raw := re.match(r'b?r(#*)"', text[index : index + 260]):
            if index and (text[index - 1].isalnum() or text[index - 1] == "_"):
                index += 1
                continue
            closing = '"' + raw.group(1)
            end = text.find(closing, index + raw.end())
            end = length if end < 0 else end + len(closing)
            clear(index, end)
            index = end
        elif character == '"':
            end = index + 1
            while end < length and text[end] != '"':
                end += 2 if text[end] == "\\" else 1
            clear(index, end + 1)
            index = end + 1
        elif character == "'":
            # A character literal ('x', '\n', '\u{..}'), not a lifetime ('a).
            literal = re.match(r"'(?:\\(?:u\{[0-9a-fA-F]+\}|x[0-9a-fA-F]{2}|.)|[^\\'])'", text[index : index + 12])
            if literal:
                clear(index, index + literal.end())
                index += literal.end()
            else:
                index += 1
        else:
            index += 1
    return "".join(out)


def matching_brace(code: str, open_index: int) -> int:
    depth = 0
    for index in range(open_index, len(code)):
        if code[index] == "{":
            depth += 1
        elif code[index] == "}":
            depth -= 1
            if depth == 0:
                return index
    return len(code) - 1


def test_modules(text: str, code: str) -> tuple[list[tuple[int, int]], list[str]]:
    """Spans of inline test-only modules, and the names of test-only modules kept in
    their own files. Gates are read in `text` (their feature names are strings), the
    rest in `code`."""
    spans, files = [], []
    for gate in TEST_GATES:
        for found in gate.finditer(text):
            if code[found.start()] != "#":
                continue  # in a comment
            module = GATED_MODULE.match(code, found.end())
            if not module:
                continue
            if module.group(2) == ";":
                files.append(module.group(1))
            else:
                spans.append((found.start(), matching_brace(code, module.end() - 1)))
    return spans, files


def module_directory(path: pathlib.Path) -> pathlib.Path:
    """Where the files of `path`'s child modules live."""
    if path.name in ("lib.rs", "main.rs", "mod.rs"):
        return path.parent
    return path.with_suffix("")


def long_functions(path: pathlib.Path) -> tuple[list[tuple[int, str, int]], list[pathlib.Path]]:
    """`(line, name, lines)` of each function over LIMIT outside test code, and the
    paths (files and directories) of test-only child modules."""
    text = path.read_text()
    code = blank(text)
    spans, test_files = test_modules(text, code)
    skipped = []
    for name in test_files:
        directory = module_directory(path)
        skipped += [directory / f"{name}.rs", directory / name]
    found = []
    for function in FUNCTION.finditer(code):
        start = function.start()
        if any(low <= start <= high for low, high in spans):
            continue
        before = QUALIFIERS.sub("", code[max(0, start - 400) : start])
        if TEST_ATTRIBUTE.search(before):
            continue
        # The body opens at the first `{` outside parentheses and brackets (`[u8; 4]`).
        depth, index = 0, function.end()
        while index < len(code):
            character = code[index]
            if character in "([":
                depth += 1
            elif character in ")]":
                depth -= 1
            elif depth == 0 and character in "{;":
                break
            index += 1
        if index >= len(code) or code[index] == ";":
            continue  # a declaration without a body
        end = matching_brace(code, index)
        first = code.count("\n", 0, start) + 1
        last = code.count("\n", 0, end) + 1
        if last - first + 1 > LIMIT:
            found.append((first, function.group(1), last - first + 1))
    return found, skipped


def sources() -> list[pathlib.Path]:
    members = tomllib.loads(pathlib.Path("Cargo.toml").read_text())["workspace"]["members"]
    files = []
    for member in members:
        if member in TEST_DOUBLE_CRATES:
            continue
        files += sorted(pathlib.Path(member, "src").rglob("*.rs"))
    return [file for file in files if not {"tests", "benches"} & set(file.parts)]


def main() -> int:
    offenders, measured, skipped = [], {}, []
    for path in sources():
        found, test_paths = long_functions(path)
        skipped += test_paths
        for line, name, lines in found:
            offenders.append((path, line, name, lines))
    failed = False
    for path, line, name, lines in offenders:
        if any(path == test or test in path.parents for test in skipped):
            continue
        key = f"{path.as_posix()}::{name}"
        measured[key] = lines
        if key not in ALLOWED:
            failed = True
            print(f"{path}:{line} {name} {lines} lines (limit {LIMIT})", file=sys.stderr)
    for key in sorted(set(ALLOWED) - set(measured)):
        failed = True
        print(f"{key} is allowed to be long but no longer is: remove it from ALLOWED in .ci/fn-length.py", file=sys.stderr)
    if not failed:
        print(f"function length: none over {LIMIT} lines but the {len(ALLOWED)} allowed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
