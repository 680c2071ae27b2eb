"""The docs' generated numbers, tables, readings and figures: ``python -m tools.docs``.

- ``store.py`` runs each command the docs quote once and keeps what it printed, keyed by
  what can change its result;
- ``pages/``, one module per docs page: its ``JOBS`` write ``docs/generated/<job>/`` from
  stored runs (a job never trains: the store makes the runs it reads first);
- ``tables.py``: one table for both languages (a reading: docs/hooks/facts.py).

A job is data: a name, its inputs (runs, repository files, its module's code and the
tools/docs modules it imports; of this module and store.py, which only run it, just
``Page``), its draws and an action. A draw (``Draw``) is all a job makes from checkpoints
(figures, facts computed from a trained model): a function of its own, keyed by the code it
needs alone (``needs``) and the stored facts of the runs it reads, and kept from one make to
the next. So a change to the rest of a page makes its job again without a checkpoint, which
a fresh clone's cache lacks and which, made again on another kind of CPU, comes out with
other numbers (store.folder) that would replace the stored ones and remake every page that
shows them. ``docs/generated/manifest.json`` records each job's key and its draws';
``python -m tools.docs --check`` (a test runs it) names the stale jobs; ``plan()`` says what
a make does, for ``make()`` and ``--list`` alike.
"""

from __future__ import annotations

import ast
import hashlib
import json
import shutil
import symtable
import sys
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from . import store
from .store import ROOT, Run, Stored, code_key
from .tables import table

__all__ = ["GEN", "Draw", "Job", "Page", "Plan", "Run", "Stored", "make", "plan", "table"]

GEN = ROOT / "docs" / "generated"
MANIFEST = GEN / "manifest.json"
DOCS = Path(__file__).parent  # tools/docs
GUESS = 5.0  # seconds, for a job or a draw never made: no time to go by


@dataclass(frozen=True, eq=False)
class Draw:
    """``fn(page, *args)``: what a job makes from the checkpoints of ``reads`` (figures,
    facts computed from a trained model), as files in the job's folder and facts, and from
    nothing but them, its arguments, its code and the repository: so its key says when it
    must be made again. ``fn`` is a top-level function of the job's module; the action
    calls it as ``page.draw(fn, *args)``."""

    fn: Callable[..., None]
    args: tuple
    reads: tuple[Run, ...]

    def __init__(self, fn: Callable[..., None], *args, reads: Run | tuple[Run, ...]):
        reads = (reads,) if isinstance(reads, Run) else tuple(reads)
        for name, value in (("fn", fn), ("args", args), ("reads", reads)):
            object.__setattr__(self, name, value)

    @property
    def name(self) -> str:
        """``figures('en')``: the function and its arguments (a table of words: ``dict``)."""
        shown = (repr(a) if a is None or isinstance(a, str | int | float) else type(a).__name__
                 for a in self.args)
        return f"{self.fn.__name__}({', '.join(shown)})"

    def key(self, job: Job) -> str:
        """What the draw writes depends on: the code it needs (not the rest of its module),
        its arguments, ``Page``, its job's repository files and its runs' stored facts."""
        module = Path(sys.modules[self.fn.__module__].__file__)
        parts = {"draw": self.name, "code": needs(module, self.fn.__name__),
                 "args": json.dumps(self.args, ensure_ascii=False, sort_keys=True, default=repr),
                 "page": page_meaning(),
                 "files": code_key(*(ROOT / f for f in job.files)) if job.files else "",
                 "reads": [store.facts_key(run) for run in self.reads]}
        return hashlib.sha256(json.dumps(parts).encode()).hexdigest()


@dataclass(frozen=True)
class Job:
    """``action(page)`` writes ``docs/generated/<name>/`` from the runs and files it reads."""

    name: str
    action: Callable[[Page], None]
    runs: tuple[Run, ...] = ()
    files: tuple[str, ...] = ()  # repository files or folders the action reads or runs
    draws: tuple[Draw, ...] = ()  # what it makes from checkpoints: nothing else reads one
    timed: tuple[Run, ...] = ()  # runs whose times the page sets side by side: one kind of CPU

    def __post_init__(self):
        names = [d.name for d in self.draws]
        assert len(set(names)) == len(names), f"job {self.name} declares a draw twice: {names}"
        for d in self.draws:
            unlisted = [run.id for run in d.reads if run not in self.runs]
            assert not unlisted, (f"job {self.name}: {d.name} reads {unlisted}: list them in "
                                  "its runs")
        unlisted = [run.id for run in self.timed if run not in self.runs]
        assert not unlisted, f"job {self.name} times {unlisted}: list them in its runs"

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


