"""MkDocs hook: code in the pages, included from the stage files by name.

A line ``--8<-- "stage5_gpt/model.py:CausalSelfAttention"`` (outside code fences or inside
one) becomes the source of that definition: a class, a function, a method named
``Class.method`` (with its decorators), or a constant (``PRESETS = ...``), dedented, at
the line's indentation. Nothing in
the stage files marks what the docs show. A file or name that does not exist fails the
build, naming it. Other ``--8<--`` lines (generated text files, sections of the
explorer's JavaScript) are left to pymdownx.snippets.

Notes on the code, without touching the stage files: a line
``<!-- annotate: (1) q, k, v = | (2) scaled = -->`` before a code block marks, in the
next included code, the first line containing each text with Material's annotation
``# (1)!``; the ordered list right after the block holds the notes, which open beside
those lines. A text that no included line contains fails the build.
"""

import ast
import re
import textwrap
from pathlib import Path

from mkdocs.exceptions import PluginError

INCLUDE_RE = re.compile(r"""^([ \t]*)--8<--[ \t]+["']([^"':]+\.py):([\w.]+)["'][ \t]*$""")
ANNOTATE_RE = re.compile(r"^[ \t]*<!--[ \t]*annotate:(.*?)-->[ \t]*$")
NOTE_RE = re.compile(r"\((\d+)\)\s*([^|]+?)\s*(?:\||$)")


def names(node: ast.AST) -> list[str]:
    """The names a statement defines: a class, a function, or the targets of ``X = ...``."""
    if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
        return [node.name]
    targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
    return [t.id for t in targets if isinstance(t, ast.Name)]


def find(tree: ast.Module, qualname: str) -> ast.AST | None:
    """The class, function or constant ``qualname`` ("Class.method") names, or None."""
    node, body = None, tree.body
    for part in qualname.split("."):
        node = next((n for n in body if part in names(n)), None)
        if node is None:
            return None
        body = getattr(node, "body", [])
    return node


def definition(path: Path, qualname: str) -> tuple[int, int, str]:
    """(first line, last line, text) of ``qualname`` in ``path``: 1-based, decorators
    included, the text dedented. Raises KeyError when the name is not defined there."""
    source = path.read_text(encoding="utf-8")
    node = find(ast.parse(source), qualname)
    if node is None:
        raise KeyError(qualname)
    first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
    lines = source.splitlines()[first - 1 : node.end_lineno]
    return first, node.end_lineno, textwrap.dedent("\n".join(lines))


def annotate(code: list[str], notes: list[tuple[str, str]], where: str) -> list[str]:
    """``code`` with ``  # (n)!`` after the first line that contains each note's text."""
    for number, text in notes:
        hit = next((i for i, line in enumerate(code) if text in line), None)
        if hit is None:
            raise PluginError(f"annotate: no line of {where} contains {text!r} (note {number})")
        code[hit] = f"{code[hit]}  # ({number})!"
    return code


def include(markdown: str, root: Path) -> str:
    """Every include-by-name line of a page replaced by the code it names; definitions
    included one after the other are set apart by a blank line."""
    out, after, notes = [], False, []
    for line in markdown.split("\n"):
        if a := ANNOTATE_RE.match(line):
            notes = NOTE_RE.findall(a[1])  # for the next code included
            continue
        m = INCLUDE_RE.match(line)
        if not m:
            out.append(line)
            after = False
            continue
        indent, file, qualname = m.groups()
        path = root / file
        if not path.is_file():
            raise PluginError(f"include: no file {file} (for {file}:{qualname})")
        try:
            text = definition(path, qualname)[2]
        except KeyError:
            raise PluginError(f"include: {file} defines no {qualname}") from None
        code = annotate(text.split("\n"), notes, f"{file}:{qualname}") if notes else text.split("\n")
        notes = []
        out += ([""] if after else []) + [indent + c if c else "" for c in code]
        after = True
    return "\n".join(out)


def on_page_markdown(markdown: str, page, config, files, **kwargs) -> str:
    return include(markdown, Path(config.config_file_path).parent)
