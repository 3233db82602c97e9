#!/usr/bin/env python3
"""File-level import cycles in each crate of the workspace.

A module's file imports another when it names it through `crate::…`, `super::…` or
`self::…` outside comments and `#[cfg(test)]` code (grouped imports `crate::{a, b}`
count each item). Naming an ancestor (a submodule reaching `super::`) is not an edge:
the parent declares the child. A parent naming its child (`self::child::Item`, a
re-export too) is one: a cycle may pass through it. Prints each strongly connected set of files with its edges and
exits 1 when there is one. Run from the repository root.
"""

import pathlib
import re
import sys
import tomllib

REFERENCE = re.compile(r"\b(crate|super|self)((?:::[A-Za-z_][A-Za-z0-9_]*)*)(::\{)?")
IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def modules(source: pathlib.Path) -> dict[tuple[str, ...], pathlib.Path]:
    found = {}
    for path in source.rglob("*.rs"):
        parts = list(path.relative_to(source).with_suffix("").parts)
        if parts[-1] in ("mod", "lib", "main"):
            parts = parts[:-1]
        found[tuple(parts)] = path
    return found


def code_of(path: pathlib.Path) -> str:
    text = path.read_text().split("#[cfg(test)]")[0]
    return "\n".join(line.split("//")[0] for line in text.splitlines())


def group_items(text: str, start: int) -> list[str]:
    depth, end = 1, start
    while depth and end < len(text):
        depth += {"{": 1, "}": -1}.get(text[end], 0)
        end += 1
    items = []
    for item in re.split(r",(?![^{]*\})", text[start : end - 1]):
        names = IDENT.findall(item)
        if names and names[0] != "self":
            items.append(names[0])
    return items


def edges_of(found: dict) -> dict:
    def resolve(path: list[str]):
        for length in range(len(path), 0, -1):
            if tuple(path[:length]) in found:
                return tuple(path[:length])
        return None

    edges = {module: set() for module in found}
    for module, path in found.items():
        text = code_of(path)
        for match in REFERENCE.finditer(text):
            rest = [name for name in match.group(2).split("::") if name]
            base = {"crate": [], "super": list(module[:-1]), "self": list(module)}[match.group(1)]
            targets = [base + rest]
            if match.group(3):
                targets += [base + rest + [item] for item in group_items(text, match.end())]
            for target in filter(None, map(resolve, targets)):
                if target != module and module[: len(target)] != target:
                    edges[module].add(target)
    return edges


def cycles(edges: dict) -> list[list]:
    index, low, stack, on_stack, found = {}, {}, [], set(), []
    sys.setrecursionlimit(10_000)

    def visit(vertex):
        index[vertex] = low[vertex] = len(index)
        stack.append(vertex)
        on_stack.add(vertex)
        for other in edges[vertex]:
            if other not in index:
                visit(other)
                low[vertex] = min(low[vertex], low[other])
            elif other in on_stack:
                low[vertex] = min(low[vertex], index[other])
        if low[vertex] == index[vertex]:
            component = []
            while True:
                other = stack.pop()
                on_stack.discard(other)
                component.append(other)
                if other == vertex:
                    break
            if len(component) > 1:
                found.append(component)

    for vertex in list(edges):
        if vertex not in index:
            visit(vertex)
    return found


def main() -> int:
    members = tomllib.loads(pathlib.Path("Cargo.toml").read_text())["workspace"]["members"]
    failed = False
    for member in members:
        source = pathlib.Path(member, "src")
        if not source.is_dir():
            continue
        edges = edges_of(modules(source))
        for component in cycles(edges):
            failed = True
            names = sorted("::".join(module) or "crate" for module in component)
            print(f"{member}: import cycle between {', '.join(names)}", file=sys.stderr)
            for module in component:
                for other in sorted(edges[module] & set(component)):
                    print(f"    {'::'.join(module)} -> {'::'.join(other)}", file=sys.stderr)
    if not failed:
        print(f"import cycles: none in {len(members)} crates")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