def needs(path: Path, name: str) -> str:
    """sha256 of the meaning of what the top-level ``name`` of the tools/docs module ``path``
    needs: the top-level statements that bind it, those that bind the names they use, and so
    on, also in the tools/docs modules they import from (``from .x import y``). Of this
    module and store.py nothing counts but what they import from elsewhere (``table``):
    ``Page`` counts apart (page_meaning) and the rest only runs jobs. An edit to the rest of
    a page's module, its text or another figure, leaves the key as it is."""
    parts, todo, seen = set(), [(path, name)], set()
    while todo:
        p, n = todo.pop()
        if (p, n) in seen or p == DOCS / "store.py":
            continue
        seen.add((p, n))
        for node, binds, uses, meaning in top_level(p, p.read_text(encoding="utf-8")):
            if n != "*" and n not in binds:
                continue
            if isinstance(node, ast.ImportFrom) and node.level:  # from .x import y: y in x
                todo += [imported(p, node, alias) for alias in node.names
                         if n in ("*", alias.asname or alias.name)]
            elif p != DOCS / "__init__.py":
                where = p.relative_to(ROOT).as_posix() if p.is_relative_to(ROOT) else p.name
                parts.add(f"{where} {meaning}")
                todo += [(p, u) for u in uses]
    return hashlib.sha256("\n".join(sorted(parts)).encode()).hexdigest()


@cache
def top_level(path: Path, text: str) -> list[tuple[ast.stmt, set[str], set[str], str]]:
    """Each top-level statement of a module: the names it binds, the module's names it uses
    (also in the functions and comprehensions it holds, but not their own names: symtable
    tells them apart), its meaning. A statement that changes a name in place
    (``RUNS.update(...)``, ``RUNS[k] = ...``) binds it too: what a name is needs it."""
    def root(node: ast.AST) -> str | None:
        while isinstance(node, ast.Attribute | ast.Subscript | ast.Call):
            node = node.func if isinstance(node, ast.Call) else node.value
        return node.id if isinstance(node, ast.Name) else None

    def used(scope: symtable.SymbolTable) -> set[str]:
        names = {s.get_name() for s in scope.get_symbols() if s.is_referenced()
                 and (scope.get_type() == "module" or s.is_global())}
        return names.union(*map(used, scope.get_children()))

    out = []
    for node in ast.parse(text).body:
        scope = symtable.symtable(ast.unparse(node), str(path), "exec")
        binds = {s.get_name() for s in scope.get_symbols() if s.is_assigned() or s.is_imported()}
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            binds |= {root(t) for t in ast.walk(node) if isinstance(t, ast.Attribute | ast.Subscript)
                      and isinstance(t.ctx, ast.Store)}
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
                binds.add(root(node.value))
        out.append((node, binds - {None}, used(scope), store.tree_meaning(node)))
    return out


def imported(path: Path, node: ast.ImportFrom, alias: ast.alias) -> tuple[Path, str]:
    """Where ``from .x import y`` in ``path`` takes ``y`` from: (module x, "y"), or (module
    y, "*": all of it) when y is a module."""
    base = path.parents[node.level - 1].joinpath(*(node.module or "").split("."))
    if (base / f"{alias.name}.py").is_file():
        return base / f"{alias.name}.py", "*"
    module = base.with_suffix(".py")
    return (module if module.is_file() else base / "__init__.py"), alias.name


def page_meaning() -> str:
    """The meaning of ``Page``, the one part of this module and of store.py that decides
    what a job writes: an edit to the rest (how jobs and runs are made, kept and checked)
    makes no job stale."""
    return class_meaning(Path(__file__).read_text(encoding="utf-8"), "Page")


@cache
def class_meaning(text: str, name: str) -> str:
    tree = ast.parse(text)
    return store.tree_meaning(next(n for n in tree.body if getattr(n, "name", "") == name))


