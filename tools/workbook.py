"""Build it yourself: a stage as a workbook with holes, graded by the stage's own tests.

    python tools/workbook.py list                   # the exercises of every stage
    python tools/workbook.py make --stage 3         # workbook/stage3_attention/, with holes
    python tools/workbook.py grade --stage 3        # stage 3's tests, run on the workbook

``make`` copies a stage package into a learner's folder (``workbook/`` by default,
git-ignored) and cuts the body of each of the stage's key pieces (listed in
``EXERCISES`` below), keeping the signature, docstring and decorators, and putting
``raise NotImplementedError("Exercise 3.2: ...")`` where the code was. It never
overwrites a workbook that is already there, unless ``--force``; even then the old
folder is kept beside the new one, renamed.

``grade`` runs the stage's tests (the in-process ones: tests/test_stageN_*.py less
the end-to-end CLI files, the ``slow`` tests and a few heavy ones, plus the stage's
doctests) on a snapshot of the workbook, first on ``sys.path``. Each exercise is
graded on its own: while one exercise runs the learner's code, every other one runs
the solution's (the repository's code, compiled into the learner's module), so a
mistake in 4.3 cannot fail 4.1. This file is also the pytest plugin of that run
(``-p tools.workbook``). Every exercise function is replaced by a dispatcher that
calls the learner's or the solution's version, as the test being run asks:

- first the test runs with the learner's code for every exercise that is filled in
  (an open hole, or one already judged, runs the solution's);
- if it fails and more than one of the learner's exercises ran, it runs again once
  per such exercise, with only that one the learner's, to find which is wrong.

Code that is the solution's, statement for statement, counts as the solution. A test
that runs longer than the time limit is stopped, and the exercise whose code was
running is failed and from then on replaced by the solution's; a test that will not
stop, or a process that grows past the memory limit, is killed and the run goes on
in a fresh process; either way the message says the line the learner's code was at,
and the loop around it (a thread of the test process notes it a few times a second).
The limits work without POSIX signals too: where there is no SIGALRM (Windows) a
watchdog thread of the test process stops the code; the memory is read in /proc, else
watched by the test process itself (the resource module), else not at all (Windows:
``grade --help`` and the report say so).
A syntax error inside an exercise fails that exercise without running it (its
solution stands in); one outside the exercises makes the file's exercises wait.
Messages are plain words: pytest's machinery, object addresses and tensor dumps go,
and the raw errors of torch and Python (shapes that do not fit, a ``view`` of a
transposed tensor, None compared with a number, ...) are said from the learner's side
(``RAW_ERRORS``). The grader reads the learner's files and never writes to them.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import functools
import importlib
import inspect
import io
import json
import math
import mmap
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import tokenize
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STAGES = {1: "stage1_data", 2: "stage2_bigram", 3: "stage3_attention", 4: "stage4_block",
          5: "stage5_gpt"}
ENV = "GPT_STAGES_WORKBOOK"  # the plugin's settings (a JSON file), set by ``run_tests``
TIME_LIMIT = 20.0  # seconds one test may run (the solution's heaviest takes a few)
MEMORY_LIMIT = 4.0  # GiB the test process may use (the solution's tests use under 1)
GRACE = 20.0  # seconds past the time limit before a test that ignores being stopped is killed
# Test files of whole command-line runs (seconds each, and they test the pieces only
# through the others): `make test` runs them, the grader does not.
END_TO_END = ("_cli.py", "_checkpoint.py", "_visualize.py",
              "_bpe.py", "_gpt2.py")  # these two: against Hugging Face's, no exercise
# In-process tests that take seconds and test the harness, not an exercise (a real
# Ctrl-C in a fresh process, a timing, a corpus of 100 MB): left out of grading.
HEAVY = ("tests/test_stage1_data.py::test_loading_a_big_corpus_takes_at_most_four_times_its_size",
         "tests/test_stage5_train.py::test_ctrl_c_saves_a_resumable_checkpoint",
         "tests/test_stage5_train.py::test_resume_after_ctrl_c_with_a_new_max_iters",
         "tests/test_stage5_train.py::test_auto_precision_is_a_timed_choice_on_a_cpu")


@dataclass(frozen=True)
class Exercise:
    id: str  # "3.2": stage 3, exercise 2
    target: str  # "model.py:Head.forward": the function whose body is cut
    title: str
    title_zh: str
    read: str  # the heading of the section of docs/<stage>.md to read
    read_zh: str  # the same section's heading in docs/zh/<stage>.md
    hint: str

    @property
    def stage(self) -> int:
        return int(self.id.split(".")[0])

    @property
    def package(self) -> str:
        return STAGES[self.stage]

    @property
    def file(self) -> str:
        return self.target.split(":")[0]

    @property
    def module(self) -> str:
        return f"{self.package}.{self.file.removesuffix('.py').replace('/', '.')}"

    @property
    def qualname(self) -> str:
        """The function whose body is cut."""
        return self.target.split(":")[1]

    @property
    def anchor(self) -> str:
        """The heading's id, as MkDocs makes it (the toc extension's slugify)."""
        words = re.sub(r"[^\w\s-]", "", self.read.lower()).strip()
        return re.sub(r"[\s-]+", "-", words)

    @property
    def docs(self) -> str:
        return f"docs/{self.package}.md#{self.anchor}"

    @property
    def docs_zh(self) -> str:
        """The same section in the Chinese edition (a Chinese reader is sent there too)."""
        return f"docs/zh/{self.package}.md「{self.read_zh}」"

    @property
    def marker(self) -> str:
        """The start of the line that stands for the hole while it is open."""
        return f'raise NotImplementedError("Exercise {self.id}:'

    def hole_line(self) -> str:
        return f'{self.marker} {self.title} -- read {self.docs}")'


# The holes, in the order a learner meets them. Each is the heart of its stage's idea.
EXERCISES = (
    Exercise("1.1", "tokenizer.py:CharTokenizer.encode", "encode text to ids",
             "把文本编码成 id", "A character tokenizer", "字符级分词器",
             "look each character up in self.stoi; unknown characters raise the UserError that "
             "self._unknown_error builds (every position, at most 10 shown)"),
    Exercise("1.2", "tokenizer.py:CharTokenizer.decode", "decode ids to text",
             "把 id 解码回文本", "A character tokenizer", "字符级分词器",
             "accept any iterable of ints (tensors too); an id outside 0..vocab_size-1 is a "
             "UserError; join the characters of self.itos"),
    Exercise("1.3", "data.py:get_batch", "a random batch of (x, y) windows",
             "随机取一批 (x, y) 窗口", "Batches: inputs and targets shifted by one",
             "批次：输入与错开一位的目标",
             "check_length first, then batch_size >= 1; random starts with torch.randint(..., "
             "generator=generator); y is x shifted by one; return torch.long on device"),
    Exercise("2.1", "model.py:LanguageModel.forward", "the bigram's logits and loss",
             "二元模型的 logits 和损失", "The loss: cross-entropy", "损失：交叉熵",
             "logits are rows of the table, (B, T, V); with targets, flatten to (B*T, V) and "
             "(B*T,) for F.cross_entropy; without, the loss is None"),
    Exercise("2.2", "model.py:LanguageModel.stream", "sampling, one token at a time",
             "采样：一次生成一个字符", "Generating text", "生成文本",
             "max_new_tokens times: the logits of the last position, sample_next, append to "
             "idx, yield the new (B, 1) token"),
    Exercise("2.3", "backward.py:logits_grad", "the loss's gradient by hand",
             "亲手算出损失的梯度", "What `backward()` computes", "`backward()` 算的是什么",
             "the softmax of each example's row of logits (dim=-1), minus 1 at that example's "
             "own true character, all divided by N = logits.shape[0] (the loss is a mean over "
             "N examples); compute on a new tensor, never change the logits you are given"),
    Exercise("3.1", "model.py:sinusoidal_positions", "sinusoidal positions",
             "正弦位置编码", "Step 1: token and position embeddings", "部件一：词元嵌入与位置嵌入",
             "even columns sin(p / 10000^(2i/C)), odd columns the cos of the same angle; "
             "mind an odd n_embd"),
    Exercise("3.2", "model.py:Head.forward", "one head of causal self-attention",
             "一个因果自注意力头", "Step 2: one attention head", "部件二：一个注意力头",
             "q, k, v from the three Linears; scores q k^T / sqrt(head_size); -inf above the "
             "diagonal when self.causal; softmax over the last dim; keep a detached copy of "
             "the weights in self.last_attention"),
    Exercise("3.3", "model.py:LanguageModel.forward", "the forward pass",
             "前向传播", "The forward pass", "前向传播",
             "UserError when T > block_size; token embeddings + self.positions(T, device); "
             "the head; lm_head; the loss as in stage 2"),
    Exercise("4.1", "model.py:CausalSelfAttention.forward", "multi-head attention, batched",
             "批量计算的多头注意力", "The reshape, step by step", "逐步看形状变换",
             "one c_attn gives q, k, v; view (B, T, C) as (B, nh, T, hs); one head's math for "
             "all heads at once; self.last_attention is (B, nh, T, T); heads side by side "
             "again, then c_proj and resid_dropout (attn_dropout on the weights)"),
    Exercise("4.2", "model.py:MLP.__init__", "the feed-forward network (MLP)",
             "前馈网络（MLP）", "Feed-forward network", "前馈网络",
             "c_fc = Linear C->4C, act = ReLU or GELU as config.activation says, c_proj = "
             "Linear 4C->C, dropout = Dropout(config.dropout): forward uses these four names"),
    Exercise("4.3", "model.py:Block.forward", "the pre-LN block, residuals included",
             "前置层归一化的块（含残差连接）", "Layer normalisation", "层归一化",
             "pre-LN: x + attn(ln_1(x)), then x + mlp(ln_2(x)): LayerNorm on the branch's "
             "input, the residual adds the branch's output to x itself"),
    Exercise("5.1", "model.py:GPT.init_weights", "GPT-2's initialisation",
             "GPT-2 的初始化", "Initialisation", "初始化",
             "tie lm_head.weight to wte.weight when config.tie_weights; then over "
             "named_parameters: every c_proj.weight ~ N(0, 0.02 / sqrt(2 * n_layer)), every "
             "other matrix ~ N(0, 0.02), every bias 0 (LayerNorm gains stay 1)"),
    Exercise("5.2", "train.py:get_lr", "warmup, then cosine decay",
             "先预热，再余弦衰减", "Warmup, then cosine decay", "先预热，再余弦衰减",
             "linear warmup lr * (step + 1) / warmup_iters; cosine from lr to min_lr until "
             "lr_decay_iters (or max_iters when 0); min_lr after"),
    Exercise("5.3", "model.py:sample_next", "temperature and top-k sampling",
             "温度与 top-k 采样", "Sampling, one character at a time", "采样：一次一个字符",
             "UserError for temperature < 0 (or nan) and top_k < 1; temperature 0 is argmax; "
             "else divide the logits by the temperature without overflowing, keep the top_k "
             "largest (the others -inf), softmax, torch.multinomial with the generator"),
)
BY_ID = {e.id: e for e in EXERCISES}


def exercises(stage: int) -> list[Exercise]:
    return [e for e in EXERCISES if e.stage == stage]


class WorkbookError(Exception):
    """A problem the user can fix: printed as one line, exit status 2."""


# --- cutting the holes --------------------------------------------------------------


def find_function(tree: ast.Module, qualname: str) -> ast.FunctionDef | None:
    """The ``def`` of ``Class.method`` or ``function`` at the top of a module."""
    body, node = tree.body, None
    for part in qualname.split("."):
        node = next((n for n in body if isinstance(n, (ast.ClassDef, ast.FunctionDef))
                     and n.name == part), None)
        if node is None:
            return None
        body = node.body
    return node if isinstance(node, ast.FunctionDef) else None


def cut(source: str, ex: Exercise) -> str:
    """``source`` with the code of exercise ``ex`` replaced by its ``raise NotImplementedError``."""
    lines = source.splitlines(keepends=True)
    fn = find_function(ast.parse(source), ex.qualname)
    if fn is None:
        raise WorkbookError(f"exercise {ex.id}: no {ex.qualname} in {ex.package}/{ex.file}")
    body = fn.body
    doc = (isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
           and isinstance(body[0].value.value, str))
    if doc and len(body) == 1:
        raise WorkbookError(f"exercise {ex.id}: {ex.qualname} has nothing but a docstring")
    first = body[0].end_lineno if doc else body[0].lineno - 1  # 0-based: after the docstring
    last = fn.end_lineno  # 0-based exclusive
    indent = " " * body[0].col_offset
    if body[0].lineno == fn.lineno:
        raise WorkbookError(f"exercise {ex.id}: {ex.qualname} is written on one line")
    return "".join(lines[:first] + [f"{indent}{ex.hole_line()}\n"] + lines[last:])


def is_open(package_dir: Path, ex: Exercise) -> bool:
    """Whether the learner's copy still holds the exercise's ``raise NotImplementedError``."""
    path = package_dir / ex.file
    return path.is_file() and ex.marker in path.read_text(encoding="utf-8", errors="replace")


def make(stage: int, folder: Path, force: bool = False, holes: list[str] | None = None,
         source: Path = ROOT) -> Path:
    """Copy ``source/<stage package>`` into ``folder`` and cut the holes (all the stage's
    exercises, or the ids in ``holes``). Returns the new package folder."""
    package = STAGES[stage]
    dest = folder / package
    if dest.exists():
        if not force:
            raise WorkbookError(
                f"{dest} already exists and may hold your work; grade it with "
                f"`make grade STAGE={stage}` (or `python tools/workbook.py grade --stage {stage}"
                f" --dir {folder}`), or start again with `make workbook STAGE={stage} FORCE=1` "
                "(or --force; the old folder is kept, renamed)")
        backup = dest.with_name(f"{package}.old-{time.strftime('%Y%m%d-%H%M%S')}")
        dest.rename(backup)
        print(f"kept your previous workbook as {backup}")
    chosen = exercises(stage) if holes is None else [e for e in exercises(stage) if e.id in holes]
    # Cut every hole before writing anything, so a renamed function fails with nothing made.
    cuts: dict[str, str] = {}
    for ex in chosen:
        text = cuts.get(ex.file) or (source / package / ex.file).read_text(encoding="utf-8")
        cuts[ex.file] = cut(text, ex)
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copytree(source / package, dest, ignore=shutil.ignore_patterns("__pycache__"))
    for name, text in cuts.items():
        (dest / name).write_text(text, encoding="utf-8")
    return dest


# --- where an exercise's code is, also in a file that does not parse ------------------


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" \t"))


def _code(line: str) -> bool:
    """Whether a line holds code (not blank, not only a comment)."""
    return bool(line.strip()) and not line.lstrip().startswith("#")


def rough_span(lines: list[str], qualname: str) -> tuple[int, int] | None:
    """0-based [first, last) of the ``def`` of ``qualname``, decorators included, found by
    indentation alone (for a file with a syntax error, which ``ast`` cannot read)."""
    lo, hi, outer = 0, len(lines), -1
    start = ind = None
    parts = qualname.split(".")
    for k, part in enumerate(parts):
        keyword = r"(?:async\s+)?def" if k == len(parts) - 1 else "class"
        pattern = re.compile(rf"([ \t]*){keyword}\s+{re.escape(part)}\b")
        start = next((i for i in range(lo, hi) if pattern.match(lines[i])
                      and _indent(lines[i]) > outer), None)
        if start is None:
            return None
        ind = _indent(lines[start])
        # The header ends at the first line whose brackets close and that ends with ':'.
        depth, head_end = 0, start
        for i in range(start, hi):
            text = lines[i].split("#")[0].rstrip()
            depth += sum(text.count(c) for c in "([{") - sum(text.count(c) for c in ")]}")
            head_end = i
            if depth <= 0 and text.endswith(":"):
                break
        end = head_end + 1
        for i in range(head_end + 1, len(lines)):
            if _code(lines[i]) and _indent(lines[i]) <= ind:
                break
            if _code(lines[i]):
                end = i + 1
        lo, hi, outer = start + 1, end, ind
    while start > 0 and lines[start - 1].lstrip().startswith("@") and _indent(lines[start - 1]) == ind:
        start -= 1
    return start, hi


def exercise_span(text: str, ex: Exercise) -> tuple[int, int] | None:
    """0-based [first, last) of the lines that hold exercise ``ex`` in ``text``: its whole
    ``def`` with decorators."""
    lines = text.splitlines(keepends=True)
    try:
        fn = find_function(ast.parse(text), ex.qualname)
        span = None if fn is None else (
            (fn.decorator_list[0].lineno if fn.decorator_list else fn.lineno) - 1, fn.end_lineno)
    except SyntaxError:
        span = rough_span(lines, ex.qualname)
    return span


def solution_text(ex: Exercise) -> str:
    return (ROOT / ex.package / ex.file).read_text(encoding="utf-8")


def solution_lines(ex: Exercise) -> list[str]:
    """The repository's lines for the span ``exercise_span`` finds."""
    text = solution_text(ex)
    first, last = exercise_span(text, ex)
    return text.splitlines(keepends=True)[first:last]


