"""What ``python -m tools.docs`` makes, and what ``--list`` says it will: one planner
(tools/docs plan()), checked on stores made up in a temporary folder. Nothing trains: a
stand-in for store.execute keeps what a run would print on each kind of CPU (its numbers
differ from one kind to another, as the last bits of real sums do) and how long it took.

The store of each test is made on the kind "zen3" (calibration: 1 s), then cloned onto the
kind "zen5", twice as slow (2 s), with an empty cache: no checkpoints, as a fresh clone.
"""

from __future__ import annotations

import functools
import json
import shutil
from types import SimpleNamespace

import pytest

from tools import docs
from tools.docs import __main__ as cli
from tools.docs import store
from tools.docs.store import Run

A = Run("stage2_bigram", "--data", "en")  # a training whose checkpoint a page draws from
B = Run("stage2_bigram", "--data", "zh")  # its time is set beside A's on that page
S = Run("stage2_bigram", "--prompt", "x", module="sample", after=A)  # made after A
C = Run("stage3_attention", "--data", "en")  # read by a job of its own
SECONDS = {A: 100.0, B: 50.0, S: 10.0, C: 30.0}  # on a machine whose calibration takes 1 s


def picture(page: docs.Page, data: str) -> None:
    """The draw of job "page": a file and a fact from A's checkpoint."""
    page.write(f"picture_{data}.txt", (page.folder(A) / "facts.txt").read_text())
    page.fact(f"{data}.picture", len(page.dir.name))


def numbers(page: docs.Page) -> None:
    """What a job shows of each run's stored facts; job "page" also draws."""
    for run in page.job.runs:
        page.write(f"{run.id}.txt", page.stored(run).stdout)
    if page.job.draws:
        page.draw(picture, "en")


@pytest.fixture
def world(monkeypatch, tmp_path):
    """Three jobs: "page" (A, B, S; draws from A's checkpoint; A and B timed), "shows" (A's
    numbers) and "other" (C), made on zen3; then the clone on zen5 with an empty cache.
    ``world.made``: the runs executed since, in order."""
    w = SimpleNamespace(made=[], alike={}, jobs=[
        docs.Job("page", numbers, runs=(A, B, S), draws=(docs.Draw(picture, "en", reads=A),),
                 timed=(A, B)),
        docs.Job("shows", numbers, runs=(A,)), docs.Job("other", numbers, runs=(C,))])
    monkeypatch.setattr(store, "RUNS", tmp_path / "runs")
    monkeypatch.setattr(store, "CACHE", tmp_path / "cache")
    monkeypatch.setattr(docs, "GEN", tmp_path / "gen")
    monkeypatch.setattr(docs, "MANIFEST", tmp_path / "gen" / "manifest.json")
    monkeypatch.setattr(docs, "jobs", lambda: w.jobs)
    monkeypatch.setattr(cli, "jobs", lambda: w.jobs)
    monkeypatch.setattr(store, "machine", lambda: w.machine)
    frozen = functools.cache(store.code_key)  # the code as the test starts: an edit of the
    monkeypatch.setattr(store, "code_key", frozen)  # stages meanwhile makes no run stale
    monkeypatch.setattr(docs, "code_key", frozen)

    def on(kind: str, calibration: float) -> None:
        w.machine = {"kind": kind, "calibration": {"work": store.CALIBRATION,
                                                   "seconds": calibration}}

    def execute(run: Run) -> store.Stored:  # numbers as the kind of CPU sums (w.alike: alike)
        w.made.append(run)
        sums = w.alike.get(w.machine["kind"], w.machine["kind"])
        stored = store.Stored(command=run.command, key=run.key(), stdout=f"{run.id}: {sums}\n",
                              metrics={"val_loss": 2.39, "sums": sums}, machine=w.machine,
                              seconds=SECONDS[run] * w.machine["calibration"]["seconds"])
        store.run_dir(run).mkdir(parents=True, exist_ok=True)
        (store.run_dir(run) / "facts.txt").write_text(store.fingerprint(stored))
        return stored
    monkeypatch.setattr(store, "execute", execute)
    w.on = on
    on("zen3", 1.0)
    docs.make(w.jobs)
    shutil.rmtree(tmp_path / "cache")  # a fresh clone
    on("zen5", 2.0)
    w.made.clear()
    return w


def edit(job: str, draw: str | None = None) -> None:
    """A change to a job's code: to its text, or (``draw``) to what that draw needs too."""
    recorded = docs.manifest()
    recorded[job]["key"] = "edited"
    if draw:
        recorded[job]["draws"][draw]["key"] = "edited"
    docs.MANIFEST.write_text(json.dumps(recorded))