class Page:
    """What a job's action gets: its stored runs, its draws, and its folder to write into."""

    def __init__(self, job: Job):
        self.job, self.dir, self.facts = job, GEN / job.name, {}
        self.drawing: Draw | None = None  # the draw being made: the checkpoints it may read
        self.drawn: dict[str, dict] = {}  # each draw made or kept, as the manifest records it

    def stored(self, run: Run) -> Stored:
        assert run in self.job.runs, f"job {self.job.name} reads {run.id} but does not list it"
        assert not self.drawing or run in self.drawing.reads, (
            f"job {self.job.name}: {self.drawing.name} reads {run.id}: list it in its reads")
        return store.make(run)

    def folder(self, run: Run) -> Path:
        """The run's output folder: its checkpoints and the files it drew. Only a draw reads
        one, of a run it lists: its key says when the folder must be read again."""
        assert self.drawing and run in self.drawing.reads, (
            f"job {self.job.name} reads {run.id}'s checkpoint outside a draw that lists it: "
            "read it in a function the job declares, Draw(fn, ..., reads=run) in its draws, "
            "and call page.draw(fn, ...)")
        return store.folder(run)

    def draw(self, fn: Callable[..., None], *args) -> None:
        """``fn(self, *args)``, one of the job's draws: made, or when the last make made it
        under the key it has now, its files and facts as that make left them (make_draw())."""
        d = next((d for d in self.job.draws if d.fn is fn and d.args == args), None)
        assert d, (f"job {self.job.name} draws {fn.__name__}{args} but does not declare it: "
                   f"add Draw({fn.__name__}, ..., reads=...) to its draws")
        make_draw(self, d)

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


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def hashes(folder: Path) -> dict[str, str]:
    """Every file below ``folder``: its path in it, and its sha256."""
    return {p.relative_to(folder).as_posix(): sha(p) for p in sorted(folder.rglob("*"))
            if p.is_file()} if folder.is_dir() else {}