def with_solution(text: str, ex: Exercise) -> str | None:
    """``text`` with exercise ``ex``'s code replaced by the solution's; None if not found."""
    span = exercise_span(text, ex)
    if span is None:
        return None
    lines = text.splitlines(keepends=True)
    return "".join(lines[:span[0]] + solution_lines(ex) + lines[span[1]:])


def same_code(a: str, b: str) -> bool:
    """Whether two pieces of Python (a ``def``, or statements) are the same statements."""
    def tree(text: str) -> str | None:
        try:
            return ast.dump(ast.parse(textwrap.dedent(text)))
        except SyntaxError:
            return None
    ta = tree(a)
    return ta is not None and ta == tree(b)


# --- the snapshot that is graded, and its syntax errors (in the grader's process) ------


def preflight(package_dir: Path, stage: int, learner: Path) -> dict:
    """Make every file of the snapshot ``package_dir`` compile: a syntax error inside an
    exercise fails it (the solution's code stands in); one outside the exercises puts the
    repository's file in its place, and that file's exercises wait. ``learner``: the
    learner's package folder, for the messages."""
    found = {"failed": {}, "waiting": {}, "notes": []}
    for path in sorted(package_dir.rglob("*.py")):
        rel = path.relative_to(package_dir).as_posix()
        text = original = path.read_text(encoding="utf-8", errors="replace")
        mine = [ex for ex in exercises(stage) if ex.file == rel]
        for _ in range(len(mine) + 1):
            try:
                compile(text, str(path), "exec")
                break
            except SyntaxError as e:
                line = e.lineno or 0
                where = f"{learner.name}/{rel} line {line}"
                problem = f"syntax error at {where}: {plain_syntax(e.msg)}"
                inside = next((ex for ex in mine if ex.id not in found["failed"]
                               and (span := exercise_span(text, ex)) and span[0] < line <= span[1]),
                              None)
                patched = inside and with_solution(text, inside)
                if patched:  # the exercise fails; the solution's code stands in for it
                    code = (_without_comments(text.splitlines()[line - 1])
                            if 0 < line <= text.count("\n") + 1 else "")
                    found["failed"][inside.id] = {
                        "kind": "syntax", "where": where,
                        "text": f"{problem} (inside exercise {inside.id}, {inside.qualname})"
                                + (f": {code}" if code else "")}
                    text = patched
                    continue
                # Outside every exercise: the file's exercises wait, the repository's file
                # stands in meanwhile.
                solution = ROOT / STAGES[stage] / rel
                blocked = [ex.id for ex in mine if ex.id not in found["failed"]]
                for ex_id in blocked:
                    found["waiting"][ex_id] = (
                        f"waiting for {learner.name}/{rel} to compile: the syntax error at line "
                        f"{line} (above) is outside the exercises")
                found["notes"].append(
                    problem + (f" (outside the exercises: blocks {', '.join(blocked)})" if blocked
                               else "")
                    + (f"; the repository's {rel} stands in for now" if solution.is_file() else ""))
                text = solution.read_text(encoding="utf-8") if solution.is_file() else original
                break
        if text != original:
            path.write_text(text, encoding="utf-8")
    return found


