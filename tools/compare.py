"""Train several stages on the same data at the same budget and compare them.

    python tools/compare.py                       # stages 2-5, each at its own defaults
    python tools/compare.py --stages 2 3 --max-iters 1000 --batch-size 32 --block-size 32

Each chosen stage runs its own trainer (``python -m stageN_x.train``) in a fresh
process, one after the other, with the same --data, --seed and, when you give
them, the same --max-iters, --batch-size and --block-size. Everything else (the
model size, the learning rate, the schedule) stays at that stage's defaults.
Because every stage seeds its batch sampler the same way, stages given the same
budget train on the very same windows of text and are measured on the same
windows too.

The table lists, per stage: parameters, steps, batch x block, the final train and
validation loss, the lowest validation loss of the run and the step it came at
(a model that overfits ends above it), the wall-clock seconds of the training
loop (evaluations included) and the start of a sample. --markdown writes the table for the
docs (the numbers in the table, each stage's whole sample in a block below it), --json
the rows.

Everything here is read from the files each trainer writes into its --out-dir, never
from what it prints (printed lines are for people): the rows from ``metrics.json``,
the progress (one line, or a bar on a terminal, per loss estimate) by following
``log.jsonl`` as it grows, and the best validation loss from ``metrics.json`` or,
where a trainer does not record it, from the lowest ``val`` in ``log.jsonl``.

This module is also the one place that lays out tables: ``plain_table`` for the
terminal and ``md_table`` for Markdown; tools/bench.py and tools/gen_docs.py use
them too. tools/gen_docs.py runs this script one stage at a time for the docs'
same-budget table (``compare_budget_en.md``) and keeps each stage's row in
docs/generated/runs/, so a change to one stage re-runs only that stage's row and
the table is assembled again from the stored rows.
"""

from __future__ import annotations

import argparse
import ast
import codecs
import json
import math
import os
import queue
import re
import shlex
import subprocess
import sys
import threading
import time
import unicodedata
from collections.abc import Container
from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]

# The stages that have a trainer; stage 1 is the data pipeline only.
STAGES = {2: "stage2_bigram", 3: "stage3_attention", 4: "stage4_block", 5: "stage5_gpt"}
BUILTIN_DATA = ("en", "zh", "shakespeare")
EVALS = 5  # loss estimates per run when the budget is given (plus the final one)
SAMPLE_CHARS = 60

POLL_SECONDS = 0.25  # how often the progress display looks at log.jsonl


class CompareError(Exception):
    """A run that could not be compared; the message says what happened."""


# ----------------------------------------------------------------------------- arguments


def stage_number(s: str) -> int:
    """'3', 'stage3' or 'stage3_attention' -> 3."""
    m = re.fullmatch(r"(?:stage)?(\d+)(?:_\w+)?", s.strip())
    n = int(m.group(1)) if m else None
    if n not in STAGES or (m and "_" in s and s.strip() != STAGES[n]):
        raise argparse.ArgumentTypeError(
            f"no stage {s!r}: choose from {', '.join(map(str, STAGES))} "
            "(stage 1 is the data pipeline and has no model to train)")
    return n


