"""python -m <stage>: what this stage teaches, and the commands it has.

The commands are found by reading this folder: every module with a ``main()``,
described by the first line of its docstring.
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

from . import __doc__ as ABOUT
from .cli import run_cli


def commands() -> list[tuple[str, str]]:
    """(module, what it does) for every module of this stage that is a command."""
    found = []
    for path in sorted(Path(__file__).parent.glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        if path.stem.startswith("_") or not any(
                isinstance(node, ast.FunctionDef) and node.name == "main" for node in tree.body):
            continue
        what = (ast.get_docstring(tree) or "").splitlines()[0].split(": python -m")[0]
        found.append((f"{__package__}.{path.stem}", what))
    return found


def show(args: argparse.Namespace) -> None:
    print(ABOUT.strip() + "\n\nCommands (each has --help):")
    width = max(len(module) for module, _ in commands())
    for module, what in commands():
        print(f"  python -m {module:<{width}}  {what}")


def main(argv: list[str] | None = None) -> None:
    run_cli(argparse.ArgumentParser(prog=f"python -m {__package__}",
                                    description=ABOUT.splitlines()[0]), show, argv)


if __name__ == "__main__":
    sys.exit(main())