# Python's words for a syntax error, and the same in plain words.
SYNTAX_WORDS = (
    (r"expected ':'", "a ':' is missing at the end of this line (after an if, for, while, def, "
                      "else, ...)"),
    (r"invalid syntax\. Maybe you meant '==' or ':=' instead of '='\?",
     "a single = where a condition needs == (= stores a value, == compares two)"),
    (r"invalid syntax", "Python cannot read this line: a misspelled word, or a bracket, comma or "
                        "operator too many or missing?"),
    (r"expected an indented block after '?(\w+)'? statement on line (\d+)",
     r"the \1 on line \2 has no indented block under it"),
    (r"unindent does not match any outer indentation level",
     "the indentation of this line matches no block around it (is a line above it indented too "
     "far, or are tabs mixed with spaces?)"),
    (r"unexpected indent", "this line is indented further than the block it is in (no if, for, "
                           "while or def above it opens a deeper block)"),
    (r"unterminated string literal.*", "a string is not closed: a quote is missing"),
    (r"unmatched '([)\]}])'", r"a closing \1 with no opening bracket before it (one too many?)"),
)


def plain_syntax(msg: str) -> str:
    """Python's message for a syntax error, in plain words."""
    for pattern, words in SYNTAX_WORDS:
        if re.fullmatch(pattern, msg):
            return re.sub(pattern, words, msg)
    return msg


def snapshot(folder: Path, stages: list[int], dest: Path) -> dict[int, dict]:
    """Copy the learner's stage packages into ``dest``; their syntax errors, per stage."""
    found = {}
    for n in stages:
        src = folder / STAGES[n]
        shutil.copytree(src, dest / STAGES[n],
                        ignore=shutil.ignore_patterns("__pycache__", "*.pt", "*.pyc"))
        found[n] = preflight(dest / STAGES[n], n, src)
    return found


# --- running the tests (in the grader's process) --------------------------------------

BEAT = struct.Struct("<d16s16s")  # a test's start (0: none running); running and last exercise
SPOT = 256  # after BEAT: where the learner's code was last seen running ("pkg/file.py:line")
BEAT_SIZE = 1024  # BEAT, SPOT, then the test's node id


def _read_beat(path: Path) -> tuple[float, str, str, str, str]:
    raw = path.read_bytes()[:BEAT_SIZE].ljust(BEAT_SIZE, b"\0")
    started, running, last = BEAT.unpack_from(raw)
    spot = raw[BEAT.size:BEAT.size + SPOT].split(b"\0")[0].decode("utf-8", "replace")
    nodeid = raw[BEAT.size + SPOT:].split(b"\0")[0].decode("utf-8", "replace")
    return (started, running.rstrip(b"\0").decode(), last.rstrip(b"\0").decode(), nodeid,
            spot)


def enclosing_loop(path: Path, line: int) -> tuple[int, str] | None:
    """The innermost ``for`` or ``while`` of the file at ``path`` whose body holds ``line``
    (1-based), inside the same function: its line and its first line of code."""
    try:
        text = path.read_text(encoding="utf-8")
        tree = ast.parse(text)
    except (OSError, SyntaxError, ValueError):
        return None
    found = None

    def visit(node: ast.AST) -> None:
        nonlocal found
        for child in ast.iter_child_nodes(node):
            if not (child.lineno <= line <= (child.end_lineno or child.lineno)
                    if hasattr(child, "lineno") else True):
                continue
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                found = None  # a loop around a call of this function is not this loop
            if isinstance(child, (ast.For, ast.AsyncFor, ast.While)):
                found = child
            visit(child)

    visit(tree)
    if found is None:
        return None
    return found.lineno, text.splitlines()[found.lineno - 1].strip()


def where_it_ran(spot: str, folder: Path) -> str:
    """'at pkg/file.py line N, inside the loop `...` (line M)': where the learner's code was
    (``spot``: 'pkg/file.py:N', ``folder``: the packages' folder), in words."""
    path, _, line = spot.rpartition(":")
    if not path or not line.isdigit():
        return ""
    loop = enclosing_loop(folder / path, int(line))
    if loop and loop[0] == int(line):
        return f"at the loop `{loop[1]}` ({path} line {line})"
    return f"at {path} line {line}" + (f", inside the loop `{loop[1]}` (line {loop[0]})" if loop
                                       else "")


# --- limits that work everywhere ----------------------------------------------------
# The time limit: on POSIX a SIGALRM in the test process stops the learner's code; where
# there is no SIGALRM (Windows) a watchdog thread of the test process does it (TIMER).
# Either way the grader kills a test that will not stop, GRACE seconds later. The memory
# limit (MEMORY): the grader reads the test process's memory in /proc (Linux); without
# /proc the test process watches its own peak with Python's resource module (macOS, the
# BSDs) and ends itself; with neither (Windows) the memory limit is off, and says so.
PROC = Path("/proc")
OVER_MEMORY = 76  # the exit status of a test process that found itself past the memory limit
REPEAT = 2.0  # seconds between two stops of learner's code that catches the first


def time_limit_kind() -> str:
    """'signal' (SIGALRM and setitimer: POSIX) or 'thread' (a watchdog thread: elsewhere)."""
    return "signal" if hasattr(signal, "SIGALRM") and hasattr(signal, "setitimer") else "thread"


def memory_guard() -> str | None:
    """How the memory limit is watched on this machine: 'proc' (the grader reads the test
    process's memory in /proc), 'self' (the test process watches its own peak through the
    resource module), or None (neither is there, as on Windows: the limit is off)."""
    if (PROC / str(os.getpid()) / "statm").is_file():
        return "proc"
    try:
        import resource  # noqa: F401 (POSIX only)
    except ImportError:
        return None
    return "self"


MEMORY_GUARD_WORDS = {  # how the memory limit is kept, as --help and the report say it
    "proc": "watched through /proc",
    "self": "watched by the test process itself (its peak, through Python's resource module)",
    None: "off on this machine: it has neither /proc nor Python's resource module (as on "
          "Windows), so only the time limit stops a test that grows",
}


def _rss(pid: int) -> int:
    """Resident memory of a process in bytes (0 where /proc is not there)."""
    try:
        pages = int((PROC / str(pid) / "statm").read_text().split()[1])
    except (OSError, ValueError, IndexError):
        return 0
    return pages * os.sysconf("SC_PAGE_SIZE")


def _peak_rss() -> int:
    """This process's peak resident memory in bytes, through the resource module (0 where
    there is none)."""
    try:
        import resource
    except ImportError:
        return 0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024  # macOS: bytes; Linux, BSD: KiB


def _kill(proc: subprocess.Popen) -> None:
    """The test process and everything it started (its own session, where there are
    sessions: os.killpg is POSIX; elsewhere the process itself)."""
    if hasattr(os, "killpg"):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(Exception):
        proc.kill()
    proc.wait()


def _watch(proc: subprocess.Popen, beat: Path, time_limit: float, memory_limit: float) -> dict | None:
    """Wait for the test process; kill it when a test outlives the time limit by GRACE
    (stuck where it cannot be stopped) or it outgrows the memory limit. What was killed."""
    while True:
        try:
            proc.wait(timeout=0.2)
            return None
        except subprocess.TimeoutExpired:
            pass
        started, running, last, nodeid, spot = _read_beat(beat)
        rss = _rss(proc.pid)
        why = None
        if started and time.time() - started > time_limit + GRACE:
            why = "time"
        elif rss > memory_limit * 2**30:
            why = "memory"
        if why:
            _kill(proc)
            return {"why": why, "exercise": running or last, "running": bool(running),
                    "nodeid": nodeid, "rss": rss, "spot": spot, "seconds": time.time() - started}


def _killed_row(killed: dict, time_limit: float, memory_limit: float, rc: int | None,
                folder: Path | None = None) -> dict:
    """The row of a test whose process was killed (or died), blaming the exercise whose
    code was running (or ran last); ``folder``: the packages, to say where it was."""
    ex = killed["exercise"]
    who = f"your {BY_ID[ex].qualname} (exercise {ex})" if ex else "the test"
    spot = where_it_ran(killed.get("spot") or "", folder) if folder and ex else ""
    in_loop = "the loop" in spot
    seconds = killed.get("seconds") or 0.0
    text = {"time": f"time limit: {who} ran more than {time_limit:.0f} s and did not stop when "
                    "told to, so the test process was killed"
                    + (f"; it was {spot}: does that loop ever end?" if in_loop else
                       f"; it was {spot}" if spot else "")
                    + ("" if in_loop else " (an endless loop?)"),
            "memory": f"memory limit: the tests grew past {memory_limit:g} GiB"
                      + (f" in {seconds:.0f} s" if 0 < seconds < 1e6 else "")
                      + f" while running {who}, so the test process was killed"
                      + (f"; it was {spot}: a loop that never ends, keeping a little more "
                         "each time round (a longer tensor, a longer list), fills the memory "
                         "like this; does that loop stop when it should?" if in_loop else
                         f"; it was {spot}" if spot else "")
                      + ("" if in_loop else ": does something grow without end (a loop that "
                         "never stops?), or is a tensor far bigger than it should be?"),
            "crash": f"the test process died (exit status {rc}) while running {who}"
                     + (f"; it was {spot}" if spot else "")}[killed["why"]]
    message = {"kind": "limit", "text": text, "where": None}
    row = {"nodeid": killed["nodeid"], "outcome": "failed", "seconds": 0.0,
           "reached": [ex] if ex else [], "verdicts": {}, "other": None, "judged": {}}
    if ex:
        row["verdicts"][ex] = {"outcome": "failed", "message": message}
        row["judged"][ex] = message
    else:
        row["other"] = message
    return row


def test_files(stages: list[int]) -> list[str]:
    """The test files ``grade`` runs for ``stages``: the stage's in-process tests, the
    exercises' own first (they name the mistakes: a learner's code that another test
    stops at a limit runs no more, and those tests would not see it)."""
    return sorted((str(p.relative_to(ROOT)) for n in stages
                   for p in (ROOT / "tests").glob(f"test_stage{n}_*.py")
                   if not p.name.endswith(END_TO_END)),
                  key=lambda name: (not name.endswith("_exercises.py"), name))


