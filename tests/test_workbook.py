"""The workbook grader is honest: tools/workbook.py, on every stage.

Three kinds of run of the stages' own tests, all through the grader's machinery
(``run_tests``: a pytest subprocess with the workbook first on ``sys.path``):

- the untouched stages: every exercise passes;
- every hole cut: the run collects without errors, every test that called an
  exercise's function in the untouched run fails at an exercise's
  ``NotImplementedError`` and no test fails for any other reason;
- one hole filled from the solution and the others open: that exercise passes and
  every other one is still to do.

To stay fast, the untouched run takes the files of in-process tests (``CORE``) less
two heavy tests (``HEAVY``); the run with every hole runs the tests that reached an
exercise in the untouched run (the others never call a piece that is cut, so they
cannot change); the runs with one hole filled run, per exercise, the few fastest
tests that reached it and no other exercise (but those it needs). The tests
themselves are not changed.
"""

from __future__ import annotations

import ast
import importlib.util
import re
import sys
from pathlib import Path

import pytest
from conftest import REPO_ROOT


def load(name: str):
    """A module of tools/, by its file."""
    spec = importlib.util.spec_from_file_location(name, REPO_ROOT / "tools" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


W = load("workbook")

ALL = sorted(W.STAGES)
# The test files that hold the stages' in-process tests of the pieces (the CLI, checkpoint
# and figure files reach them too, through whole training runs: seconds each, so they are
# left out here; `grade` runs them), less two tests that take seconds on their own.
CORE = ("test_stage1_tokenizer.py", "test_stage1_data.py", "test_stage2_model.py",
        "test_stage3_model.py", "test_stage4_model.py", "test_stage5_model.py",
        "test_stage5_train.py", "test_doctests.py")
HEAVY = ("tests/test_stage5_train.py::test_ctrl_c_saves_a_resumable_checkpoint",
         "tests/test_stage1_data.py::test_loading_a_big_corpus_takes_at_most_four_times_its_size")
PER_EXERCISE = 3  # tests per exercise in the runs with one hole filled


def selection() -> list[str]:
    return [f"tests/{name}" for name in CORE] + [f"--deselect={h}" for h in HEAVY]


def workbook(tmp: Path, holes_of: dict[int, list[str]]) -> Path:
    for stage in ALL:
        W.make(stage, tmp, holes=holes_of.get(stage, []))
    return tmp


@pytest.fixture(scope="module")
def untouched(tmp_path_factory) -> dict:
    folder = workbook(tmp_path_factory.mktemp("untouched"), {})
    return W.run_tests(folder, ALL, selection()) | {"folder": folder}


def reached(result: dict, ex_id: str | None = None) -> list[dict]:
    return [t for t in result["tests"] if (ex_id in t["entered"] if ex_id else t["entered"])]


def test_every_exercise_target_exists_and_can_be_cut():
    for ex in W.EXERCISES:
        source = (REPO_ROOT / ex.package / ex.file).read_text(encoding="utf-8")
        fn = W.find_function(ast.parse(source), ex.qualname)
        assert fn is not None, f"exercise {ex.id}: {ex.package}/{ex.file} has no {ex.qualname}"
        holed = W.cut(source, ex)
        ast.parse(holed)  # still Python
        assert holed.count(ex.marker) == 1 and ex.marker not in source
        cut_fn = W.find_function(ast.parse(holed), ex.qualname)
        # The signature and the docstring stay; the code goes.
        assert ast.get_docstring(cut_fn) == ast.get_docstring(fn)
        assert ast.unparse(cut_fn.args) == ast.unparse(fn.args)
        assert len(holed.splitlines()) < len(source.splitlines())


def test_exercises_are_numbered_in_order_and_read_real_docs_sections():
    from markdown.extensions.toc import slugify

    for stage in ALL:
        ids = [ex.id for ex in W.exercises(stage)]
        assert ids == [f"{stage}.{i}" for i in range(1, len(ids) + 1)] and len(ids) >= 2
        page = (REPO_ROOT / "docs" / f"{W.STAGES[stage]}.md").read_text(encoding="utf-8")
        anchors = {slugify(m.strip("# ").strip(), "-")
                   for m in re.findall(r"^#{2,4} .+$", page, flags=re.M)}
        for ex in W.exercises(stage):
            assert ex.anchor in anchors, f"{ex.id}: no section #{ex.anchor} in {ex.docs}"


def test_the_untouched_stages_pass_every_exercise(untouched):
    assert untouched["errors"] == [] and untouched["returncode"] == 0
    for stage in ALL:
        package = untouched["folder"] / W.STAGES[stage]
        assert Path(untouched["imported"][W.STAGES[stage]]).parent == package
        rows = W.judge(untouched, stage, package)
        assert [r["status"] for r in rows] == ["passed"] * len(rows), rows
        assert all(r["tests"] >= 1 for r in rows)


def test_with_every_hole_exactly_the_tests_that_reach_a_hole_fail(untouched, tmp_path):
    depend = {t["nodeid"] for t in reached(untouched)}
    folder = workbook(tmp_path, {s: [e.id for e in W.exercises(s)] for s in ALL})
    # Every doctest, and every test that reached an exercise: the others never call a piece
    # that is cut, so the holes cannot change them.
    result = W.run_tests(folder, ALL, ["tests/test_doctests.py", *sorted(
        n for n in depend if not n.startswith("tests/test_doctests.py"))])
    assert result["errors"] == [], result["errors"]
    outcomes = {t["nodeid"]: t for t in result["tests"]}
    assert depend <= outcomes.keys()
    for nodeid, t in outcomes.items():
        if nodeid in depend:
            assert t["outcome"] == "failed" and t["hole"], t
        elif t["outcome"] == "passed":  # a doctest of a module without exercises
            assert not t["entered"], t  # a test never passes over an open hole
        else:  # a shared fixture that reached a hole for an earlier test
            assert t["hole"], t
    for stage in ALL:
        rows = W.judge(result, stage, folder / W.STAGES[stage])
        assert {r["status"] for r in rows} == {"todo"}
        # The first hole a test meets stops it; a later one (4.3 behind 4.2) may stop none.
        assert sum(r["tests"] for r in rows) >= 1, rows
    lines, ok = W.summary(result, W.judge(result, 3, folder / W.STAGES[3]))
    assert not ok and "3.2" in "\n".join(lines)


@pytest.mark.parametrize("round_", range(3))
def test_one_hole_filled_passes_exactly_that_exercise(untouched, tmp_path, round_):
    filled = {s: W.exercises(s)[round_] for s in ALL if round_ < len(W.exercises(s))}
    # An exercise whose every test runs another one first (stage 2's sampling calls the
    # model's forward) is filled together with the ones it `needs`, as a learner would.
    done = {s: {filled[s].id, *filled[s].needs} if s in filled else set() for s in ALL}
    folder = workbook(tmp_path, {s: [e.id for e in W.exercises(s) if e.id not in done[s]]
                                 for s in ALL})
    chosen = set()
    for stage in ALL:
        for ex in W.exercises(stage):
            # Tests that call no exercise but this one and those it needs: no other hole
            # can stop them.
            alone = [t for t in reached(untouched, ex.id)
                     if set(t["entered"]) <= {ex.id, *ex.needs}]
            assert alone, f"no test reaches exercise {ex.id} without other exercises"
            fastest = sorted(alone, key=lambda t: t["seconds"])
            chosen |= {t["nodeid"] for t in fastest[:PER_EXERCISE]}
    result = W.run_tests(folder, ALL, sorted(chosen))
    assert result["errors"] == []
    for stage in ALL:
        rows = W.judge(result, stage, folder / W.STAGES[stage])
        want = ["passed" if r["id"] in done[stage] else "todo" for r in rows]
        assert [r["status"] for r in rows] == want, rows


def test_make_refuses_to_overwrite_work_and_force_keeps_it(tmp_path, capsys):
    assert W.main(["make", "--stage", "1", "--dir", str(tmp_path)]) == 0
    mine = tmp_path / "stage1_data" / "tokenizer.py"
    mine.write_text(mine.read_text(encoding="utf-8") + "# my work\n", encoding="utf-8")
    assert W.main(["make", "--stage", "1", "--dir", str(tmp_path)]) == 2
    assert "already exists" in capsys.readouterr().err
    assert mine.read_text(encoding="utf-8").endswith("# my work\n")
    assert W.main(["make", "--stage", "1", "--dir", str(tmp_path), "--force"]) == 0
    kept = [p for p in tmp_path.iterdir() if p.name.startswith("stage1_data.old-")]
    assert len(kept) == 1
    assert (kept[0] / "tokenizer.py").read_text(encoding="utf-8").endswith("# my work\n")
    assert "# my work" not in mine.read_text(encoding="utf-8")


def test_grade_without_a_workbook_says_how_to_make_one(tmp_path, capsys):
    assert W.main(["grade", "--stage", "2", "--dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: no workbook at") and "make --stage 2" in err


def test_your_turn_boxes_list_the_exercise_table():
    docs_workbook = load("docs_workbook")
    for stage in ALL:
        path = REPO_ROOT / "docs" / "generated" / f"your_turn_stage{stage}.md"
        assert path.read_text(encoding="utf-8") == docs_workbook.your_turn(W, stage)
    table = (REPO_ROOT / "docs" / "generated" / docs_workbook.TABLE).read_text(encoding="utf-8")
    assert table == docs_workbook.table(W)
    assert [line.split(" | ")[0] for line in table.splitlines()[2:]] == [
        f"| {ex.id}" for ex in W.EXERCISES]
