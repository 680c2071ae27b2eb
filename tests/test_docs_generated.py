"""The docs' generated numbers and figures come from the current code (python -m tools.docs).

Runs are stored with a key of what can change their result (their command, their corpus,
the meaning of the stage code they run); jobs with a key of the runs and files they read
and of their own code. These tests check that nothing is stale, that the keys ignore what
cannot change a result (comments, docstrings, formatting, drawing code for a training),
and that a stored run repeats number for number.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys

import pytest

from tools import docs
from tools.docs import store
from tools.docs.store import Run, Stored, meaning

GEN = docs.GEN
pytestmark = pytest.mark.docs


def test_nothing_is_stale():
    stale_runs = sorted({r.command for j in docs.jobs() for r in j.runs if not store.fresh(r)})
    stale_jobs = [j.name for j in docs.stale(docs.jobs())]
    assert not stale_runs and not stale_jobs, (
        f"stale runs: {stale_runs}; stale jobs: {stale_jobs}. Run `python -m tools.docs` "
        "(--list shows what and how long), then commit docs/generated/ and references/")


def test_every_generated_file_belongs_to_a_job_or_a_run():
    jobs = {j.name for j in docs.jobs()}
    assert set(docs.manifest()) == jobs, "docs/generated/manifest.json lists other jobs"
    runs = {f"{r.id}.json" for j in docs.jobs() for r in j.runs}
    for path in GEN.iterdir():
        if path.is_dir() and path.name != "runs":
            assert path.name in jobs, f"docs/generated/{path.name}/ belongs to no job: delete it"
    stored = {p.name for p in (GEN / "runs").glob("*.json")}
    assert stored == runs, f"runs no job reads: {sorted(stored - runs)}; missing: {sorted(runs - stored)}"


def test_every_generated_file_is_used_by_a_page():
    pages = "\n".join(p.read_text(encoding="utf-8") for p in GEN.parent.rglob("*.md")
                      if "generated" not in p.parts)
    unused = [p.relative_to(GEN).as_posix() for p in GEN.glob("*/*")
              if p.parent.name not in ("runs", "explorer") and p.name != "facts.json"
              and p.relative_to(GEN).as_posix() not in pages]
    assert not unused, f"generated but included by no page: {unused}"


def test_meaning_ignores_comments_docstrings_and_formatting(tmp_path):
    a, b, c = tmp_path / "a.py", tmp_path / "b.py", tmp_path / "c.py"
    a.write_text('"""Doc."""\ndef f(x):\n    """Say."""\n    return x + 1  # one\n')
    b.write_text('def f( x ):\n\n    # another comment\n    return (x + 1)\n')
    c.write_text('def f(x):\n    return x + 2\n')
    assert meaning(a) == meaning(b) != meaning(c)


def test_a_training_run_ignores_drawing_code_but_a_drawing_command_does_not(monkeypatch):
    train = Run("stage5_gpt", "--data", "en")
    lens = Run("stage5_gpt", module="lens", after=train)
    before = (train.key(), lens.key())
    real = store.meaning.__wrapped__

    def edited(path):  # lens.py "changed": its meaning differs
        return "edited" if path.name == "lens.py" else real(path)
    monkeypatch.setattr(store, "meaning", edited)
    assert train.key() == before[0] and lens.key() != before[1]


def test_a_command_after_a_training_depends_on_its_stored_facts(monkeypatch, tmp_path):
    """A sample drawn from a checkpoint is made again when the training it reads is: e.g.
    made again on another kind of CPU, with other numbers under the same key."""
    train = Run("stage5_gpt", "--data", "en")
    sample = Run("stage5_gpt", module="sample", after=train)
    monkeypatch.setattr(store, "RUNS", tmp_path)
    keys = []
    for val in ("1.6050", "1.6034"):
        store.save(train, Stored(command=train.command, key=train.key(), stdout=f"val {val}\n"))
        keys.append(sample.key())
    assert keys[0] != keys[1]


def test_a_run_depends_on_its_own_corpus_only(monkeypatch):
    en, zh = Run("stage2_bigram", "--data", "en"), Run("stage2_bigram", "--data", "zh")
    before = (en.key(), zh.key())
    real = store.meaning.__wrapped__
    monkeypatch.setattr(store, "meaning",
                        lambda p: "edited" if p.name == "zh.txt" else real(p))
    assert en.key() == before[0] and zh.key() != before[1]


def test_a_job_depends_on_the_docs_modules_it_imports_and_on_no_other(monkeypatch):
    """stage3's figures read ZH_LABELS from pages/__init__.py: an edit there makes the job
    stale; an edit to another page's module (bench.py, which stage 3 does not import) not."""
    stage3 = next(j for j in docs.jobs() if j.name == "stage3")
    before = stage3.key()
    real = store.meaning.__wrapped__
    for edited, stale in (("bench.py", False), ("__init__.py", True)):
        monkeypatch.setattr(store, "meaning", lambda p, e=edited: "edited" if p.name == e
                            and p.parent.name == "pages" else real(p))
        assert (stage3.key() != before) == stale, edited