def run_tests(folder: Path, stages: list[int], pytest_args: list[str] | None = None,
              verbose: bool = False, time_limit: float = TIME_LIMIT,
              memory_limit: float = MEMORY_LIMIT) -> dict:
    """Run the tests of ``stages`` on a snapshot of the packages in ``folder``; the record.

    ``pytest_args``: node ids or options that narrow the run (the tests use them).
    The record: ``tests`` (one row per test: ``verdicts`` per exercise of the learner's
    that ran, ``reached``: every exercise it reached, ``other``: a failure that is no
    exercise's), ``preflight`` (per stage: syntax errors), ``errors``, ``imported``.
    """
    folder = folder.resolve()
    tmp = Path(tempfile.mkdtemp(prefix="workbook-grade-"))
    try:
        return _run_tests(folder, stages, pytest_args, verbose, time_limit, memory_limit, tmp)
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C: no traceback either
        raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _run_tests(folder: Path, stages: list[int], pytest_args: list[str] | None, verbose: bool,
               time_limit: float, memory_limit: float, tmp: Path) -> dict:
    work = tmp / "work"
    found = snapshot(folder, stages, work)
    record, beat, log = tmp / "record.jsonl", tmp / "beat", tmp / "pytest.log"
    record.touch()
    guard = memory_guard()
    settings = {"folder": str(work), "learner": str(folder), "stages": stages,
                "record": str(record), "beat": str(beat), "time_limit": time_limit,
                "timer": time_limit_kind(), "memory": guard, "memory_limit": memory_limit,
                "judged": {}, "done": []}
    args = pytest_args or [*test_files(stages), "tests/test_doctests.py",
                           *(f"--deselect={h}" for h in HEAVY)]
    replaced: set[str] = set()
    rows: dict[str, dict] = {}  # node id -> row, from the test processes' records
    killed_rows: dict[str, dict] = {}  # node id -> the verdict of a killed run of it
    end, proc = None, None
    for _attempt in range(2 * len(EXERCISES) + 4):
        known = len(rows)
        beat.write_bytes(b"\0" * BEAT_SIZE)
        (tmp / "settings.json").write_text(json.dumps(settings), encoding="utf-8")
        cmd = [sys.executable, "-m", "pytest", *args, "-p", "tools.workbook",
               "-p", "no:cacheprovider", "-q", "--no-header", "-p", "no:faulthandler",
               "--basetemp", str(tmp / "pytest"), "-o", "addopts=--strict-markers"]
        env = {**os.environ, ENV: str(tmp / "settings.json"), "PYTHONDONTWRITEBYTECODE": "1"}
        env.setdefault("OMP_NUM_THREADS", "1")
        with log.open("ab") as out:
            proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            killed = _watch(proc, beat, time_limit, memory_limit if guard == "proc" else math.inf)
        except BaseException:
            _kill(proc)
            raise
        if killed is None and proc.returncode == OVER_MEMORY:  # it found itself too big
            started, running, last, nodeid, spot = _read_beat(beat)
            killed = {"why": "memory", "exercise": running or last, "running": bool(running),
                      "nodeid": nodeid, "spot": spot,
                      "seconds": time.time() - started if started else 0.0}
        end = None
        for line in record.read_text(encoding="utf-8").splitlines():
            item = json.loads(line)
            if "nodeid" in item:
                rows[item["nodeid"]] = item
                settings["judged"].update(item.get("judged", {}))
            else:
                end = item
        settings["done"] = sorted(rows)
        if killed is None and end is None:
            started, running, last, nodeid, spot = _read_beat(beat)
            if nodeid in rows and len(rows) > known:  # it ended itself after a test that
                continue  # would not stop, and wrote that test's row: go on
            if not (started and nodeid):
                break
            # It died on its own while a test ran: a crash in the learner's code?
            killed = {"why": "crash", "exercise": running or last, "nodeid": nodeid,
                      "spot": spot}
        if killed is not None:
            row = _killed_row(killed, time_limit, memory_limit, proc.returncode, work)
            settings["judged"].update(row["judged"])
            if killed["exercise"]:  # run the test again, with the solution's code there
                earlier = killed_rows.setdefault(row["nodeid"], row)
                earlier["verdicts"].update(row["verdicts"])
            else:  # the test itself hangs: never again
                rows[row["nodeid"]] = row
            settings["done"] = sorted(rows)
            continue
        problem = end and end.get("import_error")
        if problem and problem.get("file") and problem["file"] not in replaced:
            # A module of the learner's that does not import: the repository's stands in.
            pkg, rel = problem["file"].split("/", 1)
            n = next((k for k, v in STAGES.items() if v == pkg), None)
            if n in found and (ROOT / pkg / rel).is_file():
                shutil.copyfile(ROOT / pkg / rel, work / pkg / rel)
                replaced.add(problem["file"])
                blocked = [ex.id for ex in exercises(n) if ex.file == rel
                           and ex.id not in found[n]["failed"]]
                for ex_id in blocked:
                    found[n]["waiting"][ex_id] = (
                        f"waiting for {pkg}/{rel} to import: {problem['text'].split(':')[0]}"
                        + (f" at line {problem['line']}" if problem.get("line") else "")
                        + " (above), outside the exercises")
                found[n]["notes"].append(
                    f"{pkg}/{rel} does not import: {problem['text']}"
                    + (f" (blocks {', '.join(blocked)})" if blocked else "")
                    + f"; the repository's {rel} stands in for now")
                record.write_text("", encoding="utf-8")
                rows.clear()
                settings["done"] = []
                continue
        break
    for nodeid, row in killed_rows.items():  # what the killed run found, with the run after it
        again = rows.setdefault(nodeid, {**row, "verdicts": {}, "reached": []})
        again["verdicts"].update(row["verdicts"])
        again["reached"] = sorted({*again["reached"], *row["reached"]})
        again["outcome"] = "failed"
    if verbose:
        print(log.read_text(encoding="utf-8", errors="replace")[-20000:])
    if end is None:
        raise WorkbookError("pytest did not run:\n"
                            + log.read_text(encoding="utf-8", errors="replace")[-3000:])
    for pkg, path in end.get("imported", {}).items():
        if not Path(path).resolve().is_relative_to(work):
            raise WorkbookError(f"the tests imported {pkg} from {path}, not from {folder}")
    learner_prefix = str(work) + os.sep
    result = {"tests": list(rows.values()), "errors": end.get("errors", []),
              "imported": {k: str(folder / Path(v).relative_to(work))
                           for k, v in end.get("imported", {}).items()},
              "preflight": {n: found[n] for n in stages},
              "judged": {**end.get("judged", {}), **settings["judged"]},
              "returncode": proc.returncode, "import_error": end.get("import_error"),
              "memory_guard": guard}
    return json.loads(json.dumps(result).replace(json.dumps(learner_prefix)[1:-1],
                                                 json.dumps(str(folder) + os.sep)[1:-1]))


# --- judging (in the grader's process) -------------------------------------------------

# Which failure of an exercise the report shows: a syntax error; else the message of an
# exercise's own test (it names the mistake, also that of a loop that does not end); else a
# time or memory limit; else an error in the learner's code; else any other test's.
RANK = {"syntax": 0, "exercise-test": 1, "limit": 2, "in-your-code": 3, "message": 4,
        "error": 5, "assert": 6}


def _rank(message: dict, nodeid: str) -> int:
    kind = message.get("kind", "assert")
    if kind == "message" and "_exercises.py" in nodeid:
        return RANK["exercise-test"]
    if kind == "error" and message.get("where"):
        return RANK["in-your-code"]
    return RANK.get(kind, 5)


def judge(result: dict, stage: int, package_dir: Path) -> list[dict]:
    """Per exercise: status (passed, failed, todo, waiting), the tests behind it, a message."""
    tests = result["tests"]
    found = result["preflight"].get(stage) or result["preflight"].get(str(stage)) or {}
    rows = []
    for ex in exercises(stage):
        reached = [t for t in tests if ex.id in t["reached"]]
        graded = [t for t in tests if ex.id in t["verdicts"]]
        failed = [t for t in graded if t["verdicts"][ex.id]["outcome"] == "failed"]
        row = {"id": ex.id, "title": ex.title, "tests": len(graded), "reached": len(reached),
               "failed": len(failed), "message": "", "where": ""}
        if ex.id in found.get("failed", {}):  # it does not compile: no test ran it
            row.update(status="failed", message=found["failed"][ex.id]["text"], tests=0,
                       failed=0, compiles=False)
        elif ex.id in found.get("waiting", {}):
            row.update(status="waiting", message=found["waiting"][ex.id])
        elif is_open(package_dir, ex):
            row.update(status="todo", message=(
                f"{ex.file}: {ex.qualname} still raises NotImplementedError"))
        elif failed:
            best = min(failed, key=lambda t: (_rank(t["verdicts"][ex.id]["message"], t["nodeid"]),
                                              tests.index(t)))
            message = best["verdicts"][ex.id]["message"]
            row.update(status="failed", message=message["text"],
                       where=message.get("where") or "", test=best["nodeid"].split(" ")[0])
        elif graded:
            row["status"] = "passed"
        else:  # the function is gone (renamed?), or no test ran it
            row.update(status="failed", message=result.get("judged", {}).get(ex.id, {}).get(
                "text", f"no test reached your {ex.qualname}: is it still in {ex.file}, under "
                        "that name?"))
        rows.append(row)
    return rows


def summary(result: dict, rows: list[dict]) -> tuple[list[str], bool]:
    """The grader's report as lines, and whether everything passed."""
    lines = []
    width = max(len(r["title"]) for r in rows)
    stage = BY_ID[rows[0]["id"]].stage
    found = result["preflight"].get(stage) or result["preflight"].get(str(stage)) or {}
    for note in found.get("notes", []):
        lines.append(f"  {note}")
    for r in rows:
        ex = BY_ID[r["id"]]
        detail = {"todo": f"{tests_(r['reached'])} will grade it",
                  "failed": ("not run: it does not compile" if r.get("compiles") is False
                             else f"{r['failed']} of {tests_(r['tests'])} "
                             + ("fails" if r["failed"] == 1 else "fail") if r["tests"]
                             else "not graded"),
                  "passed": f"{tests_(r['tests'])} " + ("passes" if r["tests"] == 1 else "pass"),
                  "waiting": "not graded yet"}[r["status"]]
        lines.append(f"  {r['id']}  {r['title']:<{width}}  {r['status'].upper():<7}  {detail}")
        if r["status"] != "passed":
            lines.append(f"        {shorten(r['message'], 400)}")
            where = "; ".join(x for x in (f"test: {r['test']}" if r.get("test") else "",
                                          f"your code: {r['where']}" if r.get("where") else "")
                              if x)
            if where:
                lines.append(f"        ({where})")
            if r["status"] in ("failed", "todo"):
                lines.append(f"        hint: {ex.hint}")
            lines.append(f"        read: {ex.docs}")
            lines.append(f"        中文: {ex.docs_zh}")
    tests = result["tests"]
    others = [t for t in tests if t.get("other")]
    for t in others[:5]:
        lines.append(f"  failed outside the exercises (also with the solution's code): "
                     f"{t['nodeid']}: {shorten(t['other']['text'], 200)}")
    if len(others) > 5:
        lines.append(f"  ... and {len(others) - 5} more tests that fail outside the exercises")
    for e in result["errors"][:5]:
        lines.append(f"  could not collect: {shorten(e, 500)}")
    if "memory_guard" in result and result["memory_guard"] is None:
        lines.append(f"  (the memory limit is {MEMORY_GUARD_WORDS[None]})")
    counts = {s: sum(r["status"] == s for r in rows) for s in ("passed", "failed", "todo", "waiting")}
    n_failed = sum(t["outcome"] == "failed" for t in tests)
    lines.append(
        f"Total: {counts['passed']} of {len(rows)} exercises pass"
        + "".join(f", {counts[s]} {word}" for s, word in (("failed", "failed"), ("todo", "to do"),
                                                           ("waiting", "waiting")) if counts[s])
        + f"; {len(tests)} tests ran, {n_failed} failed"
        + (" (the open exercises ran the solution's code)." if counts["todo"] else "."))
    ok = (counts["passed"] == len(rows) and n_failed == 0 and not result["errors"]
          and not found.get("notes") and tests != [])
    return lines, ok


