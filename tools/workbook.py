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

``grade`` runs the stage's own tests (tests/test_stageN_*.py and the stage's
doctests; not the ``slow`` end-to-end runs, which start fresh interpreters on the
repository's copy of the stage) with the workbook first on ``sys.path``, so that
``import stage3_attention`` is the learner's copy. This file is also the pytest
plugin of that run (``-p tools.workbook``): it checks where the stage was imported
from, notes which exercise functions every test calls, and which exercise's
``NotImplementedError`` stopped it. An exercise passes when every test that
reached it passed, not counting tests stopped by another unfinished exercise. The
grader reads the learner's files and never writes to them.
"""

from __future__ import annotations

import argparse
import ast
import functools
import importlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STAGES = {1: "stage1_data", 2: "stage2_bigram", 3: "stage3_attention", 4: "stage4_block",
          5: "stage5_gpt"}
ENV = "GPT_STAGES_WORKBOOK"  # the plugin's settings (a JSON file), set by ``run_tests``


@dataclass(frozen=True)
class Exercise:
    id: str  # "3.2": stage 3, exercise 2
    target: str  # "model.py:Head.forward", or "model.py:GPT.__init__#init": a snippet section in it
    title: str
    read: str  # the heading of the section of docs/<stage>.md to read
    hint: str
    needs: tuple[str, ...] = ()  # exercises every test of this one also runs (do them first)

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
    def qualname(self) -> str:
        """The function whose body is cut, or that holds the section that is cut."""
        return self.target.split(":")[1].split("#")[0]

    @property
    def snippet(self) -> str | None:
        """The snippet section cut out of the function, if not its whole body."""
        return self.target.partition("#")[2] or None

    @property
    def anchor(self) -> str:
        """The heading's id, as MkDocs makes it (the toc extension's slugify)."""
        words = re.sub(r"[^\w\s-]", "", self.read.lower()).strip()
        return re.sub(r"[\s-]+", "-", words)

    @property
    def docs(self) -> str:
        return f"docs/{self.package}.md#{self.anchor}"

    @property
    def marker(self) -> str:
        """The start of the line that stands for the hole while it is open."""
        return f'raise NotImplementedError("Exercise {self.id}:'

    def hole_line(self) -> str:
        return f'{self.marker} {self.title} -- read {self.docs}")'


# The holes, in the order a learner meets them. Each is the heart of its stage's idea.
EXERCISES = (
    Exercise("1.1", "tokenizer.py:CharTokenizer.encode", "encode text to ids",
             "A character tokenizer",
             "look each character up in self.stoi; unknown characters raise the UserError that "
             "self._unknown_error builds (every position, at most 10 shown)"),
    Exercise("1.2", "tokenizer.py:CharTokenizer.decode", "decode ids to text",
             "A character tokenizer",
             "accept any iterable of ints (tensors too); an id outside 0..vocab_size-1 is a "
             "UserError; join the characters of self.itos"),
    Exercise("1.3", "data.py:get_batch", "a random batch of (x, y) windows",
             "Batches: inputs and targets shifted by one",
             "check_length first, then batch_size >= 1; random starts with torch.randint(..., "
             "generator=generator); y is x shifted by one; return torch.long on device"),
    Exercise("2.1", "model.py:LanguageModel.forward", "the bigram's logits and loss",
             "The loss: cross-entropy",
             "logits are rows of the table, (B, T, V); with targets, flatten to (B*T, V) and "
             "(B*T,) for F.cross_entropy; without, the loss is None"),
    Exercise("2.2", "model.py:LanguageModel.stream", "sampling, one token at a time",
             "Generating text",
             "max_new_tokens times: the logits of the last position, sample_next, append to "
             "idx, yield the new (B, 1) token", needs=("2.1",)),
    Exercise("3.1", "model.py:sinusoidal_positions", "sinusoidal positions",
             "Step 1: token and position embeddings",
             "even columns sin(p / 10000^(2i/C)), odd columns the cos of the same angle; "
             "mind an odd n_embd"),
    Exercise("3.2", "model.py:Head.forward", "one head of causal self-attention",
             "Step 2: one attention head",
             "q, k, v from the three Linears; scores q k^T / sqrt(head_size); -inf above the "
             "diagonal when self.causal; softmax over the last dim; keep a detached copy of "
             "the weights in self.last_attention"),
    Exercise("3.3", "model.py:LanguageModel.forward", "the forward pass",
             "The forward pass",
             "UserError when T > block_size; token embeddings + self.positions(T, device); "
             "the head; lm_head; the loss as in stage 2", needs=("3.2",)),
    Exercise("4.1", "model.py:CausalSelfAttention.forward", "multi-head attention, batched",
             "The reshape, step by step",
             "one c_attn gives q, k, v; view (B, T, C) as (B, nh, T, hs); one head's math for "
             "all heads at once; self.last_attention is (B, nh, T, T); heads side by side "
             "again, then c_proj and resid_dropout (attn_dropout on the weights)"),
    Exercise("4.2", "model.py:FeedForward.__init__", "the feed-forward network",
             "Feed-forward network",
             "self.net = nn.Sequential(Linear C->4C, ReLU or GELU, Linear 4C->C, Dropout) in "
             "this order, so checkpoints and parameter counts match"),
    Exercise("4.3", "model.py:Block.forward", "the pre-LN block, residuals included",
             "Layer normalisation",
             "pre-LN: x + attn(ln1(x)), then x + ffwd(ln2(x)); when not self.pre_norm "
             "(post-LN): ln1(x + attn(x)), then ln2(x + ffwd(x))", needs=("4.1", "4.2")),
    Exercise("5.1", "model.py:GPT.__init__#init", "GPT-2's initialisation",
             "Initialisation",
             "tie lm_head.weight to wte.weight when config.tie_weights; self.apply("
             "self._init_weights); then every c_proj.weight ~ N(0, 0.02 / sqrt(2 * n_layer))"),
    Exercise("5.2", "train.py:get_lr", "warmup, then cosine decay",
             "Warmup, then cosine decay",
             "linear warmup lr * (step + 1) / warmup_iters; cosine from lr to min_lr until "
             "lr_decay_iters (or max_iters when 0); min_lr after"),
    Exercise("5.3", "model.py:sample_next", "temperature and top-k sampling",
             "Sampling, one character at a time",
             "UserError for temperature < 0 (or nan) and top_k < 1; temperature 0 is argmax; "
             "else divide by the temperature without overflowing, keep the top_k largest, "
             "softmax, torch.multinomial with the generator"),
)


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


def section_lines(lines: list[str], name: str, start: int, end: int) -> tuple[int, int] | None:
    """0-based indices of the ``--8<-- [start:name]`` line (in lines start..end: the
    function's) and of the ``[end:name]`` line after it (a comment, maybe past the end)."""
    def find(kind: str, lo: int, hi: int) -> int | None:
        pattern = rf"\s*# --8<-- \[{kind}:{re.escape(name)}\]\s*"
        return next((i for i in range(lo, hi) if re.fullmatch(pattern, lines[i])), None)

    first = find("start", start, end)
    last = None if first is None else find("end", first, len(lines))
    return None if last is None else (first, last)


def cut(source: str, ex: Exercise) -> str:
    """``source`` with the code of exercise ``ex`` replaced by its ``raise NotImplementedError``."""
    lines = source.splitlines(keepends=True)
    fn = find_function(ast.parse(source), ex.qualname)
    if fn is None:
        raise WorkbookError(f"exercise {ex.id}: no {ex.qualname} in {ex.package}/{ex.file}")
    if ex.snippet:
        where = section_lines(lines, ex.snippet, fn.lineno, fn.end_lineno)
        if where is None:
            raise WorkbookError(f"exercise {ex.id}: no section {ex.snippet!r} in {ex.qualname}")
        first, last = where[0] + 1, where[1]  # the lines between the two markers
        indent = re.match(r"\s*", lines[where[0]]).group(0)
    else:
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
    return path.is_file() and ex.marker in path.read_text(encoding="utf-8")


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
                f"`python tools/workbook.py grade --stage {stage} --dir {folder}`, or pass "
                "--force to start again (the old folder is kept, renamed)")
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


