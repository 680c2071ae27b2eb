"""The workbook grader is honest: tools/workbook.py, on every stage.

Every run goes through the grader's own machinery (``run_tests``: a pytest process on a
snapshot of the workbook, first on ``sys.path``). To stay fast, most runs take only the
exercises' own tests (tests/test_stageN_exercises.py, one typical mistake per test) and
the doctests; ``make grade`` runs every in-process test of the stage, and the mutation
suite (tests/test_workbook_mutations.py, ``make test-slow``) plants the typical mistakes
one by one and grades them as a learner would.

What is checked here:

- the untouched stages pass every exercise; with every hole open, every exercise is to
  do and every test passes (the solution's code stands in for the holes);
- one exercise is graded with the solution's code in every other one: a mistake in 4.3
  fails 4.3 only, even with 4.1 wrong too, or with 4.2 (a constructor) still a hole, and
  with stage 3 broken by a syntax error in the same run;
- messages are plain words: no object addresses, no tensor dumps, only the failing part
  of an ``and``, no raw error of torch or Python (a shape mismatch, a ``view`` without
  ``contiguous``, None compared with a number: each said from the learner's side);
- the grader survives the learner's code: a syntax error inside an exercise fails that
  exercise, once, naming file and line (and "not run", never "0 of N tests fail"); one
  outside makes the file's exercises wait; a module that does not import too; an endless
  loop meets the time limit, even one that catches every exception; a process that grows
  is killed at the memory limit; both say the loop that was running; Ctrl-C ends
  everything with one line;
- the limits work without POSIX signals (Windows): with SIGALRM, setitimer, os.killpg,
  /proc and the resource module made unavailable, a watchdog thread keeps the time limit,
  and the memory limit is said to be off (or kept by the test process itself where only
  /proc is missing);
- the report sends a reader to the section to read, in the Chinese edition too.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
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
EXERCISE_TESTS = [f"tests/test_stage{n}_exercises.py" for n in ALL]


def exercise_tests(*stages: int) -> list[str]:
    """The exercises' own tests of ``stages`` and the stages' doctests."""
    return [f"tests/test_stage{n}_exercises.py" for n in stages] + ["tests/test_doctests.py"]


def workbook(tmp: Path, holes_of: dict[int, list[str]], stages=ALL) -> Path:
    for stage in stages:
        W.make(stage, tmp, holes=holes_of.get(stage, []))
    return tmp


def edit(folder: Path, ex_id: str, old: str, new: str) -> None:
    """Replace ``old`` by ``new`` (once) inside exercise ``ex_id``'s code in the workbook."""
    ex = W.BY_ID[ex_id]
    path = folder / ex.package / ex.file
    text = path.read_text(encoding="utf-8")
    first, last = W.exercise_span(text, ex)
    lines = text.splitlines(keepends=True)
    code = "".join(lines[first:last])
    assert code.count(old) == 1, (ex_id, old)
    path.write_text("".join(lines[:first]) + code.replace(old, new) + "".join(lines[last:]),
                    encoding="utf-8")


def fill(folder: Path, ex_id: str, body: str) -> None:
    """Fill an open hole with ``body`` (indented like the hole)."""
    ex = W.BY_ID[ex_id]
    path = folder / ex.package / ex.file
    text = path.read_text(encoding="utf-8")
    line = next(x for x in text.splitlines() if ex.marker in x)
    indent = line[: len(line) - len(line.lstrip())]
    path.write_text(text.replace(line, textwrap_indent(body, indent)), encoding="utf-8")


def textwrap_indent(body: str, indent: str) -> str:
    return "\n".join(indent + x if x.strip() else x for x in body.strip("\n").splitlines())


def statuses(result: dict, stage: int, folder: Path) -> dict[str, str]:
    return {r["id"]: r["status"] for r in W.judge(result, stage, folder / W.STAGES[stage])}