def tests_(n: int) -> str:
    return f"{n} test" if n == 1 else f"{n} tests"


def shorten(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def grade(stage: int, folder: Path, verbose: bool = False, time_limit: float = TIME_LIMIT,
          memory_limit: float = MEMORY_LIMIT) -> bool:
    package_dir = folder / STAGES[stage]
    if not (package_dir / "__init__.py").is_file():
        raise WorkbookError(f"no workbook at {package_dir}; make one first: "
                            f"make workbook STAGE={stage} (or python tools/workbook.py make "
                            f"--stage {stage} --dir {folder})")
    print(f"Grading {package_dir} with the tests of stage {stage}, one exercise at a time "
          f"(the others run the solution's code) ...", flush=True)
    result = run_tests(folder, [stage], verbose=verbose, time_limit=time_limit,
                       memory_limit=memory_limit)
    lines, ok = summary(result, judge(result, stage, package_dir))
    print("\n".join(lines))
    return ok


# --- messages in plain words (in the test process) -------------------------------------


def _matching(text: str, i: int) -> int:
    """Index after the bracket that closes the one at ``text[i]``."""
    depth = 0
    for j in range(i, len(text)):
        depth += {"(": 1, "[": 1, "{": 1, ")": -1, "]": -1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return j + 1
    return len(text)


def _short_tensors(text: str) -> str:
    out, i = [], 0
    while (j := text.find("tensor(", i)) >= 0:
        k = _matching(text, j + 6)
        inner = text[j + 7:k - 1]
        out.append(text[i:j])
        out.append(f"tensor({inner})" if len(inner) <= 40 and "\n" not in inner else "tensor(…)")
        i = k
    return "".join(out) + text[i:]


def _top_level_and(text: str) -> list[str]:
    parts, depth, start, i = [], 0, 0, 0
    while i < len(text):
        c = text[i]
        depth += {"(": 1, "[": 1, "{": 1, ")": -1, "]": -1, "}": -1}.get(c, 0)
        if depth == 0 and text.startswith(" and ", i):
            parts.append(text[start:i])
            start = i = i + 5
            continue
        i += 1
    return [*parts, text[start:]]


def _a(kind: str) -> str:
    """'None', 'an int', 'a float': a Python type's name as a noun."""
    return "None" if kind == "NoneType" else f"{'an' if kind[:1] in 'aeiou' else 'a'} {kind}"


def _none_compared(m: re.Match) -> str:
    return (f"None was compared with a number ({_a(m[2])} {m[1]} {_a(m[3])}): an argument whose "
            "default is None (top_k, for one) means 'not given'; check `is not None` before "
            "comparing it")


# Errors of torch and Python in their words, and the same in plain words (with their
# numbers), put in their place wherever a message holds them: the learner's mistake said
# from the learner's side (the error's name, RuntimeError or TypeError, stays before it).
RAW_ERRORS: tuple[tuple[str, object], ...] = (
    (r"view size is not compatible with input tensor's size and stride \(at least one dimension "
     r"spans across two contiguous subspaces\)\. Use \.reshape\(\.\.\.\) instead\.?",
     ".view() cannot reshape a tensor whose numbers are not stored in row order, as after a "
     "transpose: call .contiguous() before .view() (or use .reshape())"),
    (r"shape '\[([-\d, ]+)\]' is invalid for input of size (\d+)",
     lambda m: f"a .view() or .reshape() to shape ({m[1]}) cannot hold the tensor's {m[2]} "
               "numbers"),
    (r"mat1 and mat2 shapes cannot be multiplied \((\d+)x(\d+) and (\d+)x(\d+)\)",
     lambda m: f"a matrix product got shapes that do not fit, ({m[1]} x {m[2]}) times ({m[3]} x "
               f"{m[4]}): the first one's last size ({m[2]}) must equal the second one's first "
               f"({m[3]}); an nn.Linear({m[3]}, ...) reads inputs whose last size is {m[3]}"),
    (r"Expected size for first two dimensions of batch2 tensor to be: \[(\d+), (\d+)\] but got: "
     r"\[(\d+), (\d+)\]\.?",
     lambda m: f"a matrix product (@) got shapes that do not fit: the left matrices have {m[2]} "
               f"columns, the right ones {m[4]} rows, and the two must be equal (is a "
               ".transpose(-2, -1) missing?)"),
    (r"The size of tensor a \((\d+)\) must match the size of tensor b \((\d+)\) at non-singleton "
     r"dimension (\d+)",
     lambda m: f"two tensors of different shapes were combined (+, *, masked_fill, ...): their "
               f"dimension {m[3]} is {m[1]} in one and {m[2]} in the other"),
    (r"The expanded size of the tensor \((\d+)\) must match the existing size \((\d+)\) at "
     r"non-singleton dimension (\d+)\.\s+Target sizes: \[([\d, ]*)\]\.\s+"
     r"Tensor sizes: \[([\d, ]*)\]",
     lambda m: f"values of shape ({m[5]}) were put where shape ({m[4]}) goes (an assignment to a "
               f"slice, or an expand): their dimension {m[3]} is {m[2]}, and it should be {m[1]}"),
    (r"stack expects each tensor to be equal size, but got \[([\d, ]*)\] at entry \d+ and "
     r"\[([\d, ]*)\] at entry \d+",
     lambda m: f"torch.stack got tensors of different shapes, ({m[1]}) and ({m[2]}) (a slice "
               "that runs past the end of the data comes out shorter)"),
    (r"'([<>]=?)' not supported between instances of '(NoneType)' and '(\w+)'", _none_compared),
    (r"'([<>]=?)' not supported between instances of '(\w+)' and '(NoneType)'", _none_compared),
    (r"unsupported operand type\(s\) for ([^:]+): '(\w+)' and '(\w+)'",
     lambda m: f"None was used in arithmetic ({_a(m[2])} {m[1]} {_a(m[3])}): a value here is "
               "None (an argument not given, or a function that returns nothing)"
     if "NoneType" in (m[2], m[3]) else m[0]),
    (r"(\w+)\(\): argument '(\w+)' \(position \d+\) must be (\w+), not NoneType",
     lambda m: f"torch.{m[1]} got None for its argument {m[2]}, which must be a number: an "
               "argument whose default is None (top_k, for one) means 'not given'; check "
               "`is not None` first"),
    (r"probability tensor contains either `inf`, `nan` or element < 0",
     "torch.multinomial got probabilities that hold nan or inf: the logits overflowed (a number "
     "too big for its float becomes inf, and inf - inf is nan), or a whole row was -inf"),
    (r"Dimension out of range \(expected to be in range of \[(-?\d+), (-?\d+)\], but got (-?\d+)\)",
     lambda m: f"dim={m[3]} names a dimension the tensor does not have: it has {int(m[2]) + 1} "
               f"(dim 0 to {m[2]}, or {m[1]} to -1)"),
    (r"index out of range in self",
     "a table (an nn.Embedding) was read at an index past its end: an id of vocab_size or more, "
     "or a position of block_size or more?"),
    (r"Expected target size \[([\d, ]+)\], got \[([\d, ]+)\]",
     lambda m: "F.cross_entropy reads (B, T, V) logits as (batch, classes, ...), so it "
               f"wanted targets of shape ({m[1]}), not ({m[2]}): flatten the logits to "
               "(B*T, V) and the targets to (B*T,) first"),
    (r"random_ expects 'from' to be less than 'to', but got from=(-?\d+) >= to=(-?\d+)",
     lambda m: f"torch.randint was asked for a number from {m[1]} up to (not including) "
               f"{m[2]}, and there is none"),
    (r"Expected tensor for argument #1 'indices' to have one of the following scalar types: "
     r"Long, Int; but got ([\w.]+) instead \(while checking arguments for embedding\)",
     lambda m: f"an nn.Embedding was read with ids of the wrong type ({m[1]}): ids must be "
               "integers (torch.long)"),
    (r"Cannot copy out of meta tensor; no data!|Tensor\.item\(\) cannot be called on meta tensors",
     "a value was read from a tensor on the 'meta' device, which has shapes but no values (the "
     "test uses it to see where tensors land without a GPU): compute on the data as it comes, "
     "and move the result to the device at the end"),
    (r"Expected all tensors to be on the same device, but found at least two devices, "
     r"([\w:]+) and ([\w:]+)!|Tensor on device ([\w:]+) is not on the expected device ([\w:]+)!"
     r"|Expected all tensors to be on the same device, but got \w+ is on ([\w:]+), different "
     r"from other tensors on ([\w:]+) \(when checking argument[^)]*\)",
     lambda m: "tensors on two devices, {} and {}, were used together: move them to one device "
               "(.to(device)) first".format(*[g for g in m.groups() if g])),
    (r"stack expects a non-empty TensorList",
     "torch.stack got an empty list: there were no tensors to stack (a batch of 0?)"),
    (r"name '(\w+)' is not defined",
     lambda m: f"the name {m[1]} is not defined here: misspelled, or used without its import "
               f"at the top of the file (import {m[1]}, or from ... import {m[1]})?"),
    (r"Boolean value of Tensor with more than one (?:value|element) is ambiguous",
     "a tensor of many numbers was used as one True or False (in an if, a while, and, or): "
     "use .all() or .any(), or .item() of a one-number tensor"),
    (r"element 0 of tensors does not require grad and does not have a grad_fn",
     "backward() was called on a loss that does not depend on the weights through torch "
     "operations (a .item(), a .detach() or a torch.tensor(...) on the way cuts it off)"),
)


def plain_errors(text: str) -> str:
    """``text`` with the raw errors of torch and Python in it said in plain words."""
    for pattern, words in RAW_ERRORS:
        text = re.sub(pattern, words if callable(words) else lambda m, w=words: w, text)
    return text


def plain(text: str) -> str:
    """A test's failure message without pytest's machinery: no ``+ where`` lines, no
    object addresses, no tensor dumps, only the failing part of an ``and``."""
    text = re.sub(r"<built-in method (\w+) of type object at 0x[0-9a-f]+>", r"torch.\1", text)
    text = re.sub(r"<(?:bound method|function) ([\w.<>]+?)(?: of .*?)? at 0x[0-9a-f]+>", r"\1", text)
    text = re.sub(r"<(?:[\w.]+\.)?(\w+) object at 0x[0-9a-f]+>", r"\1", text)
    text = re.sub(r" at 0x[0-9a-f]+", "", text)
    text = _short_tensors(text)
    lines = [line for line in text.splitlines()
             if not re.match(r"\s*\+\s+(where|and)\b", line) and line.strip() != "comparison failed"]
    text = "\n".join(lines).strip()
    pairs = re.findall(r"Obtained: (.*)\n\s*Expected: (.*)", text)
    if pairs:
        got, expected = pairs[-1]
        expected = _top_level_and(expected.rstrip(")"))[0]
        return f"expected {expected.strip()}, got {got.strip()}"
    first, _, rest = text.partition("\n")
    if first.startswith("assert (") and first.endswith(")"):
        clauses = _top_level_and(first[len("assert ("):-1])
        if len(clauses) > 1:
            first = f"assert {clauses[-1]}"  # `and` stops at the first false clause: the last shown
    if first.startswith("assert "):
        first = f"this check failed: {first[len('assert '):]}"
    return plain_errors(" ".join(f"{first}\n{rest}".split()))


# --- the pytest plugin (active only in a run started by run_tests) ------------------

_S: dict | None = None  # the settings
_TESTING = False  # a test is running (not collection)
_MODE: dict[str, bool] = {}  # exercise id -> run the learner's code (else the solution's)
_KIND: dict[str, str] = {}  # exercise id -> "own", "same" (the solution's code), "open"
_JUDGED: dict[str, dict] = {}  # exercise id -> why its learner's code no longer runs
_ENTERED: set[tuple[str, bool]] = set()  # (exercise, learner's code?) in this run
_STACK: list[str] = []  # the learner's exercises running now, innermost last
_RUN: dict = {}  # this run: last learner exercise, exception, time limit hit
_ALARMS = 0
_BEAT: mmap.mmap | None = None
_PACKAGES: dict[str, Path] = {}  # package -> its folder in the snapshot
_ERRORS: list[str] = []


class TimeLimit(BaseException):  # noqa: N818 (not an Exception: `except Exception` lets it pass)
    """A test ran longer than the grader's time limit."""


def _beat(started: float | None = None, nodeid: str | None = None) -> None:
    if _BEAT is None:
        return
    if started is not None:  # a new test (or none): no spot yet, and its node id
        start = BEAT.size + SPOT
        _BEAT[BEAT.size:BEAT_SIZE] = b"\0" * SPOT + (nodeid or "").encode()[
            :BEAT_SIZE - start - 1].ljust(BEAT_SIZE - start, b"\0")
    current = struct.unpack_from("<d", _BEAT, 0)[0] if started is None else started
    BEAT.pack_into(_BEAT, 0, current, (_STACK[-1] if _STACK else "").encode(),
                   (_RUN.get("last") or "").encode())


def _spot(frame, ex_id: str | None = None) -> str:
    """'pkg/file.py:line' in the learner's packages, in the stack that ends at ``frame``:
    the innermost frame of exercise ``ex_id``'s function, else the innermost of any; ''."""
    ex = BY_ID.get(ex_id or "")
    found = ""
    while frame is not None:
        path = Path(frame.f_code.co_filename)
        for pkg, folder in _PACKAGES.items():
            if path.is_relative_to(folder):
                rel = path.relative_to(folder).as_posix()
                here = f"{pkg}/{rel}:{frame.f_lineno}"
                if ex and pkg == ex.package and rel == ex.file and (
                        frame.f_code.co_name == ex.qualname.split(".")[-1]):
                    return here
                found = found or here
        frame = frame.f_back
    return found


def _watch_spot(main: int) -> None:
    """Note, a few times a second, where the learner's code is running (for a message if
    the process must be killed: a loop that never ends, a memory that grows)."""
    while True:
        time.sleep(0.25)
        if _BEAT is None or not _STACK:
            continue
        with contextlib.suppress(Exception):
            spot = _spot(sys._current_frames().get(main), _STACK[-1]).encode()[:SPOT - 1]
            _BEAT[BEAT.size:BEAT.size + SPOT] = spot.ljust(SPOT, b"\0")


def _enter(ex_id: str) -> None:
    _STACK.append(ex_id)
    _RUN["last"] = ex_id
    _beat()


def _leave() -> None:
    if _STACK:
        _STACK.pop()
    _beat()


def _watch_generator(ex_id: str, gen):
    """The learner's generator, noted as running while it runs."""
    try:
        while True:
            _enter(ex_id)
            try:
                item = next(gen)
            except StopIteration as stop:
                return stop.value
            finally:
                _leave()
            yield item
    finally:
        gen.close()


def _dispatcher(ex_id: str, learner, solution):
    def call(*args, **kwargs):
        mine = _MODE.get(ex_id, False)
        if _TESTING:
            _ENTERED.add((ex_id, mine))
        if not mine:
            return solution(*args, **kwargs)
        _enter(ex_id)
        try:
            result = learner(*args, **kwargs)
        finally:
            _leave()
        return _watch_generator(ex_id, result) if inspect.isgenerator(result) else result
    functools.update_wrapper(call, learner)
    call.__workbook_exercise__ = ex_id
    return call


def _compile_function(source: str, first_line: int, filename: str, name: str, namespace: dict,
                      owner: type | None):
    """The function ``name`` defined by ``source`` (which starts at line ``first_line`` of
    ``filename``), with ``namespace`` as its globals and ``owner`` as its class (so
    that ``super()`` works)."""
    body = textwrap.indent(textwrap.dedent(source), "    ")
    tree = ast.parse(f"def __workbook_factory__(__class__):\n{body}\n    return {name}\n")
    ast.increment_lineno(tree, first_line - 2)
    scope: dict = {}
    exec(compile(tree, filename, "exec"), namespace, scope)  # noqa: S102 (the solution's own code)
    return scope["__workbook_factory__"](owner)


def _missing_globals(ex: Exercise, module) -> None:
    """Names the solution's module imports that the learner's lacks (an import deleted),
    imported into the learner's module, so that the solution's code can run there."""
    tree = ast.parse(solution_text(ex))
    for node in tree.body:
        if not isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        names = [(a.asname or a.name).split(".")[0] for a in node.names]
        if all(n in vars(module) for n in names) or any(a.name == "*" for a in node.names):
            continue
        scope = {"__name__": module.__name__, "__package__": module.__package__}
        with contextlib.suppress(Exception):
            exec(compile(ast.Module([node], []), "<workbook>", "exec"), scope)  # noqa: S102
            for n in names:
                if n not in vars(module) and n in scope:
                    setattr(module, n, scope[n])


def _solution_variant(ex: Exercise, module, owner, learner_text: str):
    """The solution's version of the exercise's function, in the learner's module; and
    whether the learner's code is the solution's, statement for statement."""
    name = ex.qualname.split(".")[-1]
    cls = owner if isinstance(owner, type) else None
    learner_lines = learner_text.splitlines(keepends=True)
    fn = find_function(ast.parse(learner_text), ex.qualname)
    fn_first = (fn.decorator_list[0].lineno if fn.decorator_list else fn.lineno) - 1
    own = "".join(learner_lines[fn_first:fn.end_lineno])
    text = solution_text(ex)  # the solution's whole function
    sol = find_function(ast.parse(text), ex.qualname)
    sol_first = (sol.decorator_list[0].lineno if sol.decorator_list else sol.lineno) - 1
    source = "".join(text.splitlines(keepends=True)[sol_first:sol.end_lineno])
    same = same_code(own, source)
    first, filename = sol_first + 1, str(ROOT / ex.package / ex.file)
    _missing_globals(ex, module)
    made = _compile_function(source, first, filename, name, vars(module), cls)
    return (made.__func__ if isinstance(made, (staticmethod, classmethod)) else made), same


def _install(stages: list[int]) -> dict[str, str]:
    """Put a dispatcher in place of every exercise function of ``stages``; where imported from."""
    imported = {}
    for ex in EXERCISES:
        if ex.stage not in stages:
            continue
        module = importlib.import_module(ex.module)
        imported[ex.package] = sys.modules[ex.package].__file__
        _PACKAGES[ex.package] = Path(sys.modules[ex.package].__file__).parent
        *owners, name = ex.qualname.split(".")
        owner = module
        for part in owners:
            owner = getattr(owner, part, None)
        raw = vars(owner).get(name) if owner is not None else None
        text = Path(module.__file__).read_text(encoding="utf-8")
        if raw is None or find_function(ast.parse(text), ex.qualname) is None:
            _JUDGED[ex.id] = {"kind": "syntax", "text": (
                f"{ex.package}/{ex.file} has no {ex.qualname} any more: the tests need it "
                "under that name"), "where": None}
            continue
        learner = raw.__func__ if isinstance(raw, (staticmethod, classmethod)) else raw
        solution, same = _solution_variant(ex, module, owner, text)
        _KIND[ex.id] = "open" if ex.marker in text else "same" if same else "own"
        call = _dispatcher(ex.id, learner, solution)
        setattr(owner, name, type(raw)(call) if isinstance(raw, (staticmethod, classmethod)) else call)
        if owner is module:  # the same function imported by name into other modules
            for mod_name, mod in list(sys.modules.items()):
                if mod_name.startswith(f"{ex.package}.") and getattr(mod, name, None) is learner:
                    setattr(mod, name, call)
    return imported


def _learner_location(excinfo) -> str | None:
    """The innermost line of the learner's package in a traceback, as 'pkg/file line N'."""
    where = None
    for entry in excinfo.traceback:
        path = Path(str(entry.path))
        for pkg, folder in _PACKAGES.items():
            if path.is_relative_to(folder):
                rel = path.relative_to(folder).as_posix()
                where = f"{pkg}/{rel} line {entry.lineno + 1}, in {entry.name}"
                with contextlib.suppress(Exception):
                    code = _without_comments(str(entry.statement))
                    if code:
                        where += f": {shorten(code, 100)}"
    return where


def _without_comments(code: str) -> str:
    """A few lines of Python on one line, without their comments."""
    lines = code.splitlines()
    with contextlib.suppress(tokenize.TokenError, IndentationError, SyntaxError):
        for tok in tokenize.generate_tokens(io.StringIO(code).readline):
            if tok.type == tokenize.COMMENT:
                row, col = tok.start
                lines[row - 1] = lines[row - 1][:col]
    return " ".join(" ".join(lines).split())


def _doctest_detail(report) -> str:
    """The first failed example of a doctest run, from the captured output."""
    out = "\n".join(c for _, c in getattr(report, "sections", []))
    m = re.search(r"Failed example:\n(.*?)\n(?:Expected:\n(.*?)\nGot:\n(.*?)\n(?:\*{5}|\Z)|"
                  r"Exception raised:\n.*?\n(\w+(?:Error|Exception)[^\n]*))", out, re.S)
    if not m:
        return ""
    example = " ".join(m.group(1).split())
    if m.group(4):
        return f": {example} raised {m.group(4).strip()}"
    return (f": {example} should print {' '.join(m.group(2).split())}, "
            f"but printed {' '.join(m.group(3).split())}")


def _describe(item, reports) -> dict:
    """A failed run's message in plain words, and where in the learner's code it broke."""
    when, excinfo = _RUN.get("excinfo") or (None, None)
    report = next((r for r in reports if r.failed), None)
    if excinfo is None:
        text = report.longreprtext.strip().splitlines()[-1:] if report else ["failed"]
        return {"kind": "assert", "text": plain(" ".join(text)), "where": None}
    exc = excinfo.value
    where = _learner_location(excinfo)
    if isinstance(exc, TimeLimit):
        return {"kind": "limit", "text": str(exc), "where": where}
    if any(c.__name__ == "OutcomeException" for c in type(exc).__mro__):
        return {"kind": "message", "text": plain(str(exc)), "where": where}  # pytest.fail(...)
    if isinstance(exc, AssertionError):
        text = str(exc)
        if text and not text.startswith("assert "):
            custom = text.split("\nassert ")[0]
            if "test_doctests.py" in item.nodeid:
                custom += _doctest_detail(report)
            return {"kind": "message", "text": plain(custom), "where": where}
        statement = ""
        with contextlib.suppress(Exception):
            entry = next(e for e in reversed(excinfo.traceback)
                         if Path(str(e.path)).name.startswith("test_"))
            statement = " ".join(str(entry.statement).split())
        detail = plain(text) if text else ""
        if statement:
            detail = f"the test's check `{statement}` failed" + (
                f" ({detail.removeprefix('this check failed: ')})"
                if "==" in detail or "expected" in detail else "")
        return {"kind": "assert", "text": detail or "an assertion failed", "where": where}
    name = type(exc).__name__
    text = f"{name}: {exc}" if str(exc) else name
    if where:
        text = f"your code raised {text}"
    if when == "setup":
        text = f"while setting up the test: {text}"
    return {"kind": "error", "text": plain(text), "where": where}


def _on_alarm(signum, frame) -> None:
    """SIGALRM's handler (POSIX): stop the learner's code that outran the time limit."""
    text = _time_is_up(frame)
    if text is not None:
        raise TimeLimit(text)


def _time_is_up(frame) -> str | None:
    """The words of the TimeLimit that stops the learner's code running at ``frame`` now,
    or None if nothing is to be stopped (this process ends itself if the code keeps
    catching TimeLimit)."""
    global _ALARMS
    if _RUN.get("timeout") is not None and not _STACK:
        # Stopped once already, and no learner's code runs now: pytest is reporting the
        # failure (slowly, with a huge list still alive, say). Another TimeLimit there would
        # break pytest itself; a test that still will not stop is killed after GRACE.
        return None
    _ALARMS += 1
    culprit = _STACK[-1] if _STACK else _RUN.get("last")
    if _RUN.get("timeout") is None:
        _RUN["timeout"] = culprit or ""
    limit = _S["time_limit"]
    spot = where_it_ran(_spot(frame, culprit), Path(_S["folder"])) if _STACK else ""
    if _ALARMS > 5:  # it keeps catching TimeLimit: end this process, the grader goes on
        message = {"kind": "limit", "text": (
            f"time limit: {'your ' + BY_ID[culprit].qualname if culprit else 'the test'} ran "
            f"more than {limit:.0f} s and did not stop when told to (does it catch every "
            "exception?)" + (f"; it was {spot}" if spot else "")), "where": None}
        row = {"nodeid": _RUN["nodeid"], "outcome": "failed", "seconds": 0.0,
               "reached": [culprit] if culprit else [], "other": None if culprit else message,
               "verdicts": {culprit: {"outcome": "failed", "message": message}} if culprit else {},
               "judged": {culprit: message} if culprit else {}}
        _write(row)
        os._exit(75)
    what = f"your {BY_ID[culprit].qualname} (exercise {culprit})" if culprit else "the test"
    if "the loop" in spot:
        return (f"time limit: {what} was still running after {limit:.0f} s, {spot}: does that "
                "loop ever end (or is it much slower than it should be)?")
    return (f"time limit: {what} was still running after {limit:.0f} s"
            + (f", {spot}" if spot else "") + " (an endless loop, or much slower than it should be?)")


class _Stopped(TimeLimit):
    """The TimeLimit the watchdog thread raises in the main thread (where there is no
    SIGALRM): an exception raised in another thread is a class, made without arguments,
    so its words wait in _PENDING."""

    def __init__(self, *args):
        super().__init__(*(args or (_PENDING.get("text") or "time limit",)))


_PENDING: dict[str, str] = {}
_TIMER: dict = {"deadline": None}  # when the watchdog stops the code; "thread": whose code
_TIMER_LOCK = threading.Lock()


def _raise_in(thread_id: int, exc: type[BaseException] | None) -> bool:
    """Raise ``exc`` in the thread ``thread_id`` as soon as it runs Python code again (None:
    withdraw one not raised yet). False where the interpreter cannot (not CPython)."""
    try:
        import ctypes

        set_async = ctypes.pythonapi.PyThreadState_SetAsyncExc
    except (ImportError, AttributeError):
        return False
    return set_async(ctypes.c_ulong(thread_id), ctypes.py_object(exc) if exc else None) == 1


def _arm(limit: float) -> None:
    """Start this test's time limit."""
    if _S.get("timer", "signal") == "signal":
        signal.setitimer(signal.ITIMER_REAL, limit, REPEAT)
    else:
        with _TIMER_LOCK:
            _TIMER["deadline"] = time.monotonic() + limit


def _disarm() -> None:
    """Stop this test's time limit; a stop the watchdog sent and Python has not raised yet
    is withdrawn (the test is over)."""
    if _S.get("timer", "signal") == "signal":
        signal.setitimer(signal.ITIMER_REAL, 0)
    else:
        try:
            with _TIMER_LOCK:
                _TIMER["deadline"] = None
                _raise_in(_TIMER.get("thread") or threading.main_thread().ident, None)
        except TimeLimit:
            pass  # sent as the test ended and raised here: the test is over anyway


def _watchdog(main: int) -> None:
    """The test process's own guard, a thread: where there is no SIGALRM, it stops the
    learner's code in the main thread at the time limit (again every REPEAT seconds);
    where the grader cannot read this process's memory (no /proc), it ends the process
    when its peak memory passes the limit (the grader reports it, OVER_MEMORY)."""
    _TIMER["thread"] = main
    ticks = 0
    while _S is not None:
        time.sleep(0.05)
        ticks += 1
        settings = _S or {}
        if (settings.get("memory") == "self" and ticks % 4 == 0
                and _peak_rss() > settings.get("memory_limit", MEMORY_LIMIT) * 2**30):
            os._exit(OVER_MEMORY)
        if settings.get("timer") != "thread":
            continue
        with _TIMER_LOCK:
            deadline = _TIMER["deadline"]
            if deadline is None or time.monotonic() < deadline:
                continue
            _TIMER["deadline"] = time.monotonic() + REPEAT
            text = _time_is_up(sys._current_frames().get(main))
            if text is not None:
                _PENDING["text"] = text
                _raise_in(main, _Stopped)


def _write(row: dict) -> None:
    with open(_S["record"], "a", encoding="utf-8") as f:
        f.write(json.dumps(row) + "\n")


def _reset_failed_fixtures(item) -> None:
    """Forget fixture values whose setup failed, so that a run again sets them up again."""
    info = getattr(item, "_fixtureinfo", None)
    for defs in (info.name2fixturedefs.values() if info else ()):
        for fixturedef in defs:
            cached = getattr(fixturedef, "cached_result", None)
            if cached is not None and cached[2] is not None:
                fixturedef.cached_result = None


def _run_once(item, learner: set[str]) -> dict:
    """Run ``item`` once with the learner's code for the exercises in ``learner``."""
    from _pytest.runner import runtestprotocol

    global _ALARMS
    _MODE.clear()
    _MODE.update({ex_id: True for ex_id in learner})
    _ENTERED.clear()
    _STACK.clear()
    _RUN.update(last=None, excinfo=None, timeout=None, nodeid=item.nodeid)
    _ALARMS = 0
    _reset_failed_fixtures(item)
    _beat(time.time(), item.nodeid)
    _arm(_S["time_limit"])
    try:
        # Tear down the test's own fixtures (a fresh tmp_path each run), keep the module's.
        reports = runtestprotocol(item, log=False, nextitem=item.parent)
    finally:
        _disarm()
        _beat(0.0)
        _STACK.clear()
    failed = any(r.failed for r in reports)
    skipped = not failed and any(r.skipped for r in reports)
    return {"reports": reports, "outcome": "failed" if failed else "skipped" if skipped else "passed",
            "entered": set(_ENTERED), "timeout": _RUN["timeout"],
            "failure": _describe(item, reports) if failed else None}


def _learners() -> set[str]:
    """The exercises whose learner's code runs: filled in, not the solution's, not judged."""
    return {e for e, k in _KIND.items() if k == "own" and e not in _JUDGED}


def _judge_timeout(run: dict, row: dict) -> str | None:
    ex_id = run["timeout"]
    if ex_id:
        message = run["failure"] if run["failure"] and run["failure"]["kind"] == "limit" else {
            "kind": "limit", "text": f"time limit: exercise {ex_id} ran too long", "where": None}
        _JUDGED[ex_id] = message
        row["judged"][ex_id] = message
        row["verdicts"][ex_id] = {"outcome": "failed", "message": message}
    return ex_id


def pytest_runtest_protocol(item, nextitem):
    if _S is None:
        return None
    global _TESTING
    item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
    start = time.perf_counter()
    row = {"nodeid": item.nodeid, "outcome": "passed", "seconds": 0.0, "reached": set(),
           "verdicts": {}, "other": None, "judged": {}}
    shown = None
    _TESTING = True
    try:
        for _ in range(len(EXERCISES) + 1):
            run = _run_once(item, _learners())
            shown = shown or run["reports"]
            row["reached"] |= {e for e, _ in run["entered"]}
            own = {e for e, mine in run["entered"] if mine}
            if run["timeout"] is not None:
                ex_id = _judge_timeout(run, row)
                if ex_id and own - {ex_id}:
                    continue  # again, with the solution's code for the exercise that hung
                if not ex_id:
                    row["other"] = run["failure"]
                break
            if run["outcome"] == "failed":
                if not own:
                    row["other"] = run["failure"]
                elif len(own) == 1:
                    row["verdicts"][own.pop()] = {"outcome": "failed", "message": run["failure"]}
                else:  # which of them? each on its own, the others the solution's
                    for ex_id in sorted(own):
                        alone = _run_once(item, {ex_id})
                        row["reached"] |= {e for e, _ in alone["entered"]}
                        if alone["timeout"] is not None:
                            _judge_timeout(alone, row)
                        elif (ex_id, True) in alone["entered"]:
                            row["verdicts"][ex_id] = {
                                "outcome": alone["outcome"] if alone["outcome"] != "skipped"
                                else "passed", "message": alone["failure"]}
                    if not any(v["outcome"] == "failed" for v in row["verdicts"].values()):
                        row["other"] = {**run["failure"], "text": (
                            f"fails only when your {' and '.join(sorted(own))} run together: "
                            + run["failure"]["text"])}
            elif run["outcome"] == "passed":
                for ex_id in own:
                    row["verdicts"][ex_id] = {"outcome": "passed", "message": None}
            break
    finally:
        _TESTING = False
        _MODE.clear()
        with contextlib.suppress(Exception):
            item.session._setupstate.teardown_exact(nextitem)
    for ex_id in row["reached"]:  # the solution's own code passes what it reaches
        if _KIND.get(ex_id) == "same" and ex_id not in row["verdicts"]:
            row["verdicts"][ex_id] = {"outcome": "passed", "message": None}
    failed = bool(row["other"]) or any(v["outcome"] == "failed" for v in row["verdicts"].values())
    row.update(outcome="failed" if failed else run["outcome"], reached=sorted(row["reached"]),
               seconds=time.perf_counter() - start)
    _write(row)
    for report in shown:
        item.ihook.pytest_runtest_logreport(report=report)
    item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
    return True


def pytest_exception_interact(node, call, report) -> None:
    """pytest calls this for every failure: keep the first exception of the run."""
    if _S is not None and _TESTING and not _RUN.get("excinfo"):
        _RUN["excinfo"] = (call.when, call.excinfo)


def _guard_parent(parent: int) -> None:
    """End this process and its children if the grader that started it is gone."""
    while True:
        time.sleep(1.0)
        if os.getppid() != parent:  # (POSIX: on Windows a process keeps its parent's id)
            if hasattr(os, "killpg"):
                with contextlib.suppress(Exception):
                    os.killpg(0, signal.SIGKILL)
            os._exit(1)


def pytest_configure(config) -> None:
    global _S, _BEAT
    if not os.environ.get(ENV):
        return
    _S = json.loads(Path(os.environ[ENV]).read_text(encoding="utf-8"))
    threading.Thread(target=_guard_parent, args=(os.getppid(),), daemon=True).start()
    threading.Thread(target=_watch_spot, args=(threading.main_thread().ident,),
                     daemon=True).start()
    stale = [m for m in sys.modules if m.split(".")[0] in STAGES.values()]
    if stale:
        _ERRORS.append(f"stage modules imported before the workbook was on sys.path: {stale}")
    sys.path.insert(0, _S["folder"])  # after pytest's own pythonpath = ["."]
    _JUDGED.update(_S.get("judged", {}))
    with open(_S["beat"], "r+b") as f:
        _BEAT = mmap.mmap(f.fileno(), BEAT_SIZE)
    if _S.get("timer", "signal") == "signal":
        signal.signal(signal.SIGALRM, _on_alarm)
    if _S.get("timer") == "thread" or _S.get("memory") == "self":
        threading.Thread(target=_watchdog, args=(threading.main_thread().ident,),
                         daemon=True).start()
    try:
        _S["imported"] = _install(_S["stages"])
    except Exception as e:  # noqa: BLE001 (the learner's module does not import: reported)
        import traceback

        where, line = None, None
        for frame in traceback.extract_tb(e.__traceback__):
            path = Path(frame.filename)
            if path.is_relative_to(_S["folder"]):
                where, line = path.relative_to(_S["folder"]).as_posix(), frame.lineno
        text = f"{type(e).__name__}: {e}" + (f" (line {line})" if line else "")
        _write({"import_error": {"file": where, "line": line, "text": text},
                "errors": [f"importing the workbook failed: {text}"], "imported": {}})
        os._exit(3)


def pytest_collection_modifyitems(session, config, items) -> None:
    if _S is None:
        return
    pkgs = [STAGES[n] for n in _S["stages"]]
    done = set(_S.get("done", ()))
    keep, drop = [], []
    for item in items:
        name = item.path.name
        mine = (any(name.startswith(f"test_stage{n}_") for n in _S["stages"])
                or (name == "test_doctests.py" and any(f"[{p}." in item.nodeid for p in pkgs)))
        slow = item.get_closest_marker("slow") is not None
        (keep if mine and not slow and item.nodeid not in done else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def pytest_collectreport(report) -> None:
    if _S is None or not report.failed:
        return
    text = report.longreprtext
    # A test module that does not import because a module of the learner's does not: that
    # module's file and line, for the grader to put the repository's in its place.
    found = list(re.finditer(re.escape(_S["folder"].rstrip("/")) + r"/([\w/]+\.py):(\d+)", text))
    error = next((line[1:].strip() for line in reversed(text.splitlines())
                  if line.startswith("E ")), "")
    if found and "import_error" not in _RUN:
        _RUN["import_error"] = {"file": found[-1][1], "line": int(found[-1][2]), "text": (
            f"{error} (line {found[-1][2]})")}
    _ERRORS.append(f"{report.nodeid}: {plain(error or text[-500:])}")


def pytest_sessionfinish(session) -> None:
    if _S is None:
        return
    _write({"errors": _ERRORS, "imported": _S.get("imported", {}), "judged": _JUDGED,
            "import_error": _RUN.get("import_error")})


# --- command line -------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python tools/workbook.py",
        description="Build a stage yourself: make a workbook with holes, then grade it with "
                    "the stage's own tests.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    stage = dict(type=int, choices=sorted(STAGES), help="stage number")
    folder = dict(type=Path, default=Path("workbook"),
                  help="the learner's folder; the stage package goes in it")
    m = sub.add_parser("make", help="copy a stage with its key pieces cut out",
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    m.add_argument("--stage", required=True, **stage)
    m.add_argument("--dir", **folder)
    m.add_argument("--force", action="store_true",
                   help="start again over an existing workbook (the old one is kept, renamed)")
    g = sub.add_parser("grade", help="run the stage's tests on the workbook, per exercise",
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    g.add_argument("--stage", required=True, **stage)
    g.add_argument("--dir", **folder)
    g.add_argument("--verbose", action="store_true", help="print pytest's own output too")
    g.add_argument("--time-limit", type=float, default=TIME_LIMIT, metavar="SECONDS",
                   help="the longest one test may run; an exercise whose code runs longer fails")
    g.add_argument("--memory-limit", type=float, default=MEMORY_LIMIT, metavar="GIB",
                   help="the most memory the tests may use; "
                        + MEMORY_GUARD_WORDS[memory_guard()].replace("%", "%%"))
    ls = sub.add_parser("list", help="the exercises of every stage (or of one)",
                        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ls.add_argument("--stage", type=int, choices=sorted(STAGES), default=None,
                    help="only this stage")
    return p


def _terminated(signum, frame) -> None:
    raise SystemExit(128 + signum)  # killed: clean up on the way out (no process, no folder left)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _terminated)
    try:
        if args.command == "list":
            for ex in EXERCISES:
                if args.stage in (None, ex.stage):
                    where = f"{ex.package}/{ex.target}"
                    print(f"{ex.id}  {ex.title:<36} {where:<50} {ex.docs}")
            return 0
        if args.command == "make":
            dest = make(args.stage, args.dir, args.force)
            print(f"made {dest}: {len(exercises(args.stage))} holes")
            for ex in exercises(args.stage):
                print(f"  {ex.id}  {ex.title}: {ex.package}/{ex.file} {ex.qualname}")
            print(f"next: fill them in, then make grade STAGE={args.stage} (or python "
                  f"tools/workbook.py grade --stage {args.stage}"
                  + ("" if args.dir == Path("workbook") else f" --dir {args.dir}") + ")")
            return 0
        return 0 if grade(args.stage, args.dir, args.verbose, args.time_limit,
                          args.memory_limit) else 1
    except WorkbookError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        print("\ngrading stopped (Ctrl-C); nothing was changed" if args.command == "grade"
              else "\nstopped (Ctrl-C)", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