def budget_int(s: str) -> int:
    try:
        v = int(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, got {s!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1, got {s}")
    return v


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python tools/compare.py",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=(
            "examples:\n"
            "  python tools/compare.py --stages 2 3 --data en\n"
            "  python tools/compare.py --max-iters 500 --batch-size 16 --block-size 32 "
            "--markdown out/compare/table.md\n"
            "  python tools/compare.py --stages 4 5 --max-iters 300 --stage-args 5 "
            "'--warmup-iters 30'\n"
        ),
    )
    p.add_argument("--stages", nargs="+", type=stage_number, default=list(STAGES),
                   metavar="N", help="stages to train, in this order (default: 2 3 4 5)")
    p.add_argument("--data", default="en",
                   help="training text for every stage: en, zh, shakespeare or a UTF-8 file "
                        "(default: en)")
    p.add_argument("--max-iters", type=budget_int, default=None,
                   help="optimizer steps for every stage (default: each stage's own)")
    p.add_argument("--batch-size", type=budget_int, default=None,
                   help="B for every stage (default: each stage's own)")
    p.add_argument("--block-size", type=budget_int, default=None,
                   help="T for every stage (default: each stage's own)")
    p.add_argument("--seed", type=int, default=1337, help="seed for every stage (default: 1337)")
    p.add_argument("--eval-iters", type=budget_int, default=None,
                   help="batches per loss estimate (default: 50 when --max-iters is given, "
                        "so every stage is measured on the same batches; else each stage's own)")
    p.add_argument("--device", default=None, choices=["auto", "cpu", "cuda", "mps"],
                   help="passed to every stage (default: each stage picks)")
    p.add_argument("--threads", type=budget_int, default=None,
                   help="CPU threads for every stage (sets OMP_NUM_THREADS; default: torch's "
                        "own choice). On a busy machine --threads 1 is often much faster for "
                        "these small models")
    p.add_argument("--extra-args", default="", metavar="ARGS",
                   help="more options for every stage's trainer, as one quoted string, "
                        "e.g. --extra-args='--sample-tokens 100' (write it with '=' when it is a "
                        "single option); they must be options all chosen stages know")
    p.add_argument("--stage-args", nargs=2, action="append", default=[], metavar=("N", "ARGS"),
                   help="more options for stage N only, e.g. --stage-args 5 '--warmup-iters 20'; "
                        "may be repeated")
    p.add_argument("--out-dir", type=Path, default=Path("out") / "compare",
                   help="each stage writes into OUT_DIR/<stage package> (default: out/compare)")
    p.add_argument("--json", type=Path, default=None, metavar="PATH",
                   help="also write the settings and rows as JSON here")
    p.add_argument("--markdown", type=Path, default=None, metavar="PATH",
                   help="also write the table as Markdown here")
    return p


# ----------------------------------------------------------------------------- stages


def stage_defaults(package: str) -> dict[str, object]:
    """The literal defaults of ``<package>/train.py``'s options, read without importing it.

    Reading the source keeps this tool free of a torch import; an option whose
    default is not a literal is left out.
    """
    source = REPO_ROOT / package / "train.py"
    try:
        tree = ast.parse(source.read_text(encoding="utf-8"))
    except (OSError, SyntaxError):
        return {}
    defaults: dict[str, object] = {}
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "add_argument" and node.args
                and isinstance(node.args[0], ast.Constant)
                and str(node.args[0].value).startswith("--")):
            for kw in node.keywords:
                if kw.arg == "default":
                    try:
                        defaults[node.args[0].value] = ast.literal_eval(kw.value)
                    except ValueError:
                        pass
    return defaults


@dataclass
class StageRun:
    number: int
    package: str
    command: list[str]
    out_dir: Path
    max_iters: int | None
    batch_size: int | None
    block_size: int | None
    env: dict[str, str] = field(default_factory=dict)  # on top of this process's environment
    stderr_tail: list[str] = field(default_factory=list)
    stdout_tail: list[str] = field(default_factory=list)
    evals: list[dict] = field(default_factory=list)  # the rows of log.jsonl seen so far

    @property
    def label(self) -> str:
        return f"{self.number} ({self.package.split('_', 1)[-1]})"


def plan_runs(args: argparse.Namespace) -> list[StageRun]:
    """One command line per chosen stage, sharing data, seed and (when given) budget."""
    stages = list(dict.fromkeys(args.stages))  # drop repeats, keep the order
    per_stage: dict[int, list[str]] = {}
    for n, extra in args.stage_args:
        try:
            number = stage_number(n)
        except argparse.ArgumentTypeError as e:
            raise CompareError(f"--stage-args: {e}") from None
        per_stage.setdefault(number, []).extend(shlex.split(extra))
    shared = shlex.split(args.extra_args)
    eval_iters = args.eval_iters or (50 if args.max_iters else None)
    runs = []
    for n in stages:
        package = STAGES[n]
        if not (REPO_ROOT / package / "train.py").is_file():
            raise CompareError(f"stage {n} has no trainer in this checkout "
                               f"({REPO_ROOT / package / 'train.py'} is missing)")
        defaults = stage_defaults(package)
        out_dir = args.out_dir / package
        cmd = [sys.executable, "-m", f"{package}.train", "--data", args.data,
               "--seed", str(args.seed), "--out-dir", str(out_dir)]
        if args.max_iters:
            cmd += ["--max-iters", str(args.max_iters),
                    "--eval-interval", str(max(1, math.ceil(args.max_iters / EVALS)))]
        if args.batch_size:
            cmd += ["--batch-size", str(args.batch_size)]
        if args.block_size:
            cmd += ["--block-size", str(args.block_size)]
        if eval_iters:
            cmd += ["--eval-iters", str(eval_iters)]
        if args.device:
            cmd += ["--device", args.device]
        cmd += shared + per_stage.get(n, [])
        # What the trainer will use: the last value given on its command line, else its default.
        used = {flag: _last_value(cmd, flag) or _int_or_none(defaults.get(flag))
                for flag in ("--max-iters", "--batch-size", "--block-size")}
        runs.append(StageRun(
            number=n, package=package, command=cmd, out_dir=out_dir,
            max_iters=used["--max-iters"], batch_size=used["--batch-size"],
            block_size=used["--block-size"],
            env={"OMP_NUM_THREADS": str(args.threads)} if args.threads else {},
        ))
    return runs


