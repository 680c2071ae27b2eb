"""MkDocs hook: show what changed between two stage folders, at build time.

A page may contain a marker line (alone on its line, outside code fences):

    <!-- stage-diff: stage2_bigram stage3_attention -->
    <!-- stage-diff: stage2_bigram stage3_attention model.py -->

The first form diffs every ``*.py`` file of the two folders (recursively,
ignoring ``__pycache__`` and ``corpus/``); the second diffs one file. The
marker is replaced by a sentence naming the byte-identical files and a
```` ```diff ```` fence made with :func:`difflib.unified_diff`, so the diff in
the docs is always the diff of the code in the repository. Folders are
relative to the directory of ``mkdocs.yml`` (the repository root).

A folder or file that does not exist fails the build (``PluginError``).
Registered in mkdocs.yml under ``hooks:``; :func:`render_stage_diff` is plain
Python so it can be unit-tested without MkDocs.
"""

from __future__ import annotations

import difflib
import os
import re
from pathlib import Path

try:  # The hook runs inside MkDocs; the unit tests import it without MkDocs.
    from mkdocs.exceptions import PluginError as _BuildError
except ImportError:  # pragma: no cover
    _BuildError = RuntimeError


class StageDiffError(_BuildError):
    """A stage-diff marker names a folder or file that does not exist."""


MARKER_RE = re.compile(
    r"^[ \t]*<!--[ \t]*stage-diff:[ \t]*(?P<args>[^>]*?)[ \t]*-->[ \t]*$"
)
FENCE_RE = re.compile(r"^[ \t]*(?P<fence>`{3,}|~{3,})")
IGNORED_DIRS = {"__pycache__", "corpus"}


def _python_files(folder: Path) -> dict[str, Path]:
    """Relative POSIX path -> file, for every *.py under folder (ignored dirs skipped)."""
    found: dict[str, Path] = {}
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = sorted(d for d in dirnames if d not in IGNORED_DIRS and not d.startswith("."))
        for name in sorted(filenames):
            if name.endswith(".py"):
                path = Path(dirpath) / name
                found[path.relative_to(folder).as_posix()] = path
    return found


def _lines(path: Path | None) -> list[str]:
    if path is None:
        return []
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
        lines.append("\\ No newline at end of file\n")
    return lines


def _file_diff(old_name: str, new_name: str, rel: str, old: Path | None, new: Path | None) -> str:
    fromfile = f"{old_name}/{rel}" if old is not None else "/dev/null"
    tofile = f"{new_name}/{rel}" if new is not None else "/dev/null"
    return "".join(difflib.unified_diff(_lines(old), _lines(new), fromfile, tofile, n=3))


def _folder(root: Path, name: str) -> Path:
    path = (root / name).resolve()
    if not path.is_dir():
        raise StageDiffError(
            f"stage-diff: folder '{name}' does not exist (looked for {path})"
        )
    return path


def render_stage_diff(root: Path | str, old_name: str, new_name: str, only: str | None = None) -> str:
    """Markdown for the differences between folders root/old_name and root/new_name.

    Returns a short sentence about unchanged files plus a ```diff fence, wrapped
    in ``<div class="stage-diff" markdown>`` (md_in_html) for styling and tests.
    """
    root = Path(root)
    old_dir = _folder(root, old_name)
    new_dir = _folder(root, new_name)

    if only is not None:
        old_file = old_dir / only
        new_file = new_dir / only
        if not old_file.is_file() and not new_file.is_file():
            raise StageDiffError(
                f"stage-diff: file '{only}' exists in neither '{old_name}' nor '{new_name}'"
            )
        old_files = {only: old_file} if old_file.is_file() else {}
        new_files = {only: new_file} if new_file.is_file() else {}
    else:
        old_files = _python_files(old_dir)
        new_files = _python_files(new_dir)

    unchanged: list[str] = []
    chunks: list[str] = []
    for rel in sorted(set(old_files) | set(new_files)):
        old, new = old_files.get(rel), new_files.get(rel)
        if old is not None and new is not None and old.read_bytes() == new.read_bytes():
            unchanged.append(rel)
            continue
        chunks.append(_file_diff(old_name, new_name, rel, old, new))

    parts = ['<div class="stage-diff" markdown>', ""]
    if unchanged:
        parts += ["Unchanged: " + ", ".join(f"`{rel}`" for rel in unchanged) + ".", ""]
    if chunks:
        body = "".join(chunks)
        # A fence longer than any backtick run inside, so the diff cannot close it.
        longest = max((len(m) for m in re.findall(r"`+", body)), default=0)
        fence = "`" * max(3, longest + 1)
        title = f"{old_name} → {new_name}" + (f" ({only})" if only else "")
        parts += [f'{fence}diff title="{title}"', body.rstrip("\n"), fence, ""]
    else:
        what = f"`{only}` is" if only else "The Python files are"
        parts += [f"{what} identical in `{old_name}` and `{new_name}`.", ""]
    parts += ["</div>"]
    return "\n".join(parts)


def replace_markers(markdown: str, root: Path | str) -> str:
    """Replace every stage-diff marker line outside code fences."""
    out: list[str] = []
    open_fence: str | None = None
    for line in markdown.split("\n"):
        fence = FENCE_RE.match(line)
        if open_fence is None:
            if fence:
                open_fence = fence.group("fence")
            else:
                match = MARKER_RE.match(line)
                if match:
                    args = match.group("args").split()
                    if len(args) not in (2, 3):
                        raise StageDiffError(
                            f"stage-diff: expected 'OLD NEW [FILE]', got {match.group('args')!r}"
                        )
                    out.append(render_stage_diff(root, *args))
                    continue
        elif fence and fence.group("fence")[0] == open_fence[0] and len(fence.group("fence")) >= len(open_fence) \
                and not line.strip()[len(fence.group("fence")):].strip():
            open_fence = None
        out.append(line)
    return "\n".join(out)


def _root(config) -> Path:
    return Path(config.config_file_path).resolve().parent


def on_page_markdown(markdown, page, config, files, **kwargs):
    if "stage-diff:" not in markdown:
        return markdown
    try:
        return replace_markers(markdown, _root(config))
    except StageDiffError as err:
        raise StageDiffError(f"{page.file.src_uri}: {err}") from err


def on_serve(server, config, builder, **kwargs):
    """`mkdocs serve`: rebuild when the code of a stage changes."""
    root = _root(config)
    for folder in sorted(root.glob("stage*_*")):
        if folder.is_dir():
            server.watch(str(folder))
    return server