# --- running the tests --------------------------------------------------------------


def run_tests(folder: Path, stages: list[int], pytest_args: list[str] | None = None,
              verbose: bool = False) -> dict:
    """Run the tests of ``stages`` with ``folder`` first on sys.path; the plugin's record.

    ``pytest_args``: node ids or options that narrow the run (the tests use them).
    """
    folder = folder.resolve()
    with tempfile.TemporaryDirectory(prefix="workbook-grade-") as tmp:
        settings = Path(tmp) / "settings.json"
        record = Path(tmp) / "record.json"
        settings.write_text(json.dumps({"folder": str(folder), "stages": stages,
                                        "record": str(record)}), encoding="utf-8")
        files = sorted({str(p.relative_to(ROOT)) for n in stages
                        for p in (ROOT / "tests").glob(f"test_stage{n}_*.py")})
        cmd = [sys.executable, "-m", "pytest", *(pytest_args or [*files, "tests/test_doctests.py"]),
               "-p", "tools.workbook", "-p", "no:cacheprovider", "-q", "--no-header",
               "--basetemp", str(Path(tmp) / "pytest"), "-o", "addopts=--strict-markers"]
        env = {**os.environ, ENV: str(settings), "PYTHONDONTWRITEBYTECODE": "1"}
        env.setdefault("OMP_NUM_THREADS", "1")
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
        if verbose:
            print(proc.stdout[-20000:], proc.stderr[-5000:], sep="\n")
        if not record.is_file():
            raise WorkbookError("pytest did not run:\n" + (proc.stdout + proc.stderr)[-3000:])
        result = json.loads(record.read_text(encoding="utf-8"))
    for pkg, path in result["imported"].items():
        if not Path(path).resolve().is_relative_to(folder):
            raise WorkbookError(f"the tests imported {pkg} from {path}, not from {folder}")
    result["returncode"] = proc.returncode
    return result