def _last_value(cmd: list[str], flag: str) -> int | None:
    """The value of the last ``flag V`` or ``flag=V`` in ``cmd``, if it is a whole number."""
    value = None
    for i, a in enumerate(cmd):
        if a == flag and i + 1 < len(cmd):
            value = cmd[i + 1]
        elif a.startswith(flag + "="):
            value = a.split("=", 1)[1]
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def _int_or_none(v: object) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def warnings_for(runs: list[StageRun], args: argparse.Namespace) -> list[str]:
    """Things about this comparison a learner should know before trusting the table."""
    notes = []
    for run in runs:
        if run.number == 5 and args.max_iters:
            warmup = stage_defaults(run.package).get("--warmup-iters")
            overridden = any(a.startswith("--warmup-iters") for a in run.command)
            if not isinstance(warmup, int) or overridden or args.max_iters >= 4 * warmup:
                continue
            what = ("never reaches its full learning rate" if args.max_iters <= warmup
                    else f"spends {warmup} of its {args.max_iters} steps getting there")
            notes.append(
                f"note: stage 5 warms its learning rate up over its first {warmup} steps, so with "
                f"--max-iters {args.max_iters} it {what}; add e.g. --stage-args 5 "
                f"'--warmup-iters {max(1, args.max_iters // 10)}' for a fairer race.")
    return notes


# ----------------------------------------------------------------------------- running


def log_rows(lines: list[str]) -> list[dict]:
    """The loss estimates among lines of a ``log.jsonl``.

    A row is ``{"step", "train", "val", "lr", "time"}``; a line that is not (yet)
    a whole JSON object with a step, a train and a val loss, such as one the trainer
    is still writing, is left out.
    """
    rows = []
    for line in lines:
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict) and {"step", "train", "val"} <= row.keys():
            rows.append(row)
    return rows


def read_log(path: Path) -> list[dict]:
    """The complete rows of a trainer's ``log.jsonl``; none when there is no such file."""
    try:
        return log_rows(path.read_text(encoding="utf-8").splitlines())
    except OSError:
        return []


def read_run(out_dir: Path) -> dict:
    """A finished run's ``metrics.json`` (every trainer records its best val loss and step,
    batch and block size there). Raises OSError or ValueError when it is missing or unreadable."""
    return json.loads((out_dir / "metrics.json").read_text(encoding="utf-8"))


def table_row(number: int, package: str, metrics: dict) -> dict:
    """One row of the comparison table from a run's ``metrics.json``."""
    row = {
        "stage": number, "package": package, "params": metrics["params"],
        "steps": metrics["steps"], "batch_size": metrics["batch_size"],
        "block_size": metrics["block_size"],
        "train_loss": metrics["train_loss"], "val_loss": metrics["val_loss"],
        "train_seconds": metrics["train_seconds"], "sample": metrics["sample"],
        "best_val_loss": metrics["best_val_loss"], "best_val_step": metrics["best_val_step"],
    }
    if metrics.get("interrupted"):
        row["interrupted"] = True
    return row


class LogFollower:
    """The rows a trainer appends to its ``log.jsonl`` while it runs, as they come."""

    def __init__(self, path: Path, from_end: bool = False):
        self.path = path
        self.offset = path.stat().st_size if from_end and path.exists() else 0
        self.partial = b""

    def new_rows(self) -> list[dict]:
        try:
            with self.path.open("rb") as f:
                f.seek(self.offset)
                data = f.read()
        except OSError:  # not written yet
            return []
        self.offset += len(data)
        *lines, self.partial = (self.partial + data).split(b"\n")  # the last one may be half
        return log_rows([line.decode("utf-8", errors="replace") for line in lines])