def rows_by_id(result: dict, stage: int, folder: Path) -> dict[str, dict]:
    return {r["id"]: r for r in W.judge(result, stage, folder / W.STAGES[stage])}


# --------------------------------------------------------------------------- the list


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
        # The grader finds the code again, also by indentation alone (a file that does
        # not parse), and the solution's code put back is the file itself.
        span = W.exercise_span(source, ex)
        lines = source.splitlines(keepends=True)
        fn_first = (fn.decorator_list[0].lineno if fn.decorator_list else fn.lineno) - 1
        assert span == (fn_first, fn.end_lineno)
        assert W.rough_span(lines, ex.qualname) == span, ex.id
        assert W.with_solution(holed, ex) == source, ex.id


def headings(path: Path) -> dict[str, str]:
    """A docs page's headings: anchor -> text ("## Text {#anchor}", or MkDocs' slug)."""
    from markdown.extensions.toc import slugify

    found = {}
    for line in re.findall(r"^#{2,4} .+$", path.read_text(encoding="utf-8"), flags=re.M):
        text = line.lstrip("#").strip()
        m = re.fullmatch(r"(.+?)\s*\{#([\w-]+)\}", text)
        text, anchor = (m[1], m[2]) if m else (text, slugify(text, "-"))
        found[anchor] = text
    return found


def test_exercises_are_numbered_in_order_and_read_real_docs_sections():
    for stage in ALL:
        ids = [ex.id for ex in W.exercises(stage)]
        assert ids == [f"{stage}.{i}" for i in range(1, len(ids) + 1)] and len(ids) >= 2
        en = headings(REPO_ROOT / "docs" / f"{W.STAGES[stage]}.md")
        zh = headings(REPO_ROOT / "docs" / "zh" / f"{W.STAGES[stage]}.md")
        for ex in W.exercises(stage):
            assert en.get(ex.anchor) == ex.read, (
                f"{ex.id}: no heading {ex.read!r} (#{ex.anchor}) in docs/{W.STAGES[stage]}.md")
            assert ex.title_zh and zh.get(ex.anchor) == ex.read_zh, (
                f"{ex.id}: docs/zh/{W.STAGES[stage]}.md's heading for #{ex.anchor} is "
                f"{zh.get(ex.anchor)!r}, not {ex.read_zh!r}")


def test_the_docs_generator_reads_every_field_it_needs():
    from tools.docs.pages import workbook as page

    rows = page.rows(W.EXERCISES)
    assert [r[0] for r in rows] == [ex.id for ex in W.EXERCISES]
    for row, ex in zip(rows, W.EXERCISES, strict=True):
        assert row[1] == (ex.title, ex.title_zh)
        assert row[3] == (f"[{ex.read}](#{ex.anchor})", f"[{ex.read_zh}](#{ex.anchor})")


def test_every_exercise_has_its_own_tests():
    """The exercises' tests files call every exercise, each by name."""
    for ex in W.EXERCISES:
        text = (REPO_ROOT / f"tests/test_stage{ex.stage}_exercises.py").read_text(encoding="utf-8")
        assert f"--- {ex.id} " in text, f"tests/test_stage{ex.stage}_exercises.py has no {ex.id} part"


# --------------------------------------------------------------------------- grading


@pytest.fixture(scope="module")
def untouched(tmp_path_factory) -> dict:
    folder = workbook(tmp_path_factory.mktemp("untouched"), {})
    return W.run_tests(folder, ALL, exercise_tests(*ALL)) | {"folder": folder}


def test_the_untouched_stages_pass_every_exercise(untouched):
    assert untouched["errors"] == [] and untouched["returncode"] == 0
    for stage in ALL:
        package = untouched["folder"] / W.STAGES[stage]
        assert Path(untouched["imported"][W.STAGES[stage]]).parent == package
        rows = W.judge(untouched, stage, package)
        assert [r["status"] for r in rows] == ["passed"] * len(rows), rows
        assert all(r["tests"] >= 3 for r in rows), rows
        lines, ok = W.summary(untouched, rows)
        assert ok, lines