def test_a_job_depends_on_page_but_not_on_how_jobs_are_run(monkeypatch):
    """Of tools/docs/__init__.py and store.py, only ``Page`` decides what a job writes."""
    stage3 = next(j for j in docs.jobs() if j.name == "stage3")
    before = stage3.key()
    real = store.meaning.__wrapped__
    monkeypatch.setattr(store, "meaning", lambda p: "edited" if p.parent.name == "docs"
                        and p.name in ("store.py", "__init__.py") else real(p))
    assert stage3.key() == before
    monkeypatch.setattr(docs, "page_meaning", lambda: "edited")
    assert stage3.key() != before


def test_every_docs_run_states_what_fixes_its_numbers():
    for run in {r for j in docs.jobs() for r in j.runs}:
        if run.module == "train" and not run.fails:
            assert {"--seed", "--threads"} <= set(run.flags), run.command
            if run.stage == "stage5_gpt":
                assert "--dtype" in run.flags, run.command


def test_a_remade_folder_repeats_its_numbers_or_replaces_them_from_another_cpu(
        monkeypatch, tmp_path):
    """store.folder() remakes a run whose folder the cache lacks. On the kind of CPU it was
    stored on, the remade run must end on the stored numbers (its time aside), else an error
    and no folder; on another kind its numbers replace the stored ones."""
    run = Run("stage2_bigram", "--data", "en")

    def facts(val: float, seconds: float = 3.1, kind: str = "zen5") -> Stored:
        return Stored(command=run.command, key=run.key(), stdout=f"val {val:.4f} ({seconds} s)\n",
                      metrics={"val_loss": val, "train_seconds": seconds}, machine={"kind": kind})
    monkeypatch.setattr(store, "CACHE", tmp_path / "cache")
    monkeypatch.setattr(store, "RUNS", tmp_path / "runs")
    monkeypatch.setattr(store, "machine", lambda: {"kind": "zen5"})
    for stored_on, again, outcome in (("zen5", facts(2.39419546, 2.8), "kept"),
                                      ("zen5", facts(2.39419544), "error"),
                                      ("zen3", facts(2.39419544), "replaced")):
        shutil.rmtree(tmp_path, ignore_errors=True)
        stored = facts(2.39419546, kind=stored_on)
        store.save(run, stored)

        def remake(r, s=again):
            store.run_dir(r).mkdir(parents=True)
            (store.run_dir(r) / "facts.txt").write_text(store.fingerprint(s))
            return s
        monkeypatch.setattr(store, "execute", remake)
        assert not store.cached(run)
        if outcome == "error":
            with pytest.raises(SystemExit, match="stored on \\(zen5\\).*not deterministic"):
                store.folder(run)
            assert not store.run_dir(run).exists() and store.load(run) == stored
            continue
        assert store.folder(run) == store.run_dir(run) and store.cached(run)
        assert store.load(run) == (stored if outcome == "kept" else again)


def shows_checkpoint(page: docs.Page, run_id: str) -> None:
    """A draw (of the test below): it reads a run's checkpoint."""
    page.folder(next(r for r in page.job.runs if r.id == run_id))
    page.write("figure.txt", "drawn")