HOLE_RE = re.compile(r"NotImplementedError\W+Exercise (\d+\.\d+)")


def judge(result: dict, stage: int, package_dir: Path) -> list[dict]:
    """Per exercise: status (passed, failed, todo, waiting), the tests behind it, a message."""
    tests = result["tests"]
    rows = []
    for ex in exercises(stage):
        reached = [t for t in tests if ex.id in t["entered"]]
        stopped_here = [t for t in tests if t["hole"] == ex.id]
        # Tests stopped by another exercise's hole say nothing about this one.
        conclusive = [t for t in reached if t["outcome"] != "failed"
                      or t["hole"] in (None, ex.id)]
        failed = [t for t in conclusive if t["outcome"] == "failed"]
        row = {"id": ex.id, "title": ex.title, "tests": len(conclusive),
               "waiting": len(reached) - len(conclusive), "message": ""}
        if is_open(package_dir, ex):
            row["status"] = "todo"
            row["message"] = f"{ex.file}:{ex.qualname} still raises NotImplementedError"
            row["tests"] = len(stopped_here)
        elif failed:
            row["status"] = "failed"
            row["message"] = f"{failed[0]['nodeid']}: {failed[0]['message']}"
            row["failed"] = len(failed)
        elif any(t["outcome"] == "passed" for t in conclusive):
            row["status"] = "passed"
        else:
            row["status"] = "waiting"
            blockers = sorted({t["hole"] for t in reached} - {ex.id, None})
            row["message"] = ("every test that reaches it stops first at exercise "
                              + ", ".join(blockers))
        rows.append(row)
    return rows