def test_with_every_hole_open_every_exercise_is_to_do_and_the_solution_stands_in(tmp_path):
    folder = workbook(tmp_path, {s: [e.id for e in W.exercises(s)] for s in ALL})
    result = W.run_tests(folder, ALL, exercise_tests(*ALL))
    assert result["errors"] == []
    assert all(t["outcome"] == "passed" for t in result["tests"]), [
        t for t in result["tests"] if t["outcome"] != "passed"]
    for stage in ALL:
        rows = W.judge(result, stage, folder / W.STAGES[stage])
        assert {r["status"] for r in rows} == {"todo"}, rows
        assert all(r["reached"] >= 3 for r in rows), rows
    lines, ok = W.summary(result, W.judge(result, 3, folder / W.STAGES[3]))
    assert not ok and "3.2  one head of causal self-attention" in "\n".join(lines)
    assert "TODO" in "\n".join(lines) and "NotImplementedError" in "\n".join(lines)


@pytest.fixture(scope="module")
def troubled(tmp_path_factory) -> tuple[dict, Path]:
    """One grading run (each costs seconds, mostly a fresh torch) of three stages, each with
    its own trouble. Stage 3: a syntax error inside exercise 3.2. Stage 4: the block without
    its residual, the attention without 1/sqrt(d_k), and the MLP (a constructor every block
    calls) still a hole. Stage 5: temperature after the softmax, beside a right get_lr."""
    folder = workbook(tmp_path_factory.mktemp("troubled"), {4: ["4.2"]}, stages=(3, 4, 5))
    edit(folder, "3.2", "wei = F.softmax(wei, dim=-1)", "wei = F.softmax(wei, dim=-1")
    edit(folder, "4.3", "x = x + self.attn(self.ln_1(x))", "x = self.attn(self.ln_1(x))")
    edit(folder, "4.1", " / math.sqrt(hs)", "")
    edit(folder, "5.3", "logits = (logits - logits.max(dim=-1, keepdim=True).values) * scale",
         "logits = logits - logits.max(dim=-1, keepdim=True).values")
    return W.run_tests(folder, [3, 4, 5], exercise_tests(3, 4, 5)), folder


def test_a_mistake_fails_its_exercise_only_even_beside_another_mistake_or_a_hole(troubled):
    result, folder = troubled
    rows = rows_by_id(result, 4, folder)
    assert {k: r["status"] for k, r in rows.items()} == {
        "4.1": "failed", "4.2": "todo", "4.3": "failed"}, rows
    assert "matches the result of scores not divided by sqrt(head_size)" in rows["4.1"]["message"]
    assert "no residual around the attention" in rows["4.3"]["message"], rows["4.3"]
    assert statuses(result, 5, folder) == {"5.1": "passed", "5.2": "passed", "5.3": "failed"}
    five = rows_by_id(result, 5, folder)["5.3"]
    assert "before the softmax" in five["message"] and five["test"].startswith(
        "tests/test_stage5_exercises.py::test_temperature")
    # A test that ran both wrong exercises was run again with each alone: the block's
    # formula fails with the learner's block only (its expected value uses the same attention).
    both = {t["nodeid"].split("::")[1]: {k: v["outcome"] for k, v in t["verdicts"].items()}
            for t in result["tests"] if {"4.1", "4.3"} <= set(t["verdicts"])}
    assert both["test_block_is_pre_ln_with_residuals"] == {"4.1": "passed", "4.3": "failed"}, both
    lines, ok = W.summary(result, W.judge(result, 4, folder / "stage4_block"))
    text = "\n".join(lines)
    assert not ok and "read: docs/stage4_block.md#layer-normalisation" in text
    # A Chinese reader is sent to the same section of the Chinese page, on the next line.
    read = lines.index("        read: docs/stage4_block.md#layer-normalisation")
    assert lines[read + 1] == "        中文: docs/zh/stage4_block.md「层归一化」", lines
    assert not re.search(r"<built-in| at 0x|tensor\(\[", text), text