def test_a_checkpoint_made_again_elsewhere_remakes_every_page_that_shows_its_run(
        monkeypatch, tmp_path):
    """make([a]) where job a draws from run r's checkpoint: when the cache lacks it and the
    run, made again on another kind of CPU, ends on other numbers (store.folder), job b,
    which shows r's numbers, is made too; job c, which does not read r, is not. Made again,
    a keeps its draw: no checkpoint is read."""
    r, other = Run("stage2_bigram", "--data", "en"), Run("stage2_bigram", "--data", "zh")
    monkeypatch.setattr(store, "RUNS", tmp_path / "runs")
    monkeypatch.setattr(store, "CACHE", tmp_path / "cache")
    monkeypatch.setattr(store, "machine", lambda: {"kind": "zen5"})
    monkeypatch.setattr(docs, "GEN", tmp_path / "gen")
    monkeypatch.setattr(docs, "MANIFEST", tmp_path / "gen" / "manifest.json")
    for run in (r, other):
        store.save(run, Stored(command=run.command, key=run.key(), stdout="val 2.3941\n",
                               machine={"kind": "zen3"}))
    made, read = [], []

    def action(page):
        made.append(page.job.name)
        if page.job.draws:
            page.draw(shows_checkpoint, r.id)
    jobs = [docs.Job("a", action, runs=(r,), draws=(docs.Draw(shows_checkpoint, r.id, reads=r),)),
            docs.Job("b", action, runs=(r,)), docs.Job("c", action, runs=(other,))]
    monkeypatch.setattr(docs, "jobs", lambda: jobs)

    def remade_elsewhere(run):  # what store.folder does with a run stored on another kind
        read.append(run)
        if not store.cached(run):
            stored = Stored(command=run.command, key=run.key(), stdout="val 2.3942\n",
                            machine={"kind": "zen5"})
            store.save(run, stored)
            store.run_dir(run).mkdir(parents=True)
            (store.run_dir(run) / "facts.txt").write_text(store.fingerprint(stored))
        return store.run_dir(run)
    monkeypatch.setattr(store, "folder", remade_elsewhere)
    docs.make([jobs[0]])
    assert made == ["a", "b"] and read
    made.clear()
    read.clear()
    docs.make([jobs[0]])
    assert made == ["a"] and not read and not docs.stale(jobs[:2])


def test_times_set_side_by_side_come_from_one_kind_of_cpu(monkeypatch, tmp_path):
    """A job's ``timed`` runs: once one of them is made on this kind of CPU, make() makes
    the others here too; runs outside the group stay as they are."""
    a, b, c = (Run("stage2_bigram", "--data", d) for d in ("en", "zh", "shakespeare"))
    monkeypatch.setattr(store, "RUNS", tmp_path / "runs")
    monkeypatch.setattr(docs, "GEN", tmp_path)
    monkeypatch.setattr(docs, "MANIFEST", tmp_path / "manifest.json")
    monkeypatch.setattr(store, "machine", lambda: {"kind": "zen5"})
    for run, kind in ((a, "zen5"), (b, "zen3"), (c, "zen3")):
        store.save(run, Stored(command=run.command, key=run.key(), stdout="", machine={"kind": kind}))
    jobs = [docs.Job("t", lambda page: None, runs=(a, b, c), timed=(a, b))]
    monkeypatch.setattr(docs, "jobs", lambda: jobs)
    made = []

    def make_all(runs):  # made here, as store.make_all would
        made.extend(runs)
        for run in runs:
            store.save(run, Stored(command=run.command, key=run.key(), stdout="",
                                   machine={"kind": "zen5"}))
    monkeypatch.setattr(store, "make_all", make_all)
    docs.make(jobs)
    assert made == [b]


TIMES = re.compile(r"[\d.]+ s\b|[\d.]+ ms\b|\d+\.\d+step/s")  # no two runs print the same