def listed(todo: docs.Plan) -> tuple:
    return (list(todo.checkpoints), set(todo.runs),
            [(job.name, [d.name for d in draws]) for job, _, draws in todo.jobs])


def test_a_change_to_a_pages_text_needs_no_checkpoint(world):
    """Only the job is made: its draw, whose key has not changed, is copied from its last
    folder with its facts, though the cache lacks A's checkpoint and A was made elsewhere."""
    last = docs.GEN / "page"
    before = {p.name: p.read_bytes() for p in last.iterdir()}
    edit("page")
    todo = docs.plan(docs.stale(world.jobs))
    assert listed(todo) == ([], set(), [("page", [])])
    docs.make(docs.stale(world.jobs))
    assert world.made == [] and not docs.stale(world.jobs)
    assert {p.name: p.read_bytes() for p in last.iterdir()} == before
    assert json.loads((last / "facts.json").read_text()) == {"en.picture": len(".page.new")}


def test_a_changed_draw_on_another_kind_of_cpu_lists_the_whole_cascade(world, capsys):
    """The draw needs A's checkpoint, made again here: A's numbers change and replace the
    stored ones, so "shows" is made too, S (made after A) is made again, and B, timed beside
    A, is made here; "other" stays. --list says so with the time this machine takes, and
    make() runs just that."""
    edit("page", "picture('en')")
    todo = docs.plan(docs.stale(world.jobs))
    assert listed(todo) == ([A], {B, S}, [("page", ["picture('en')"]), ("shows", [])])
    assert "stored on zen3: its numbers will come out a little different" in todo.checkpoints[A]
    assert "its time is set beside" in todo.runs[B] and "made after" in todo.runs[S]
    assert cli.main(["--list"]) == 0
    out = capsys.readouterr().out
    # Stored times scaled by the calibrations (zen5 2 s, zen3 1 s): A 200 s, then B 100 s,
    # then S 20 s (it waits for A's checkpoint), the jobs next to nothing: about 320 s.
    assert f"remake   3.3 min  {A.command}  (its checkpoint, for page: picture('en')" in out
    assert f"make     1.7 min  {B.command}" in out and f"make        20 s  {S.command}" in out
    assert "as they are: 1 run (1 stored on zen3), 1 job" in out
    assert out.rstrip().endswith("1 checkpoint to make again, 2 runs, 2 jobs: about 5.3 min "
                                 "on this machine (runs two at a time, as make runs them)")
    docs.make(docs.stale(world.jobs))
    made = capsys.readouterr().out
    assert world.made == [A, B, S]
    assert "[page]" in made and "[shows]" in made and "[other]" not in made
    assert store.load(A).machine["kind"] == "zen5" and not docs.stale(world.jobs)
    assert listed(docs.plan([])) == ([], set(), [])  # nothing left to do


def test_a_stale_run_made_after_a_checkpoint_needs_it_too(world):
    """S's command changed meaning (stale): it reads A's checkpoint, which the cache lacks;
    made again here, A's numbers change, with the same cascade."""
    old = store.load(S)
    old.key = "edited"
    store.save(S, old)
    todo = docs.plan(docs.stale(world.jobs))
    assert listed(todo) == ([A], {B, S}, [("page", ["picture('en')"]), ("shows", [])])
    docs.make(docs.stale(world.jobs))
    assert world.made == [A, B, S] and not docs.stale(world.jobs)


def test_on_the_kind_it_was_made_on_a_checkpoint_repeats_its_numbers(world):
    """On zen3 A made again must end on its stored numbers: nothing else changes."""
    world.on("zen3", 1.0)
    facts = store.facts_key(A)
    edit("page", "picture('en')")
    todo = docs.plan(docs.stale(world.jobs))
    assert listed(todo) == ([A], set(), [("page", ["picture('en')"])])
    assert todo.checkpoints[A].endswith("stored on this kind of CPU: it repeats its numbers")
    docs.make(docs.stale(world.jobs))
    assert world.made == [A] and store.facts_key(A) == facts and not docs.stale(world.jobs)


def test_a_checkpoint_that_repeats_its_numbers_elsewhere_shrinks_the_plan(world):
    """The plan assumes that another kind of CPU ends on other numbers; where the remade
    run repeats the stored ones after all, make() plans again and does less."""
    world.alike["zen5"] = "zen3"  # zen5 sums as zen3 does
    edit("page", "picture('en')")
    assert listed(docs.plan(docs.stale(world.jobs)))[:2] == ([A], {B, S})
    docs.make(docs.stale(world.jobs))
    assert world.made == [A] and store.load(A).machine["kind"] == "zen3"
    assert not docs.stale(world.jobs)