def test_a_right_exercise_passes_while_the_constructor_it_needs_is_a_hole(tmp_path):
    folder = workbook(tmp_path, {4: ["4.1", "4.2"]}, stages=(4,))
    result = W.run_tests(folder, [4], exercise_tests(4))
    assert statuses(result, 4, folder) == {"4.1": "todo", "4.2": "todo", "4.3": "passed"}


# --------------------------------------------------------------------------- messages


def test_messages_are_plain_words():
    dump = ("assert False\n +  where False = <built-in method allclose of type object at "
            "0x7f30308cea40>(tensor([[-0.1695, -0.0872,  0.1468, -1.0438,  0.2955,  0.7305,\n"
            "  -0.4445]]), tensor([[ 0.8305,  0.9128,  1.1468, -0.0438,  1.2955,  1.7305,\n"
            "   0.5555]]))\n +    where <built-in method allclose of type object at 0x7f3030"
            "8cea40> = torch.allclose")
    assert W.plain(dump) == "this check failed: False"
    chained = ("assert (0.12345678901234 == 0.12345678901234 ± 1.2e-07\n  \n  comparison failed\n"
               "  Obtained: 0.12345678901234\n  Expected: 0.12345678901234 ± 1.2e-07 and 0.0 < "
               "1e-20 and 0.12345678901234 == 0.5 ± 5.0e-07\n +  where 0.0 = abs((0.1 - 0.1))\n"
               "  \n  comparison failed\n  Obtained: 0.12345678901234\n  Expected: 0.5 ± 5.0e-07)")
    assert W.plain(chained) == "expected 0.5 ± 5.0e-07, got 0.12345678901234"
    assert W.plain("assert (5 == 5 and 5 == 6)\n +  where 5 = f(5)") == "this check failed: 5 == 6"
    assert W.plain("got <stage4_block.model.MLP object at 0x7f00ab> and <function f at 0x1f>") \
        == "got MLP and f"
    assert W.plain("x is tensor([1, 2, 3])") == "x is tensor([1, 2, 3])"  # short ones stay


@pytest.mark.parametrize("raw,words", [
    ("RuntimeError: view size is not compatible with input tensor's size and stride (at least "
     "one dimension spans across two contiguous subspaces). Use .reshape(...) instead.",
     "RuntimeError: .view() cannot reshape a tensor whose numbers are not stored in row order, "
     "as after a transpose: call .contiguous() before .view() (or use .reshape())"),
    ("RuntimeError: Expected size for first two dimensions of batch2 tensor to be: [6, 4] but "
     "got: [6, 5].", "the left matrices have 4 columns, the right ones 5 rows"),
    ("RuntimeError: The size of tensor a (8) must match the size of tensor b (5) at "
     "non-singleton dimension 3", "their dimension 3 is 8 in one and 5 in the other"),
    ("RuntimeError: mat1 and mat2 shapes cannot be multiplied (30x4 and 12x12)",
     "(30 x 4) times (12 x 12)"),
    ("got TypeError: '<' not supported between instances of 'NoneType' and 'int'",
     "got TypeError: None was compared with a number (None < an int)"),
    ("TypeError: topk(): argument 'k' (position 2) must be int, not NoneType",
     "torch.topk got None for its argument k"),
    ("RuntimeError: probability tensor contains either `inf`, `nan` or element < 0",
     "the logits overflowed"),
    ("RuntimeError: stack expects each tensor to be equal size, but got [5] at entry 0 and [6] "
     "at entry 1", "torch.stack got tensors of different shapes, (5) and (6)"),
    ("RuntimeError: Expected target size [2, 6], got [2, 4]",
     "flatten the logits to (B*T, V) and the targets to (B*T,) first"),
    ("NotImplementedError: Cannot copy out of meta tensor; no data!", "the 'meta' device"),
    ("RuntimeError: Expected all tensors to be on the same device, but found at least two "
     "devices, cuda:0 and cpu!", "tensors on two devices, cuda:0 and cpu, were used together"),
    ("got NameError: name 'torch' is not defined",
     "the name torch is not defined here: misspelled, or used without its import"),
])
def test_raw_errors_of_torch_and_python_are_said_in_plain_words(raw, words):
    said = W.plain(raw)
    assert words in said, said
    assert raw.split(": ", 1)[1][:25] not in said, said