def summary(result: dict, rows: list[dict]) -> tuple[list[str], bool]:
    """The grader's report as lines, and whether everything passed."""
    by_id = {e.id: e for e in EXERCISES}
    lines = []
    width = max(len(r["title"]) for r in rows)
    for r in rows:
        ex = by_id[r["id"]]
        detail = {"todo": f"stops {r['tests']} tests",
                  "failed": f"{r.get('failed', 0)} of {r['tests']} tests fail",
                  "passed": f"{r['tests']} tests pass",
                  "waiting": "no test reaches it alone"}[r["status"]]
        if r["waiting"] and r["status"] != "todo":
            detail += f", {r['waiting']} more wait on other exercises"
        lines.append(f"  {r['id']}  {r['title']:<{width}}  {r['status'].upper():<7}  {detail}")
        if r["status"] != "passed":
            lines.append(f"        {r['message'][:300]}")
            lines.append(f"        hint: {ex.hint}")
            lines.append(f"        read: {ex.docs}")
    tests = result["tests"]
    others = [t for t in tests if t["outcome"] == "failed" and not t["entered"] and not t["hole"]]
    for t in others[:5]:
        lines.append(f"  failed outside the exercises: {t['nodeid']}: {t['message'][:200]}")
    for e in result["errors"]:
        lines.append(f"  could not collect: {e[:500]}")
    n_pass = sum(r["status"] == "passed" for r in rows)
    n_failed = sum(t["outcome"] == "failed" for t in tests)
    stopped = sum(t["outcome"] == "failed" and t["hole"] is not None for t in tests)
    lines.append(f"Total: {n_pass} of {len(rows)} exercises pass; {len(tests)} tests: "
                 f"{len(tests) - n_failed} passed, {stopped} stopped at an open exercise, "
                 f"{n_failed - stopped} failed otherwise.")
    ok = n_pass == len(rows) and n_failed == 0 and not result["errors"] and tests != []
    return lines, ok


def grade(stage: int, folder: Path, verbose: bool = False) -> bool:
    package_dir = folder / STAGES[stage]
    if not (package_dir / "__init__.py").is_file():
        raise WorkbookError(f"no workbook at {package_dir}; make one first: "
                            f"python tools/workbook.py make --stage {stage} --dir {folder}")
    print(f"Grading {package_dir} with the tests of stage {stage} "
          f"(tests/test_stage{stage}_*.py and its doctests) ...", flush=True)
    result = run_tests(folder, [stage], verbose=verbose)
    lines, ok = summary(result, judge(result, stage, package_dir))
    print("\n".join(lines))
    return ok


# --- the pytest plugin (active only in a run started by run_tests) ------------------

_SETTINGS: dict | None = None
_CURRENT: str | None = None
_ENTERED: dict[str, set[str]] = {}
_TESTS: dict[str, dict] = {}
_ERRORS: list[str] = []


def _record_calls(fn, ex_id: str):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if _CURRENT is not None:
            _ENTERED.setdefault(_CURRENT, set()).add(ex_id)
        return fn(*args, **kwargs)
    return wrapper


def _install(stages: list[int]) -> dict[str, str]:
    """Wrap every exercise function of ``stages`` so that calls are noted; where imported from."""
    imported = {}
    for ex in EXERCISES:
        if ex.stage not in stages:
            continue
        module = importlib.import_module(f"{ex.package}.{ex.file.removesuffix('.py')}")
        imported[ex.package] = sys.modules[ex.package].__file__
        *owners, name = ex.qualname.split(".")
        owner = module
        for part in owners:
            owner = getattr(owner, part)
        raw = vars(owner)[name]
        fn = raw.__func__ if isinstance(raw, staticmethod) else raw
        wrapped = _record_calls(fn, ex.id)
        setattr(owner, name, staticmethod(wrapped) if isinstance(raw, staticmethod) else wrapped)
        if owner is module:  # the same function imported by name into other modules
            for mod_name, mod in list(sys.modules.items()):
                if mod_name.startswith(f"{ex.package}.") and getattr(mod, name, None) is fn:
                    setattr(mod, name, wrapped)
    return imported


