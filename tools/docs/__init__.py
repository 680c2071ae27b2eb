"""The docs' generated numbers, tables, readings and figures: ``python -m tools.docs``.

- ``store.py`` runs each command the docs quote once and keeps what it printed, keyed by
  what can change its result;
- ``pages/``, one module per docs page: its ``JOBS`` write ``docs/generated/<job>/`` from
  stored runs (a job never trains: the store makes the runs it reads first);
- ``tables.py``: one table for both languages (a reading: docs/hooks/facts.py).

A job is data: a name, its inputs (runs, the runs whose checkpoints it reads, repository
files, its module's code and the tools/docs modules it imports; of this module and
store.py, which only run it, just ``Page``) and an action. ``docs/generated/manifest.json``
records each job's input key; ``python -m tools.docs --check`` (a test runs it) names the
stale jobs.
"""

from __future__ import annotations

import ast
import hashlib
import json
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from . import store
from .store import ROOT, Run, Stored, code_key
from .tables import table

__all__ = ["GEN", "Job", "Page", "Run", "Stored", "table"]

GEN = ROOT / "docs" / "generated"
MANIFEST = GEN / "manifest.json"


@dataclass(frozen=True)
class Job:
    """``action(page)`` writes ``docs/generated/<name>/`` from the runs and files it reads."""

    name: str
    action: Callable[[Page], None]
    runs: tuple[Run, ...] = ()
    files: tuple[str, ...] = ()  # repository files or folders the action reads or runs
    folders: tuple[Run, ...] = ()  # runs (among ``runs``) whose checkpoints the action reads
    timed: tuple[Run, ...] = ()  # runs whose times the page sets side by side: one kind of CPU

    def key(self) -> str:
        code = [p for p in sources(Path(sys.modules[self.action.__module__].__file__))
                if p.name != "store.py" and p != Path(__file__)]  # they run it: page_meaning
        parts = {"name": self.name, "code": code_key(*code), "page": page_meaning(),
                 "files": code_key(*(ROOT / f for f in self.files)) if self.files else "",
                 "runs": [store.facts_key(run) for run in self.runs]}
        return hashlib.sha256(json.dumps(parts).encode()).hexdigest()


def sources(path: Path) -> list[Path]:
    """A module of tools/docs and the tools/docs modules it imports (``from .x import y``,
    ``from . import x``, at its top level), and theirs: the code whose meaning decides what a
    job writes."""
    seen: list[Path] = []
    todo = [path]
    while todo:
        p = todo.pop()
        if p in seen or not p.is_file():
            continue
        seen.append(p)
        for node in ast.parse(p.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.ImportFrom) and node.level:
                base = p.parents[node.level - 1].joinpath(*(node.module or "").split("."))
                todo += [base.with_suffix(".py"), base / "__init__.py",  # and submodules by name
                         *(base / f"{alias.name}.py" for alias in node.names)]
    return seen


def page_meaning() -> str:
    """The meaning of ``Page``, the one part of this module and of store.py that decides
    what a job writes: an edit to the rest (how jobs and runs are made, kept and checked)
    makes no job stale."""
    tree = ast.parse(Path(__file__).read_text(encoding="utf-8"))
    return store.tree_meaning(next(n for n in tree.body if getattr(n, "name", "") == "Page"))


class Page:
    """What a job's action gets: its stored runs, and its folder to write into."""

    def __init__(self, job: Job):
        self.job, self.dir, self.facts = job, GEN / job.name, {}

    def stored(self, run: Run) -> Stored:
        assert run in self.job.runs, f"job {self.job.name} reads {run.id} but does not list it"
        return store.make(run)

    def folder(self, run: Run) -> Path:
        """The run's output folder: its checkpoints and the files it drew."""
        assert run in self.job.folders, f"job {self.job.name} reads {run.id}'s folder: list it"
        return store.folder(run)

    def write(self, name: str, text: str) -> None:
        path = self.dir / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text.rstrip("\n") + "\n", encoding="utf-8")

    def both(self, name: str, texts: dict[str, str]) -> None:
        """An English and a Chinese file: ``name.md`` and ``name.zh.md``."""
        self.write(f"{name}.md", texts["en"])
        self.write(f"{name}.zh.md", texts["zh"])

    def fact(self, name: str, value) -> None:
        """A number or word the pages' prose may quote or check (docs/hooks/facts.py)."""
        self.facts[name.replace("-", "_")] = value  # names are words: "tang-2min" -> tang_2min


def jobs() -> list[Job]:
    from .pages import JOBS

    return JOBS


def manifest() -> dict:
    try:
        return json.loads(MANIFEST.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def stale(chosen: list[Job]) -> list[Job]:
    recorded = manifest()
    return [j for j in chosen if recorded.get(j.name, {}).get("key") != j.key()]


def make(chosen: list[Job], here: bool = False) -> None:
    """Make the stale runs these jobs read (``here``: also those stored on another kind of
    CPU), the checkpoints they read, the runs whose times a page sets beside one made on
    this kind (``Job.timed``), then these jobs and every job whose runs' facts changed,
    each written into a fresh folder that replaces the old one when the job ends well."""
    chosen, runs = list(chosen), list(dict.fromkeys(r for j in chosen for r in j.runs))
    todo = [r for r in runs if not store.fresh(r) or (here and not store.made_here(r))]
    for run in todo:  # before any run starts: a missing classic corpus is one error line
        store.require(run)
    print(f"{len(todo)} runs to make, then the jobs that read them", flush=True)
    # The checkpoints the jobs and the runs read (``after``), remade where the cache lacks
    # them; on another kind of CPU than the stored one, such a run's facts change
    # (store.folder), and every job that reads them is made too.
    facts = {r: store.facts_key(r) for j in jobs() for r in j.runs}
    store.make_all(todo)
    store.in_turn(store.folder, [r for j in chosen for r in j.folders])
    while elsewhere := list(dict.fromkeys(  # times set side by side: all from this kind
            r for j in jobs() if any(map(store.made_here, j.timed))
            for r in j.timed if not store.made_here(r))):
        store.make_all(elsewhere)
    changed = {r for r, key in facts.items() if store.facts_key(r) != key}
    chosen += [j for j in jobs() if changed & set(j.runs) and j not in chosen]
    recorded = manifest()
    for job in chosen:
        t0 = time.time()
        print(f"[{job.name}]", flush=True)
        page = Page(job)
        done, page.dir = page.dir, GEN / f".{job.name}.new"  # a job that fails leaves its last files
        shutil.rmtree(page.dir, ignore_errors=True)
        job.action(page)
        if page.facts:
            page.write("facts.json", json.dumps(page.facts, ensure_ascii=False, indent=1))
        shutil.rmtree(done, ignore_errors=True)
        if page.dir.is_dir():  # a job may write nothing
            page.dir.rename(done)
        recorded[job.name] = {"key": job.key(), "seconds": round(time.time() - t0, 1)}
        MANIFEST.write_text(json.dumps(dict(sorted(recorded.items())), indent=1) + "\n",
                            encoding="utf-8")