def test_a_limit_says_which_loop_of_the_learner_was_running(tmp_path):
    path = tmp_path / "pkg" / "model.py"
    path.parent.mkdir()
    path.write_text("def stream(n):\n    idx = []\n    while True:\n        idx.append(n)\n"
                    "        for _ in range(3):\n            pass\n    return idx\n",
                    encoding="utf-8")
    assert W.enclosing_loop(path, 4) == (3, "while True:")
    assert W.enclosing_loop(path, 6) == (5, "for _ in range(3):")
    assert W.enclosing_loop(path, 2) is None
    assert W.where_it_ran("pkg/model.py:4", tmp_path) == (
        "at pkg/model.py line 4, inside the loop `while True:` (line 3)")
    killed = {"why": "memory", "exercise": "2.2", "nodeid": "t", "spot": "pkg/model.py:4",
              "seconds": 6.0}
    text = W._killed_row(killed, 20.0, 4.0, -9, tmp_path)["verdicts"]["2.2"]["message"]["text"]
    assert text.startswith("memory limit: the tests grew past 4 GiB in 6 s while running your "
                           "LanguageModel.stream (exercise 2.2)"), text
    assert "inside the loop `while True:` (line 3)" in text and "does that loop stop" in text
    text = W._killed_row({**killed, "spot": "pkg/model.py:2"}, 20.0, 4.0, -9, tmp_path)[
        "judged"]["2.2"]["text"]
    assert "at pkg/model.py line 2" in text and "grow without end" in text


# --------------------------------------------------------------------------- surviving the code


def test_a_syntax_error_inside_an_exercise_fails_it_once_and_the_others_are_graded(troubled):
    result, folder = troubled  # stage 3: a parenthesis left open in exercise 3.2
    rows = rows_by_id(result, 3, folder)
    assert {k: r["status"] for k, r in rows.items()} == {
        "3.1": "passed", "3.2": "failed", "3.3": "passed"}
    message = rows["3.2"]["message"]
    assert re.search(r"syntax error at stage3_attention/model\.py line \d+", message), message
    assert "inside exercise 3.2" in message
    text = "\n".join(W.summary(result, list(rows.values()))[0])
    assert text.count("syntax error") == 1, text
    # No test ran it: its line says so, not "FAILED 0 of 12 tests fail".
    line = next(x for x in text.splitlines() if x.startswith("  3.2  "))
    assert line.endswith("FAILED   not run: it does not compile"), line


def test_a_syntax_error_outside_the_exercises_makes_them_wait_naming_it(tmp_path):
    folder = workbook(tmp_path, {}, stages=(5,))
    path = folder / "stage5_gpt" / "model.py"
    text = path.read_text(encoding="utf-8")
    path.write_text(text.replace("ACTIVATIONS = (", "ACTIVATIONS = ((", 1), encoding="utf-8")
    result = W.run_tests(folder, [5], exercise_tests(5))
    rows = rows_by_id(result, 5, folder)
    # get_lr lives in train.py: it is graded, with the repository's model.py meanwhile.
    assert {k: r["status"] for k, r in rows.items()} == {
        "5.1": "waiting", "5.2": "passed", "5.3": "waiting"}, rows
    line = text[: text.index("ACTIVATIONS = (")].count("\n") + 1
    for ex_id in ("5.1", "5.3"):
        assert (f"waiting for stage5_gpt/model.py to compile: the syntax error at line {line}"
                in rows[ex_id]["message"])
    lines = W.summary(result, list(rows.values()))[0]
    errors = [x for x in lines if "'(' was never closed" in x]  # reported once, in full
    assert len(errors) == 1 and f"syntax error at stage5_gpt/model.py line {line}" in errors[0]
    assert "blocks 5.1, 5.3" in errors[0], lines


