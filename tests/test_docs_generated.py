"""The numbers and figures the docs quote must come from the current code.

tools/gen_docs.py regenerates docs/generated/ in named jobs and records in
docs/generated/manifest.json, per job, a hash of its inputs (the stage folders it
runs, the tools it calls, its own code and settings, the jobs it builds on) and the
files it wrote. If a job's inputs change and it was not rerun, this test fails,
names the stale jobs and says what to run; the run then redoes only those jobs.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GEN = ROOT / "docs" / "generated"

pytestmark = pytest.mark.docs

# What a change to stage5_gpt/ alone reruns: its trainings (and the reference seeds,
# the presets, the explorer's export), the benchmark that times it against stage 4, the
# tables and readings assembled from their rows, and their Chinese versions.
STAGE5_JOBS = {"stage5_en", "stage5_zh", "compare_en", "budget_stage5", "compare_budget_en",
               "bench", "stage5_shakespeare", "compare_shakespeare", "payoff_stage5",
               "compare_payoff_en", "compare_reading_en", "stage5_lr_schedule", "explorer_en",
               "explorer_zh", "presets_curve", "reference_seeds_en", "reference_seeds_shakespeare",
               "reference", "troubleshooting", "stage5_zh_prompts", "zh_readings",
               "zh_readings_shakespeare", "zh_tables", "zh_tables_shakespeare"}


@pytest.fixture(scope="module")
def gen_docs():
    spec = importlib.util.spec_from_file_location("gen_docs", ROOT / "tools" / "gen_docs.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["gen_docs"] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def manifest() -> dict[str, dict]:
    return json.loads((GEN / "manifest.json").read_text(encoding="utf-8"))["jobs"]


def test_generated_outputs_match_the_sources(gen_docs):
    stale = gen_docs.stale_jobs(gen_docs.input_hashes(), gen_docs.read_manifest())
    assert not stale, (
        f"the inputs of {len(stale)} docs job(s) changed since docs/generated/ was made: "
        f"{', '.join(stale)}. Run `{gen_docs.command_for(stale)}`: it reruns only the stale "
        "jobs (`python tools/gen_docs.py --list` shows them and their times); then commit "
        "docs/generated/"
    )


def test_manifest_lists_every_generated_file(gen_docs, manifest):
    jobs = {j.name: j for j in gen_docs.JOBS}
    assert list(manifest) == list(jobs), "manifest.json should hold every job, in order"
    for name, entry in manifest.items():
        assert entry["outputs"] == list(jobs[name].outputs), (
            f"job {name}: the outputs in manifest.json are not the ones it declares")
    listed = [o for entry in manifest.values() for o in entry["outputs"]]
    assert len(listed) == len(set(listed)), "an output is claimed by two jobs"
    missing = [o for o in listed if not (GEN / o).is_file()]
    assert not missing, f"listed in docs/generated/manifest.json but missing: {missing}"
    present = sorted(p.relative_to(GEN).as_posix() for p in GEN.rglob("*")
                     if p.is_file() and p.name != "manifest.json")
    unlisted = [f for f in present if f not in listed]
    assert not unlisted, (f"in docs/generated/ but written by no job of tools/gen_docs.py: "
                          f"{unlisted}; delete them or make a job write them")


def test_every_generated_file_is_used_by_a_page(manifest):
    docs = ROOT / "docs"
    pages = "\n".join(p.read_text(encoding="utf-8") for p in
                      [*docs.glob("*.md"), *docs.glob("zh/*.md"), *docs.glob("snippets/*.md")])
    # The explorer's weights are read by its script, from its own folder.
    script = (docs / "assets" / "javascripts" / "explorer.js").read_text(encoding="utf-8")
    assert "generated/explorer/" in script
    shown = [o for entry in manifest.values() for o in entry["outputs"]
             if not o.startswith(("runs/", "explorer/", "../"))]
    unused = [n for n in shown if Path(n).name not in pages]
    assert not unused, f"generated but never shown in the docs: {unused}"


def test_worked_example_is_what_the_code_computes(gen_docs, tmp_path, monkeypatch):
    """Regenerating the cheap worked example reproduces the committed file exactly."""
    committed = (GEN / "worked_attention.md").read_text(encoding="utf-8")
    monkeypatch.setattr(gen_docs, "GEN", tmp_path)
    gen_docs.worked_examples()
    assert (tmp_path / "worked_attention.md").read_text(encoding="utf-8") == committed


def test_tables_are_assembled_from_the_stored_rows(gen_docs, tmp_path, monkeypatch):
    """Every table job rebuilds its committed table exactly from docs/generated/runs/."""
    shutil.copytree(GEN / "runs", tmp_path / "runs")
    monkeypatch.setattr(gen_docs, "GEN", tmp_path)
    # Jobs that build on others' rows and run no stage themselves (those that do train,
    # such as stage3_trained_head, are checked by running them, not here).
    tables = [j for j in gen_docs.JOBS if j.needs and not j.stages]
    assert {j.name for j in tables} >= {"compare_en", "compare_budget_en", "compare_shakespeare",
                                        "compare_payoff_en", "compare_reading_en"}
    for job in tables:
        gen_docs.run_job(job, tmp_path)
        for name in job.outputs:
            assert (tmp_path / name).read_text(encoding="utf-8") == (GEN / name).read_text(
                encoding="utf-8"), f"{job.name}: {name} differs from the stored rows' table"


def test_a_change_to_stage5_reruns_only_its_jobs(gen_docs, monkeypatch):
    before = gen_docs.input_hashes()
    digest = gen_docs.digest
    monkeypatch.setattr(gen_docs, "digest", lambda p: digest(p) + (
        "changed" if "stage5_gpt" in p.parts else ""))
    after = gen_docs.input_hashes()
    changed = {name for name in before if before[name] != after[name]}
    assert changed == STAGE5_JOBS
    # ... which takes at most 40 minutes on 2 cores, by the jobs' own estimates
    seconds = sum(j.seconds for j in gen_docs.JOBS if j.name in changed)
    assert seconds <= 40 * 60, f"a stage-5 change would take {seconds / 60:.1f} minutes"


def test_run_plan(gen_docs, monkeypatch):
    hashes = gen_docs.input_hashes()
    fresh = {n: {"inputs_sha256": h, "outputs": []} for n, h in hashes.items()}
    names = lambda jobs: [j.name for j in jobs]  # noqa: E731

    assert gen_docs.plan(hashes, fresh, None, False, False) == ([], [])
    # the stale jobs only; the Tiny Shakespeare ones need PATH
    behind = {**fresh, **{n: {"inputs_sha256": "old"} for n in STAGE5_JOBS}}
    todo, skipped = gen_docs.plan(hashes, behind, None, False, False)
    assert names(todo) == ["stage5_en", "stage5_zh", "compare_en", "budget_stage5",
                           "compare_budget_en", "bench", "payoff_stage5", "compare_payoff_en",
                           "compare_reading_en", "stage5_lr_schedule", "explorer_en",
                           "explorer_zh", "reference_seeds_en", "stage5_zh_prompts",
                           "zh_readings", "zh_tables"]
    assert names(skipped) == ["stage5_shakespeare", "compare_shakespeare", "presets_curve",
                              "reference_seeds_shakespeare", "reference", "troubleshooting",
                              "zh_readings_shakespeare", "zh_tables_shakespeare"]
    todo, skipped = gen_docs.plan(hashes, behind, None, False, True)
    assert set(names(todo)) == STAGE5_JOBS and not skipped
    # --only: those jobs, and the tables built on them
    todo, _ = gen_docs.plan(hashes, fresh, ["stage3_en"], False, False)
    assert names(todo) == ["stage3_en", "compare_en", "stage3_positions", "stage3_trained_head"]
    # a table is not built on the stored rows of a stale job
    with pytest.raises(SystemExit, match="builds on stage5_en, which is stale"):
        gen_docs.plan(hashes, behind, ["compare_en"], False, False)
    todo, skipped = gen_docs.plan(hashes, fresh, None, True, False)
    assert len(todo) + len(skipped) == len(gen_docs.JOBS)
    assert all(j.shakespeare for j in skipped)


def test_list_names_every_job_and_its_state(gen_docs, capsys):
    assert gen_docs.main(["--list"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:4] == ["job", "state", "time", "inputs"]
    rows = {line.split()[0]: line for line in out[2:2 + len(gen_docs.JOBS)]}
    assert list(rows) == [j.name for j in gen_docs.JOBS]
    assert all((" fresh " in r) or (" stale" in r) for r in rows.values())
    assert "stage5_gpt/" in rows["stage5_en"] and "tools/compare.py" in rows["compare_en"]