@pytest.mark.slow
def test_a_stored_run_repeats_its_numbers(tmp_path):
    """The cheapest training run stored on this kind of CPU (store.machine), run again by its
    printed command: the same printed lines and the same full floats."""
    made = [r for j in docs.jobs() for r in j.runs
            if r.module == "train" and not r.fails and store.made_here(r)]
    if not made:
        pytest.skip(f"no run stored on this kind of CPU ({store.machine()['kind']})")
    run = min(made, key=lambda r: store.load(r).seconds)
    stored = store.load(run)
    argv = run.command.split()[1:]
    out = subprocess.run([sys.executable, *argv], cwd=tmp_path, capture_output=True, text=True,
                         env={"PYTHONPATH": str(store.ROOT), "PATH": "/usr/bin:/bin"}).stdout
    printed = lambda s: TIMES.sub("", store.without_verdict(s)).splitlines()  # noqa: E731
    assert printed(out) == printed(stored.stdout)
    metrics = json.loads((tmp_path / "out" / run.stage / "metrics.json").read_text())
    assert metrics == stored.metrics | {"train_seconds": metrics["train_seconds"]}


def test_embedding_labels_never_cover_each_other():
    """The stage-5 embedding figure's labels: on their point when it is free, else moved
    to a spot that covers no label placed before and no other point."""
    import torch

    from tools.docs.pages.stage5 import places

    xy = torch.tensor([[0.0, 0.0], [0.015625, 0.0], [0.0, 0.015625], [1.0, 1.0], [0.5, 0.03125]])
    spots = places(xy, width=0.1, height=0.1)  # a label box: 0.1 x 0.1 of a 1 x 1 plot here
    assert [spots[k] for k in (0, 3, 4)] == [tuple(xy[k].tolist()) for k in (0, 3, 4)]
    assert spots[1] != tuple(xy[1].tolist()) and spots[2] != tuple(xy[2].tolist())  # covered
    for k, (x, y) in enumerate(spots):
        for a, b in spots[:k]:
            assert abs(x - a) >= 0.1 - 1e-9 or abs(y - b) >= 0.1 - 1e-9
        if k in (1, 2):  # a moved label covers no other point
            assert all(abs(x - a) >= 0.05 or abs(y - b) >= 0.05
                       for j, (a, b) in enumerate(xy.tolist()) if j != k)


def test_a_job_that_fails_leaves_its_last_files(monkeypatch, tmp_path):
    """make() writes a job into a fresh folder and swaps it in only when the job ends well."""
    monkeypatch.setattr(docs, "GEN", tmp_path)
    monkeypatch.setattr(docs, "MANIFEST", tmp_path / "manifest.json")
    monkeypatch.setattr(docs, "jobs", lambda: [])  # no other job to plan around
    monkeypatch.setattr(store, "machine", lambda: {"kind": "zen5"})
    (tmp_path / "j").mkdir()
    (tmp_path / "j" / "table.md").write_text("last good table\n")

    def fails(page):
        page.write("table.md", "half a table")
        raise RuntimeError("the job's own bug")
    with pytest.raises(RuntimeError):
        docs.make([docs.Job("j", fails)])
    assert (tmp_path / "j" / "table.md").read_text() == "last good table\n"
    docs.make([docs.Job("j", lambda page: page.write("table.md", "new table"))])
    assert (tmp_path / "j" / "table.md").read_text() == "new table\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["j", "manifest.json"]


def test_classic_corpora_are_checked_before_they_are_kept(monkeypatch, tmp_path):
    """--shakespeare takes only Tiny Shakespeare (its pinned sha256), --tang only a folder
    of the 58 files; each mistake is one line, and a run on a corpus the cache lacks says
    which flag gives it."""
    monkeypatch.setattr(store, "CACHE", tmp_path / "cache")
    wrong = tmp_path / "input.txt"
    wrong.write_text("not Shakespeare\n")
    for kwargs, words in (({"shakespeare": wrong}, "is not Tiny Shakespeare"),
                          ({"shakespeare": tmp_path / "missing.txt"}, "No such file"),
                          ({"tang": tmp_path}, "has no poet.tang.0.json: --tang FOLDER needs all 58")):
        with pytest.raises(SystemExit) as e:
            store.provide(**kwargs)
        assert str(e.value).startswith("error: ") and words in str(e.value)
        assert "\n" not in str(e.value)
    assert not any((tmp_path / "cache" / "data").iterdir())  # nothing kept
    with pytest.raises(SystemExit, match=r"needs the tang corpus: pass --tang FOLDER once"):
        store.require(Run("stage5_gpt", "--data", "tang"))
    store.require(Run("stage5_gpt", "--data", "zh"))  # built in: nothing to pass