def test_a_module_that_does_not_import_makes_its_exercises_wait(tmp_path):
    folder = workbook(tmp_path, {}, stages=(2,))
    path = folder / "stage2_bigram" / "model.py"
    path.write_text(path.read_text(encoding="utf-8").replace(
        "@dataclass\nclass ModelConfig:", "UNDEFINED_NAME\n\n\n@dataclass\nclass ModelConfig:"),
        encoding="utf-8")
    result = W.run_tests(folder, [2], exercise_tests(2))
    rows = rows_by_id(result, 2, folder)
    # logits_grad lives in backward.py: it is graded, with the repository's model.py.
    assert {k: r["status"] for k, r in rows.items()} == {
        "2.1": "waiting", "2.2": "waiting", "2.3": "passed"}, rows
    assert rows["2.1"]["message"].startswith("waiting for stage2_bigram/model.py to import: "
                                             "NameError at line "), rows["2.1"]
    lines = W.summary(result, list(rows.values()))[0]
    assert len([x for x in lines if "UNDEFINED_NAME" in x]) == 1, lines  # once, in full


def without_posix(monkeypatch) -> None:
    """This process as on Windows: no SIGALRM, no setitimer, no os.killpg, no /proc, no
    resource module (the grader, in this process, passes the choice on to its tests)."""
    monkeypatch.delattr(signal, "SIGALRM", raising=False)
    monkeypatch.delattr(signal, "setitimer", raising=False)
    monkeypatch.delattr(os, "killpg", raising=False)
    monkeypatch.setattr(W, "PROC", Path("/no/proc/here"))
    monkeypatch.setitem(sys.modules, "resource", None)  # `import resource` fails


@pytest.mark.parametrize("body,limit,posix", [
    ("while True:\n    pass", 3.0, True),
    # Where there is no SIGALRM (Windows) a watchdog thread stops the learner's code.
    ("while True:\n    pass", 3.0, False),
    # Learner code that swallows every exception, the grader's too: the process is ended
    # and the grading goes on in a fresh one.
    pytest.param("while True:\n    try:\n        time.sleep(0.01)\n    except BaseException:\n"
                 "        pass", 2.0, True, marks=pytest.mark.slow),
    pytest.param("while True:\n    try:\n        time.sleep(0.01)\n    except BaseException:\n"
                 "        pass", 2.0, False, marks=pytest.mark.slow),
], ids=["loop", "loop-without-posix-signals", "loop-catching-everything",
        "loop-catching-everything-without-posix-signals"])
def test_an_endless_loop_meets_the_time_limit_and_the_rest_is_graded(tmp_path, monkeypatch,
                                                                     body, limit, posix):
    if not posix:
        without_posix(monkeypatch)
        assert W.time_limit_kind() == "thread" and W.memory_guard() is None
    folder = workbook(tmp_path, {4: ["4.2"]}, stages=(4,))
    fill(folder, "4.2", "import time\n" + body)
    start = time.monotonic()
    result = W.run_tests(folder, [4], exercise_tests(4), time_limit=limit)
    took = time.monotonic() - start
    rows = rows_by_id(result, 4, folder)
    assert {k: r["status"] for k, r in rows.items()} == {
        "4.1": "passed", "4.2": "failed", "4.3": "passed"}, rows
    assert "time limit" in rows["4.2"]["message"] and "MLP.__init__" in rows["4.2"]["message"]
    assert "the loop `while True:`" in rows["4.2"]["message"], rows["4.2"]
    # One time limit, not one per test: after it, the solution's MLP stands in.
    assert rows["4.2"]["failed"] == 1 and rows["4.2"]["tests"] == 1, rows["4.2"]
    assert took < 120, took  # (seconds: a fresh test process or two, on a busy machine)
    lines = W.summary(result, list(rows.values()))[0]
    off = [x for x in lines if "the memory limit is off" in x]
    assert len(off) == (0 if posix else 1), lines  # said once, where it is off