def _pump(stream, kind: str, events: queue.Queue) -> None:
    """Read a child's stream line by line, for the tail shown when it fails.

    A piece that ends in a lone carriage return is one a terminal overwrites (a
    progress bar redrawing itself), so it is not passed on; "\\r\\n" ends a line.
    """
    buf = ""
    fd = stream.fileno()
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")  # chunks may split a char
    while True:
        chunk = os.read(fd, 8192)
        if not chunk:
            break
        buf += decoder.decode(chunk)
        while True:
            cut = min((i for i in (buf.find("\n"), buf.find("\r")) if i >= 0), default=-1)
            if cut < 0 or cut == len(buf) - 1 and buf[cut] == "\r":
                break  # no end yet, or "\r" that "\n" may follow in the next chunk
            if buf[cut] == "\r" and buf[cut + 1] != "\n":
                buf = buf[cut + 1:]  # overwritten by what follows
                continue
            events.put((kind, buf[:cut]))
            buf = buf[cut + (2 if buf[cut] == "\r" else 1):]
    if buf and not buf.endswith("\r"):
        events.put((kind, buf))
    events.put((kind, None))


class Progress:
    """One short line per loss estimate, or a bar per stage on a terminal.

    Fed with the rows of the trainer's ``log.jsonl``; the bar moves at each loss
    estimate and its clock keeps running in between.
    """

    def __init__(self, run: StageRun, index: int, count: int):
        self.run, self.total = run, run.max_iters
        print(f"[{index}/{count}] stage {run.label}: python -m {shlex.join(run.command[2:])}",
              flush=True)
        self.bar = None
        if sys.stderr.isatty():
            from tqdm import tqdm

            self.bar = tqdm(total=self.total, desc=f"  stage {run.number}", unit="step",
                            dynamic_ncols=True, leave=False, file=sys.stderr)

    def evaluated(self, row: dict) -> None:
        step, train, val = row["step"], row["train"], row["val"]
        if self.bar is not None:
            if step > self.bar.n:
                self.bar.update(step - self.bar.n)
            self.bar.set_postfix({"train": f"{train:.4f}", "val": f"{val:.4f}"})
        else:
            total = f"/{self.total}" if self.total else ""
            print(f"      step {step:>5}{total}: train loss {train:.4f}, val loss {val:.4f}",
                  flush=True)

    def tick(self) -> None:
        if self.bar is not None:
            self.bar.refresh()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def run_stage(run: StageRun, index: int, count: int) -> dict:
    """Train one stage in a fresh interpreter and return its row for the table."""
    run.out_dir.mkdir(parents=True, exist_ok=True)
    metrics_path = run.out_dir / "metrics.json"
    metrics_path.unlink(missing_ok=True)  # never report a previous run's figures
    resuming = "--resume" in run.command  # the trainer appends to its log then
    if not resuming:
        (run.out_dir / "log.jsonl").unlink(missing_ok=True)
    follower = LogFollower(run.out_dir / "log.jsonl", from_end=resuming)
    env = {**os.environ, **run.env, "PYTHONUNBUFFERED": "1", "PYTHONIOENCODING": "utf-8"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    progress = Progress(run, index, count)
    t0 = time.perf_counter()
    proc = subprocess.Popen(run.command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, env=env)
    events: queue.Queue = queue.Queue()
    readers = [threading.Thread(target=_pump, args=(s, k, events), daemon=True)
               for s, k in ((proc.stdout, "out"), (proc.stderr, "err"))]
    for t in readers:
        t.start()

    def follow() -> None:
        for row in follower.new_rows():
            run.evals.append(row)
            progress.evaluated(row)

    try:
        open_streams, polled = 2, 0.0
        while open_streams:
            try:
                kind, line = events.get(timeout=POLL_SECONDS)
            except queue.Empty:
                kind, line = None, None
            if kind is not None and line is None:
                open_streams -= 1
            elif kind == "err":
                run.stderr_tail = (run.stderr_tail + [line])[-40:]
            elif kind == "out":
                run.stdout_tail = (run.stdout_tail + [line])[-40:]
            if time.perf_counter() - polled >= POLL_SECONDS:
                polled = time.perf_counter()
                follow()
                progress.tick()
        rc = proc.wait()
        follow()  # the last rows
    except BaseException:
        progress.close()
        _stop(proc)
        raise
    progress.close()
    seconds = time.perf_counter() - t0
    if rc != 0:
        raise CompareError(failure_message(run, f"failed with exit code {rc}"))
    try:
        metrics = read_run(run.out_dir)
    except (OSError, ValueError) as e:
        raise CompareError(failure_message(
            run, f"finished but left no readable {metrics_path} ({e})")) from None
    try:
        row = table_row(run.number, run.package, metrics)
    except KeyError as e:
        raise CompareError(failure_message(
            run, f"finished but its {metrics_path} has no {e}")) from None
    row.update(run_seconds=round(seconds, 2), out_dir=str(run.out_dir),
               command=shlex.join(run.command[2:]))
    print(f"      done: {row['params']:,} parameters, val loss {row['val_loss']:.4f}, "
          f"{row['train_seconds']:.1f} s training ({seconds:.1f} s in all)", flush=True)
    return row


def _stop(proc: subprocess.Popen) -> None:
    """After Ctrl-C the child got it too and is saving: give it a moment, then end it."""
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def failure_message(run: StageRun, what: str) -> str:
    tail = [line for line in run.stderr_tail if line.strip()][-15:]
    source = "stderr"
    if not tail:
        tail, source = [line for line in run.stdout_tail if line.strip()][-15:], "output"
    shown = "\n".join(f"    {line}" for line in tail) or "    (nothing)"
    return (f"stage {run.label} {what}.\n  command: {shlex.join(run.command)}\n"
            f"  last lines of its {source}:\n{shown}")


# ----------------------------------------------------------------------------- table

COLUMNS = ("stage", "parameters", "steps", "batch × block", "train loss", "val loss",
           "best val (step)", "time (s)", "sample")


def sample_preview(text: str, n: int = SAMPLE_CHARS) -> str:
    """The first ``n`` characters on one line: newlines shown as ⏎."""
    flat = text[:n].replace("\r", "").replace("\n", "⏎").replace("\t", " ")
    return flat + ("…" if len(text) > n else "")


def cells(row: dict) -> list[str]:
    bxt = (f"{row['batch_size']} × {row['block_size']}"
           if row.get("batch_size") and row.get("block_size") else "?")
    best = (f"{row['best_val_loss']:.4f} ({row['best_val_step']:,})"
            if row.get("best_val_step") is not None else "?")
    return [f"{row['stage']} ({row['package'].split('_', 1)[-1]})", f"{row['params']:,}",
            f"{row['steps']:,}", bxt, f"{row['train_loss']:.4f}", f"{row['val_loss']:.4f}",
            best, f"{row['train_seconds']:.1f}", sample_preview(row["sample"])]


def width(s: str) -> int:
    """Terminal columns: Chinese characters take two."""
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in s)