def test_here_makes_again_what_another_kind_made(world):
    """--here: every run of the chosen jobs, then every job that shows them; no checkpoint
    to make apart (each run made here leaves its own)."""
    todo = docs.plan([world.jobs[2]], here=True)
    assert listed(todo) == ([], {C}, [("other", [])])
    todo = docs.plan(world.jobs, here=True)
    assert listed(todo)[:2] == ([], {A, B, S, C}) and len(todo.jobs) == 3


def test_a_checkpoint_is_read_only_in_a_draw_the_job_declares():
    job = docs.Job("j", numbers, runs=(A,), draws=(docs.Draw(picture, "en", reads=A),))
    page = docs.Page(job)
    with pytest.raises(AssertionError, match="outside a draw that lists it"):
        page.folder(A)
    with pytest.raises(AssertionError, match="does not declare it"):
        page.draw(picture, "zh")
    with pytest.raises(AssertionError, match="list them in its runs"):
        docs.Job("k", numbers, runs=(B,), draws=(docs.Draw(picture, "en", reads=A),))
    assert docs.Draw(picture, "en", {"words": 1}, reads=A).name == "picture('en', dict)"


def test_a_draws_code_is_what_it_needs_and_no_more(tmp_path):
    """needs(): the statements a draw's function needs, in its module and in the modules it
    imports from; an edit elsewhere in them, or to a comment, leaves its key."""
    pkg = tmp_path / "pages"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    module = pkg / "page.py"

    def key(page: str, shared: str = "WORDS = {'x': 1}\nUNUSED = 2\n") -> str:
        (pkg / "shared.py").write_text(shared)
        module.write_text(page)
        return docs.needs(module, "draw")

    page = ("from .shared import WORDS\nLIMIT = 3\nOTHER = 4\nRUNS = {}\nRUNS['en'] = 1\n\n"
            "def helper(x):\n    return x * LIMIT\n\n"
            "def draw(page):\n    return helper(WORDS), RUNS\n\n"
            "def text(page):\n    return OTHER\n")
    first = key(page)
    for same in (key(page.replace("OTHER = 4", "OTHER = 5")),
                 key(page.replace("return OTHER", "return OTHER + 1")),
                 key(page.replace("LIMIT = 3", "LIMIT = 3  # a comment")),
                 key(page, "WORDS = {'x': 1}\nUNUSED = 3\n")):
        assert same == first
    for other in (key(page.replace("LIMIT = 3", "LIMIT = 4")),
                  key(page.replace("x * LIMIT", "x + LIMIT")),
                  key(page.replace("RUNS['en'] = 1", "RUNS['en'] = 2")),
                  key(page, "WORDS = {'x': 2}\nUNUSED = 2\n")):
        assert other != first


def test_real_draws_ignore_the_rest_of_their_page(tmp_path):
    """Stage 5's figures, in a copy of tools/docs: an edit to the page's lr schedule (another
    part of stage5.py) leaves their key, an edit to them changes it."""
    from tools.docs.pages import stage5

    copy = tmp_path / "docs"
    shutil.copytree(docs.DOCS, copy, ignore=shutil.ignore_patterns("__pycache__"))
    module = copy / "pages" / "stage5.py"
    text = module.read_text(encoding="utf-8")
    before = docs.needs(module, "figures")
    for name, same in (("schedule", True), ("figures", False)):
        line = next(line for line in text.splitlines() if line.startswith(f"def {name}("))
        module.write_text(text.replace(line, f"{line}\n    print()"), encoding="utf-8")
        assert (docs.needs(module, "figures") == before) == same, name
    assert [d.name for d in stage5.JOBS[0].draws][:2] == ["figures('en')", "embeddings('en')"]


def test_times_are_scaled_by_the_machines_calibrations(monkeypatch):
    mine = {"work": store.CALIBRATION, "seconds": 0.5}
    monkeypatch.setattr(store, "machine", lambda: {"kind": "zen5", "calibration": mine})
    assert store.scaled(100, {"calibration": {**mine, "seconds": 0.25}}) == (200, True)
    assert store.scaled(100, {"kind": "zen3"}) == (100, False)  # made before calibrations
    assert store.scaled(100, {"calibration": {"work": "another", "seconds": 0.25}}) == (100, False)
    wide = Run("stage5_gpt", "--threads", "2")  # alone: after the others
    assert store.in_turn_seconds({A: 100, B: 50, C: 30, wide: 20}) == 100 + 20
    assert store.in_turn_seconds({A: 10, B: 50, C: 30}) == 50


def test_the_calibration_is_a_second_or_less():
    measured = store.calibration(repeats=1)
    assert measured["work"] == store.CALIBRATION and 0 < measured["seconds"] < 1