def last_facts(job: Job) -> dict:
    try:
        return json.loads((GEN / job.name / "facts.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def kept(job: Job, d: Draw, recorded: dict | None = None) -> dict | None:
    """The last make's record of draw ``d`` (``recorded``: the manifest) if it still holds:
    made under the key the draw has now, its files and facts in the job's folder as it made
    them. Else None: it must be made again, from its checkpoints."""
    record = (manifest() if recorded is None else recorded).get(job.name, {}).get(
        "draws", {}).get(d.name)
    last = GEN / job.name
    if (not record or record["key"] != d.key(job)
            or not set(record["facts"]) <= set(last_facts(job))):
        return None
    intact = all((last / n).is_file() and sha(last / n) == h for n, h in record["files"].items())
    return record if intact else None


def make_draw(page: Page, d: Draw) -> None:
    """Make draw ``d`` into ``page``, or, when the last make's record of it still holds
    (kept), copy its files and facts from the job's last folder."""
    last, record = GEN / page.job.name, kept(page.job, d)
    if record:
        facts = last_facts(page.job)
        for name in record["files"]:
            (page.dir / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(last / name, page.dir / name)
        page.facts.update({name: facts[name] for name in record["facts"]})
    else:
        files, facts, t0 = hashes(page.dir), dict(page.facts), time.time()
        print(f"  {d.name}", flush=True)
        page.drawing = d
        try:
            d.fn(page, *d.args)
        finally:
            page.drawing = None
        record = {"key": d.key(page.job), "seconds": round(time.time() - t0, 1),
                  "calibration": store.machine().get("calibration"),
                  "files": {n: h for n, h in hashes(page.dir).items() if files.get(n) != h},
                  "facts": [n for n, v in page.facts.items() if n not in facts or facts[n] != v]}
    page.drawn[d.name] = record


@dataclass
class Plan:
    """What a make does, in its order, each with why: ``checkpoints``, fresh runs made again
    for the checkpoint that a draw or a run made after them reads (store.folder); ``runs``,
    made and stored (store.make_all); ``jobs``, each with the draws it makes again (the
    others are kept); ``changed``: the runs whose stored facts change."""

    checkpoints: dict[Run, str]
    runs: dict[Run, str]
    jobs: list[tuple[Job, str, list[Draw]]]
    changed: set[Run]
    recorded: dict  # the manifest it was made from: the jobs' and draws' last times

    def job_seconds(self, job: Job, draws: list[Draw]) -> tuple[float, bool]:
        """About how long ``job`` takes here, making ``draws`` again, and whether that is
        its last time scaled to this machine (False: as measured, or GUESS)."""
        record = self.recorded.get(job.name)
        if not record:
            return GUESS, False
        seconds, scaled = store.scaled(record["seconds"], record)
        if job.draws and "draws" not in record:  # made before draws were kept: all in one
            return seconds, scaled
        for d in draws:
            last = record["draws"].get(d.name)
            took, ok = store.scaled(last["seconds"], last) if last else (GUESS, False)
            seconds, scaled = seconds + took, scaled and ok
        return seconds, scaled

    def seconds(self) -> float:
        """About how long the make takes here: the runs as make() runs them, two at a time
        (store.in_turn), then the jobs one by one."""
        took = {run: store.estimate(run)[0] for run in [*self.checkpoints, *self.runs]}
        waves = [self.checkpoints, [r for r in self.runs if not r.after],
                 [r for r in self.runs if r.after]]
        return (sum(store.in_turn_seconds({r: took[r] for r in wave}) for wave in waves)
                + sum(self.job_seconds(job, draws)[0] for job, _, draws in self.jobs))


def plan(chosen: list[Job], here: bool = False, changed: Collection[Run] = ()) -> Plan:
    """What ``make(chosen, here)`` does, decided as it decides, with nothing run: the stale
    runs of the jobs it makes (``here``: also the chosen jobs' runs stored on another kind
    of CPU); a run made after another (``Run.after``) whose numbers change; the checkpoints
    that a stale draw or such a run reads and the cache lacks, made again (on another kind
    of CPU than the stored one their numbers come out a little different and replace the
    stored ones: store.folder); the runs whose times a page sets beside one made here
    (``Job.timed``); the chosen jobs, and every job whose runs change. ``changed``: runs this
    make has already made (make() plans again as it goes)."""
    everyone = list(dict.fromkeys([*jobs(), *chosen]))
    every: dict[Run, None] = {}
    for run in (r for j in everyone for r in j.runs):
        while run and run not in every:  # and the runs they are made after
            every[run], run = None, run.after
    kind = store.machine()["kind"] if every else ""
    stored = {r: store.load(r) for r in every}
    fresh = {r: store.fresh(r) for r in every}
    cached = {r: store.cached(r) for r in every}
    made_on = {r: s.machine.get("kind") if s else None for r, s in stored.items()}
    recorded, behind = manifest(), {j.name for j in stale(chosen)}
    doing = {j: "stale" if j.name in behind else "asked for" for j in chosen}
    done = set(changed)  # already changed: what the store holds now says what follows
    runs, checkpoints, changed = {}, {}, set(changed)
    last: dict[tuple[str, str], bool] = {}  # (job, draw): the last make's record holds

    def make_run(run: Run, why: str) -> None:
        if run not in runs:
            runs[run] = why
            checkpoints.pop(run, None)
            changed.add(run)

    def need(run: Run, why: str) -> None:  # a draw or a run made after it reads its checkpoint
        if run in runs or run in checkpoints or (fresh[run] and cached[run]):
            return
        if not fresh[run]:
            return make_run(run, f"stale; {why}")
        elsewhere = made_on[run] != kind
        checkpoints[run] = why + (f"; stored on {made_on[run]}: its numbers will come out a "
                                  "little different and replace the stored ones" if elsewhere
                                  else "; stored on this kind of CPU: it repeats its numbers")
        if elsewhere:
            changed.add(run)

    def stale_draw(job: Job, d: Draw) -> bool:
        if (job.name, d.name) not in last:
            last[job.name, d.name] = kept(job, d, recorded) is not None
        return not last[job.name, d.name] or any(r in changed for r in d.reads)

    while True:
        size = (len(runs), len(checkpoints), len(changed), len(doing))
        for job in list(doing):
            for run in job.runs:
                if not fresh[run]:
                    make_run(run, "stale" if stored[run] else "never made")
                elif here and job in chosen and made_on[run] != kind:
                    make_run(run, f"--here: stored on {made_on[run]}")
        for run in every:
            if run.after in changed and run.after not in done:
                make_run(run, f"made after {run.after.command}, whose numbers change")
        for run in list(runs):
            if run.after:
                need(run.after, f"for {run.command}")
        for job in everyone:
            if job not in doing and changed & set(job.runs):
                doing[job] = "runs change"
        for job in list(doing):
            for d in job.draws:
                if stale_draw(job, d):
                    for run in d.reads:
                        need(run, f"for {job.name}: {d.name}")
        for job in everyone:  # times side by side: all from one kind of CPU
            here_now = [r for r in job.timed if r in runs or r in checkpoints or made_on[r] == kind]
            for run in job.timed:
                if here_now and run not in here_now:
                    make_run(run, f"its time is set beside {here_now[0].command}'s, made here "
                                  f"(job {job.name})")
        if size == (len(runs), len(checkpoints), len(changed), len(doing)):
            break
    order = {job: i for i, job in enumerate(everyone)}
    return Plan(checkpoints, runs, [
        (job, why if why != "runs change" else f"{len(changed & set(job.runs))} of its runs change",
         [d for d in job.draws if stale_draw(job, d)])
        for job, why in sorted(doing.items(), key=lambda item: order[item[0]])], changed, recorded)


def minutes(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.1f} min"


def make(chosen: list[Job], here: bool = False) -> None:
    """Make what ``plan(chosen, here)`` says, in its order: the checkpoints, the runs, then
    the jobs, each written into a fresh folder that replaces the old one when the job ends
    well. A checkpoint made again on another kind of CPU than the stored one comes out with
    other numbers, as the plan assumes; where it repeats the stored ones after all, the plan
    made again after it has less to do."""
    todo, made, remade = plan(chosen, here), set(), set()
    for run in [*todo.checkpoints, *todo.runs]:  # before any run starts: one line if a classic
        store.require(run)  # corpus is missing
    print(f"checkpoints to make again: {len(todo.checkpoints)}, runs: {len(todo.runs)}, then "
          f"jobs: {len(todo.jobs)}; about {minutes(todo.seconds())} here (python -m tools.docs "
          "--list says which and why)", flush=True)
    changed: set[Run] = set()
    while todo.checkpoints or todo.runs:
        again = (made & {*todo.checkpoints, *todo.runs}) | (remade & set(todo.checkpoints))
        if again:  # made in this make, and still to make: the plan does not hold
            raise RuntimeError(f"plan() asks again for {sorted(r.command for r in again)}")
        if todo.checkpoints:
            before = {run: store.facts_key(run) for run in todo.checkpoints}
            store.in_turn(store.folder, list(todo.checkpoints))
            changed |= {run for run, key in before.items() if store.facts_key(run) != key}
            remade |= set(todo.checkpoints)
        else:
            store.make_all(list(todo.runs))
            changed |= set(todo.runs)
            made |= set(todo.runs)
        todo = plan(chosen, here, changed)
    recorded = manifest()
    for job, _, _ in todo.jobs:
        t0 = time.time()
        print(f"[{job.name}]", flush=True)
        page = Page(job)
        done, page.dir = page.dir, GEN / f".{job.name}.new"  # a job that fails leaves its last files
        shutil.rmtree(page.dir, ignore_errors=True)
        job.action(page)
        never = [d.name for d in job.draws if d.name not in page.drawn]
        if never:
            raise RuntimeError(f"job {job.name} never drew {never}: call page.draw() for each "
                               "draw it declares, or leave it out of Job.draws")
        if page.facts:
            page.write("facts.json", json.dumps(page.facts, ensure_ascii=False, indent=1))
        for name, record in page.drawn.items():  # kept, a draw copies the files it made
            later = [n for n, h in record["files"].items()
                     if not (page.dir / n).is_file() or sha(page.dir / n) != h]
            if later:
                raise RuntimeError(f"job {job.name} changed {later} after {name} made them: "
                                   "a draw's files are its own")
        shutil.rmtree(done, ignore_errors=True)
        if page.dir.is_dir():  # a job may write nothing
            page.dir.rename(done)
        last = recorded.get(job.name, {}).get("draws", {})
        drawing = sum(r["seconds"] for n, r in page.drawn.items() if last.get(n) != r)
        own = max(0.0, time.time() - t0 - drawing)  # the draws it made have their own
        recorded[job.name] = {"key": job.key(), "seconds": round(own, 1),
                              "calibration": store.machine().get("calibration"),
                              **({"draws": page.drawn} if page.drawn else {})}
        MANIFEST.write_text(json.dumps(dict(sorted(recorded.items())), indent=1) + "\n",
                            encoding="utf-8")