def pytest_configure(config) -> None:
    global _SETTINGS
    if not os.environ.get(ENV):
        return
    _SETTINGS = json.loads(Path(os.environ[ENV]).read_text(encoding="utf-8"))
    stale = [m for m in sys.modules if m.split(".")[0] in STAGES.values()]
    if stale:
        _ERRORS.append(f"stage modules imported before the workbook was on sys.path: {stale}")
    sys.path.insert(0, _SETTINGS["folder"])  # after pytest's own pythonpath = ["."]
    try:
        _SETTINGS["imported"] = _install(_SETTINGS["stages"])
    except Exception as e:  # a learner's SyntaxError, say: reported, and collection shows it
        _ERRORS.append(f"importing the workbook failed: {type(e).__name__}: {e}")
        _SETTINGS["imported"] = {}


def pytest_collection_modifyitems(session, config, items) -> None:
    if _SETTINGS is None:
        return
    pkgs = [STAGES[n] for n in _SETTINGS["stages"]]
    keep, drop = [], []
    for item in items:
        name = item.path.name
        mine = (any(name.startswith(f"test_stage{n}_") for n in _SETTINGS["stages"])
                or (name == "test_doctests.py" and any(f"[{p}." in item.nodeid for p in pkgs)))
        (keep if mine and item.get_closest_marker("slow") is None else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def pytest_collectreport(report) -> None:
    if _SETTINGS is not None and report.failed:
        _ERRORS.append(f"{report.nodeid}: {report.longreprtext[-1500:]}")


def _message(report) -> str:
    crash = getattr(report.longrepr, "reprcrash", None)
    text = crash.message if crash is not None else report.longreprtext.strip().splitlines()[-1:]
    text = text if isinstance(text, str) else "".join(text)
    return " ".join(text.split())[:500]


def pytest_runtest_logstart(nodeid, location) -> None:
    global _CURRENT
    _CURRENT = nodeid


def pytest_runtest_logreport(report) -> None:
    if _SETTINGS is None:
        return
    row = _TESTS.setdefault(report.nodeid, {"nodeid": report.nodeid, "outcome": "passed",
                                            "hole": None, "message": "", "seconds": 0.0})
    row["seconds"] += report.duration
    if report.failed and row["outcome"] == "passed":
        # A doctest run by the test prints its failures: they are in the captured output.
        m = HOLE_RE.search("\n".join([report.longreprtext, *(c for _, c in report.sections)]))
        row.update(outcome="failed", hole=m and m.group(1), message=_message(report))
    elif report.skipped and report.when == "setup":
        row["outcome"] = "skipped"


def pytest_runtest_logfinish(nodeid, location) -> None:
    global _CURRENT
    _CURRENT = None


def pytest_sessionfinish(session) -> None:
    if _SETTINGS is None:
        return
    tests = [{**t, "entered": sorted(_ENTERED.get(t["nodeid"], ()))} for t in _TESTS.values()]
    record = {"tests": tests, "errors": _ERRORS, "imported": _SETTINGS["imported"]}
    Path(_SETTINGS["record"]).write_text(json.dumps(record), encoding="utf-8")


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
    ls = sub.add_parser("list", help="the exercises of every stage (or of one)",
                        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ls.add_argument("--stage", type=int, choices=sorted(STAGES), default=None,
                    help="only this stage")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
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
            print(f"next: fill them in, then python tools/workbook.py grade --stage {args.stage}"
                  + ("" if args.dir == Path("workbook") else f" --dir {args.dir}"))
            return 0
        return 0 if grade(args.stage, args.dir, args.verbose) else 1
    except WorkbookError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