def test_without_sigalrm_a_watchdog_thread_stops_the_learners_code(monkeypatch, tmp_path):
    """The portable time limit, in this process: the watchdog thread raises TimeLimit in
    the thread that runs the learner's code, with the words a SIGALRM would give; once
    the test is over, no stop comes."""
    without_posix(monkeypatch)
    assert W.time_limit_kind() == "thread"
    monkeypatch.setattr(W, "_S", {"time_limit": 1.0, "folder": str(tmp_path), "timer": "thread",
                                  "memory": None})
    monkeypatch.setattr(W, "_RUN", {"timeout": None, "last": "4.2", "nodeid": "t"})
    monkeypatch.setattr(W, "_STACK", ["4.2"])
    monkeypatch.setattr(W, "_ALARMS", 0)
    monkeypatch.setattr(W, "_TIMER", {"deadline": None})
    threading.Thread(target=W._watchdog, args=(threading.get_ident(),), daemon=True).start()
    start = time.monotonic()
    W._arm(1.0)
    try:
        with pytest.raises(W.TimeLimit, match=r"your MLP.__init__ \(exercise 4.2\) was still "
                                              r"running after 1 s"):
            while time.monotonic() - start < 15:
                pass
    finally:
        W._disarm()
    assert 0.9 < time.monotonic() - start < 10
    # Disarmed (the test is over): no stop comes any more.
    W._RUN.update(timeout=None)
    W._arm(0.2)
    W._disarm()
    quiet = time.monotonic()
    while time.monotonic() - quiet < 1.0:
        pass


def test_a_test_process_is_killed_without_process_groups(monkeypatch):
    monkeypatch.delattr(os, "killpg", raising=False)
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    W._kill(proc)
    assert proc.returncode is not None


