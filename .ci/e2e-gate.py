#!/usr/bin/env python3
"""Every scenario file of saint-e2e is gated by its `cluster` feature.

The files in `e2e/tests/` need the control plane `e2e/run.sh` starts; `cargo test
--workspace` skips them only when each has a `[[test]]` entry in `e2e/Cargo.toml`
requiring `cluster`. Exits 1 naming each file without one. Run from the repository
root.
"""

import pathlib
import sys
import tomllib


def main() -> int:
    manifest = tomllib.loads(pathlib.Path("e2e/Cargo.toml").read_text())
    gated = {
        test["name"]
        for test in manifest.get("test", [])
        if "cluster" in test.get("required-features", [])
    }
    files = sorted(path.stem for path in pathlib.Path("e2e/tests").glob("*.rs"))
    missing = [name for name in files if name not in gated]
    for name in missing:
        print(
            f"e2e/tests/{name}.rs has no [[test]] entry requiring the `cluster` feature "
            f'in e2e/Cargo.toml: add `[[test]] name = "{name}" required-features = '
            '["cluster"]`',
            file=sys.stderr,
        )
    if not missing:
        print(f"e2e gate: {len(files)} scenario files require the cluster feature")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