def pad(s: str, w: int, right: bool) -> str:
    gap = " " * (w - width(s))
    return gap + s if right else s + gap


NUMERIC = {1, 2, 4, 5, 6, 7}


def plain_table(header: list[str], rows: list[list[str]], right: Container[int] = ()) -> str:
    """The plain-text table every tool prints: columns two spaces apart, a dashed rule
    under the header; the columns whose index is in ``right`` are right-aligned."""
    widths = [max(width(c) for c in col) for col in zip(header, *rows, strict=True)]

    def line(row: list[str]) -> str:
        return "  ".join(pad(c, w, i in right)
                         for i, (c, w) in enumerate(zip(row, widths, strict=True))).rstrip()

    return "\n".join([line(header), "  ".join("-" * w for w in widths), *map(line, rows)])


def md_table(header: list[str], rows: list[list[str]], right: Container[int] = ()) -> str:
    """The Markdown table every tool writes; cells are Markdown already (``md_cell``,
    ``md_code``), and the columns whose index is in ``right`` are right-aligned."""
    align = ["--:" if i in right else "---" for i in range(len(header))]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(align) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def text_table(rows: list[dict]) -> str:
    return plain_table(list(COLUMNS), [cells(r) for r in rows], NUMERIC)


def md_cell(s: str) -> str:
    return s.replace("|", "\\|")


def md_code(s: str) -> str:
    """A code span that renders the same in MkDocs and on GitHub (no pipe inside)."""
    s = s.replace("|", "¦")  # an escaped pipe would show its backslash in MkDocs' code spans
    return f"`` {s} ``" if "`" in s else f"`{s}`"