def test_where_the_memory_limit_is_off_help_says_so(monkeypatch, capsys):
    assert W.memory_guard() in ("proc", "self", None)
    without_posix(monkeypatch)
    assert W.memory_guard() is None
    with pytest.raises(SystemExit):
        W.main(["grade", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "the most memory the tests may use; off on this machine" in out, out
    monkeypatch.delitem(sys.modules, "resource")
    if importlib.util.find_spec("resource"):  # /proc gone, resource there (macOS): itself
        assert W.memory_guard() == "self"


def test_the_time_limit_stops_the_learners_code_but_never_pytests_report(monkeypatch, tmp_path):
    """The timer repeats (code that catches TimeLimit is stopped again). Once the learner's
    code has been stopped, an alarm while pytest reports the failure (slowly: a loop's huge
    list still alive in the traceback) must not break pytest with an INTERNALERROR."""
    monkeypatch.setattr(W, "_S", {"time_limit": 20.0, "folder": str(tmp_path)})
    monkeypatch.setattr(W, "_RUN", {"timeout": "1.1", "last": "1.1"})
    monkeypatch.setattr(W, "_STACK", [])
    monkeypatch.setattr(W, "_ALARMS", 0)
    assert W._on_alarm(signal.SIGALRM, None) is None  # pytest is reporting: nothing raised
    W._STACK.append("1.1")  # the learner's code caught it and runs on: stopped again
    with pytest.raises(W.TimeLimit, match="CharTokenizer.encode"):
        W._on_alarm(signal.SIGALRM, None)


@pytest.mark.slow
@pytest.mark.parametrize("guard", ["proc", "self"])
def test_a_process_that_grows_is_stopped_at_the_memory_limit(tmp_path, monkeypatch, guard):
    """Read in /proc by the grader (Linux), or, where there is no /proc (macOS), watched by
    the test process itself through the resource module."""
    if guard == "self":
        monkeypatch.setattr(W, "PROC", Path("/no/proc/here"))
    if W.memory_guard() != guard:
        pytest.skip(f"this machine has no {guard} memory guard")
    folder = workbook(tmp_path, {2: ["2.2"]}, stages=(2,))
    fill(folder, "2.2", "hoard = []\nwhile True:\n    hoard.append(bytearray(50_000_000))\n"
                        "    hoard[-1][::4096] = b'x' * len(hoard[-1][::4096])")
    result = W.run_tests(folder, [2], exercise_tests(2), memory_limit=1.5)
    rows = rows_by_id(result, 2, folder)
    assert rows["2.1"]["status"] == "passed" and rows["2.2"]["status"] == "failed", rows
    assert "memory limit" in rows["2.2"]["message"], rows["2.2"]
    assert "inside the loop `while True:`" in rows["2.2"]["message"], rows["2.2"]


def grader_processes(marker: str) -> list[int]:
    """Processes whose command line holds ``marker`` (a folder only this test uses)."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if marker in proc.joinpath("cmdline").read_bytes().decode(errors="replace"):
                found.append(int(proc.name))
        except OSError:
            continue
    return found


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="finds processes through /proc")
def test_ctrl_c_stops_grading_with_one_line_and_leaves_no_process(tmp_path):
    folder = workbook(tmp_path / "wb", {4: ["4.2"]}, stages=(4,))
    fill(folder, "4.2", "while True:\n    pass")  # so that the tests are surely running
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    proc = subprocess.Popen(
        [sys.executable, str(REPO_ROOT / "tools" / "workbook.py"), "grade", "--stage", "4",
         "--dir", str(folder)], cwd=REPO_ROOT, env={**os.environ, "TMPDIR": str(tmp)},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 60
    while not any(p != proc.pid for p in grader_processes(str(tmp))):  # the tests started
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.2)
    time.sleep(1.0)
    os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does: the whole group
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, (out, err)
    assert "Traceback" not in err and err.strip() == "grading stopped (Ctrl-C); nothing was changed"
    time.sleep(0.5)
    assert grader_processes(str(tmp)) == []
    assert list(tmp.iterdir()) == []  # its temporary folder is gone too


# --------------------------------------------------------------------------- make


def test_make_refuses_to_overwrite_work_and_force_keeps_it(tmp_path, capsys):
    assert W.main(["make", "--stage", "1", "--dir", str(tmp_path)]) == 0
    mine = tmp_path / "stage1_data" / "tokenizer.py"
    mine.write_text(mine.read_text(encoding="utf-8") + "# my work\n", encoding="utf-8")
    assert W.main(["make", "--stage", "1", "--dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "already exists" in err and "FORCE=1" in err
    assert mine.read_text(encoding="utf-8").endswith("# my work\n")
    assert W.main(["make", "--stage", "1", "--dir", str(tmp_path), "--force"]) == 0
    kept = [p for p in tmp_path.iterdir() if p.name.startswith("stage1_data.old-")]
    assert len(kept) == 1
    assert (kept[0] / "tokenizer.py").read_text(encoding="utf-8").endswith("# my work\n")
    assert "# my work" not in mine.read_text(encoding="utf-8")


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_passes_force_through():
    def dry(*args: str) -> str:
        out = subprocess.run(["make", "-n", "workbook", *args],
                             cwd=REPO_ROOT, capture_output=True, text=True, check=True).stdout
        return next(x for x in out.splitlines() if "tools/workbook.py make" in x)

    assert dry("STAGE=3").endswith("make --stage 3")
    assert dry("STAGE=3", "FORCE=1").endswith("make --stage 3 --force")


def test_grade_without_a_workbook_says_how_to_make_one(tmp_path, capsys):
    assert W.main(["grade", "--stage", "2", "--dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: no workbook at") and "make workbook STAGE=2" in err