def md_sample_tabs(rows: list[dict]) -> str:
    """Each row's sample in a code block of its own, one tab per stage (Material's
    ``=== "label"`` tabs; elsewhere a label and an indented code block), so the table
    itself keeps only numbers and fits a page column."""
    blocks = []
    for row, c in zip(rows, map(cells, rows), strict=True):
        text = row["sample"].replace("\r", "").strip("\n") or "(empty)"
        longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
        fence = "`" * max(3, longest + 1)  # a fence no run of backticks inside can close
        body = "\n".join(f"    {line}".rstrip() for line in text.split("\n"))
        blocks.append(f'=== "{c[0]}"\n\n    {fence}text\n{body}\n    {fence}')
    return "\n\n".join(blocks)


def markdown_table(rows: list[dict], title: str) -> str:
    """The table for the docs: the numbers in a table, then each stage's sample below it
    in its own block (a sample inside a table cell made every row tall and the table
    wider than the page)."""
    body = [list(map(md_cell, c[:-1])) for c in map(cells, rows)]
    table = md_table(list(COLUMNS[:-1]), body, NUMERIC)
    return (f"{title}\n\n{table}\n\nWhat each model writes after training, from a newline, "
            f"with the same seed:\n\n{md_sample_tabs(rows)}\n")


def title_for(runs: list[StageRun], args: argparse.Namespace) -> str:
    names = [str(r.number) for r in runs]
    who = (f"Stage {names[0]} vs stage {names[1]}" if len(names) == 2
           else f"Stages {', '.join(names)}" if len(names) > 1 else f"Stage {names[0]}")
    given = [f"batch {args.batch_size}" if args.batch_size else "",
             f"block {args.block_size}" if args.block_size else ""]
    given = [g for g in given if g]
    where = f"on {args.data}, seed {args.seed}"
    if args.threads:
        where += f", {args.threads} CPU thread{'s' if args.threads > 1 else ''}"
    if args.max_iters:
        budget = " × ".join([f"{args.max_iters} steps", *given])
        same = " at the same budget" if len(runs) > 1 else ""
        own = ["model size", "learning rate"]
        own += [x for x, given_ in (("batch", args.batch_size), ("block", args.block_size))
                if not given_]
        return f"{who}{same}: {budget} {where} ({', '.join(own)}: each stage's own)"
    except_ = f", except {' and '.join(given)}" if given else ""
    return f"{who}, each stage at its default settings{except_} ({where})"


def write_outputs(rows: list[dict], title: str, args: argparse.Namespace) -> None:
    if args.markdown:
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text(markdown_table(rows, title), encoding="utf-8")
        print(f"markdown: {args.markdown}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()
                    if k not in ("json", "markdown")}
        args.json.write_text(json.dumps({"title": title, "settings": settings, "rows": rows},
                                        ensure_ascii=False, indent=2), encoding="utf-8")
        print(f"json:     {args.json}")


def load_average() -> float | None:
    """The 1-minute load average, where the system tells it."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


def busy_note(consequence: str = "other processes were busy, so the times above are longer "
                                  "than on an idle machine.") -> str | None:
    """A warning when other processes compete for the CPU (1-minute load average)."""
    load = load_average()
    cpus = os.cpu_count() or 1
    if load is None or load <= 0.75 * cpus:
        return None
    return f"note: load average {load:.1f} on {cpus} CPUs: {consequence}"


# ----------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="replace")  # ⏎ and Chinese on any terminal
    if args.data not in BUILTIN_DATA and not Path(args.data).is_file():
        parser.error(f"--data {args.data}: no such file; give en, zh, shakespeare or a "
                     "path to a UTF-8 text file")
    try:
        shlex.split(args.extra_args)
    except ValueError as e:
        parser.error(f"--extra-args: {e}")
    try:
        runs = plan_runs(args)
    except (CompareError, ValueError) as e:
        parser.error(str(e))
    title = title_for(runs, args)
    print(title, flush=True)
    for note in warnings_for(runs, args):
        print(note, flush=True)
    rows = []
    try:
        for i, run in enumerate(runs, 1):
            rows.append(run_stage(run, i, len(runs)))
    except CompareError as e:
        print(f"compare: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"\ncompare: interrupted after {len(rows)} of {len(runs)} stages", file=sys.stderr)
        return 130
    print(f"\n{title}\n{text_table(rows)}")
    if note := busy_note():
        print(note)
    write_outputs(rows, title, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
