"""The run store: each distinct run of a stage is made once, and what it printed is kept.

A ``Run`` is a command a reader could type, e.g. ``python -m stage5_gpt.train --data zh
--seed 1337 --threads 2 --dtype bfloat16``: every setting that decides its numbers is on
the command line, so the command repeats the run number for number on this kind of
machine. The store keeps, per run, ``docs/generated/runs/<id>.json`` (committed: the
command, its key, what it printed, and for a training run its metrics and loss log) and
the run's output folder (checkpoints, figures) in ``.cache/docs/runs/<id>/`` (not
committed: a page that needs a checkpoint the cache lacks gets the run made again, and
the store checks that it ends on the very numbers it stored).

A run's key says when it must be made again: when its command, its corpus or the
*meaning* of the stage code it runs changes. Meaning is the syntax tree without
docstrings, so comments, docstrings and formatting do not count; and a training run's
numbers do not depend on the modules that only draw or print after training (DRAWING).

Each record keeps the machine it was made on (``machine``): its kind of CPU, which decides
whether the run repeats bit for bit, and its speed on a small fixed piece of work, by which
``estimate`` scales the run's stored time to this machine.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RUNS = ROOT / "docs" / "generated" / "runs"  # the stored facts, one JSON file per run
CACHE = ROOT / ".cache" / "docs"  # run folders, scratch space, the classic corpora
# Modules that draw or print what a trained model does: a training run never reads them
# before its numbers are final, so they are not part of its key.
DRAWING = {"__main__.py", "buildup.py", "inspect.py", "lens.py", "plots.py", "prompts.py",
           "sample.py", "visualize.py"}
# Every docs run pins the thread count (another count rounds sums differently): one thread,
# so that two runs at a time share the two cores of the machine the docs are made on.
THREADS = "1"
CLASSIC = {"shakespeare": "tinyshakespeare.txt", "tang": "tang-99ebbef7e134.txt"}  # in CACHE/data
# The fixed piece of work whose time says how fast a machine is (calibration); change its
# name with the work, and times measured with the old one are no longer scaled by it.
CALIBRATION = "mlp 256x128x512, 20 steps, 1 thread"
GUESS = 60.0  # seconds, for a run that was never made: no time to go by


@cache
def meaning(path: Path) -> str:
    """sha256 of what a file means: a Python file's syntax tree without docstrings
    (comments, docstrings and formatting do not count), any other file's bytes."""
    if path.suffix != ".py":
        return hashlib.sha256(path.read_bytes()).hexdigest()
    return tree_meaning(ast.parse(path.read_text(encoding="utf-8")))


def tree_meaning(tree: ast.AST) -> str:
    """sha256 of a syntax tree without its docstrings."""
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(body, list) and body and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str)):
            node.body = body[1:] or [ast.Pass()]
    return hashlib.sha256(ast.dump(tree).encode()).hexdigest()


def code_key(*paths: Path) -> str:
    """One hash for the meaning of several files (or every file below a folder)."""
    files = sorted(p for path in paths for p in ([path] if path.is_file() else path.rglob("*"))
                   if p.is_file() and "__pycache__" not in p.parts)
    h = hashlib.sha256()
    for p in files:
        h.update(f"{p.relative_to(ROOT).as_posix()} {meaning(p)}\n".encode())
    return h.hexdigest()


@dataclass(frozen=True)
class Run:
    """``python -m {stage}.{module} {flags}`` with the settings that fix its numbers added.
    ``data`` names the corpus when the flags do not (a preset, or the default ``en``)."""

    stage: str
    flags: tuple[str, ...] = ()
    module: str = "train"  # "" for the stage's own ``python -m stageN_x``
    data: str = ""
    fails: bool = False  # the command is expected to end with an error (kept: stderr)
    after: Run | None = None  # a training run whose out/ folder this command reads
    files: tuple[tuple[str, bytes], ...] = ()  # files the command reads, made beside it

    def __init__(self, stage: str, *flags: str, module: str = "train", data: str = "",
                 fails: bool = False, after: Run | None = None,
                 files: tuple[tuple[str, bytes], ...] = ()):
        flags = tuple(str(f) for f in flags)
        if module == "train" and not fails:  # every setting that decides the numbers
            flags += ("--seed", "1337") if "--seed" not in flags else ()
            flags += ("--threads", THREADS) if "--threads" not in flags else ()
            if stage == "stage5_gpt" and "--dtype" not in flags:
                flags += ("--dtype", "float32")
        given = flags[flags.index("--data") + 1] if "--data" in flags else None
        data = given or data or (after.data if after else "en")
        for name, value in (("stage", stage), ("flags", flags), ("module", module),
                            ("data", data), ("fails", fails), ("after", after), ("files", files)):
            object.__setattr__(self, name, value)

    @property
    def id(self) -> str:
        words = [self.stage, self.module or "main"] + [f.lstrip("-") for f in self.flags]
        if self.after:
            words += ["after", self.after.id]
        return "-".join(w.replace("/", "_").replace(" ", "_") for w in words)[:200]

    @property
    def command(self) -> str:
        module = f"{self.stage}.{self.module}" if self.module else self.stage
        return shlex.join(["python", "-m", module, *self.flags])

    def key(self) -> str:
        stage = ROOT / self.stage
        code = [p for p in stage.glob("*.py") if self.module != "train" or p.name not in DRAWING]
        corpus = stage / "corpus" / {"en": "en.txt", "zh": "zh.txt", "tang": "tang.sha256"}.get(
            self.data, "")
        what = {"command": self.command, "code": code_key(*code),
                "corpus": meaning(corpus) if corpus.is_file() else self.data,
                "after": facts_key(self.after) if self.after else None,  # its checkpoint
                "files": [[name, hashlib.sha256(data).hexdigest()] for name, data in self.files]}
        return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()


@dataclass
class Stored:
    """What the store keeps of a run."""

    command: str
    key: str
    stdout: str
    metrics: dict = field(default_factory=dict)
    log: list = field(default_factory=list)
    seconds: float = 0.0
    machine: dict = field(default_factory=dict)


@cache
def machine() -> dict:
    """Where a run was made. ``kind`` decides whether it repeats bit for bit: PyTorch picks
    its vector kernels by the CPU's instruction sets (``AVX2``, ``AVX512``), and two CPUs of
    one name (``AMD EPYC``) may differ in family and in those, and sum in another order."""
    import torch

    info = Path("/proc/cpuinfo")
    first = info.read_text().split("\n\n")[0] if info.is_file() else ""  # the first processor
    fields = {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in first.splitlines())}
    cpu = fields.get("model name") or platform.processor()
    kind = (f"{cpu}, family {fields.get('cpu family', '?')} model {fields.get('model', '?')}, "
            f"{torch.backends.cpu.get_cpu_capability()}")
    return {"torch": torch.__version__, "cpu": cpu, "kind": kind,
            "python": platform.python_version(), "calibration": calibration()}


def calibration(repeats: int = 6) -> dict:
    """How fast this machine is: the seconds a fixed piece of training (CALIBRATION: a small
    MLP's forward, backward and update, on one thread as the docs runs are) takes, the least
    of ``repeats`` tries so that a busy moment counts little; about a second in all. A run's
    stored time times the ratio of two machines' seconds is about its time on the other."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        g = torch.Generator().manual_seed(0)
        w1 = (torch.randn(128, 512, generator=g) * 0.05).requires_grad_()
        w2 = (torch.randn(512, 128, generator=g) * 0.05).requires_grad_()
        x = torch.randn(256, 128, generator=g)
        best = float("inf")
        for _ in range(repeats):
            t0 = time.perf_counter()
            for _ in range(20):
                loss = torch.nn.functional.gelu(x @ w1).matmul(w2).softmax(-1).square().mean()
                loss.backward()
                with torch.no_grad():
                    for w in (w1, w2):
                        w -= 0.01 * w.grad
                        w.grad = None
            best = min(best, time.perf_counter() - t0)
    finally:
        torch.set_num_threads(threads)
    return {"work": CALIBRATION, "seconds": round(best, 4)}


def scaled(seconds: float, made_on: dict) -> tuple[float, bool]:
    """``seconds`` measured on the machine ``made_on`` (a record's ``machine``), as this one
    would take them: scaled by the two machines' calibration; as measured, and False, when
    the record has none (made before machines kept one) or one of another work."""
    theirs, mine = made_on.get("calibration") or {}, machine().get("calibration") or {}
    if theirs.get("work") == mine.get("work") and theirs.get("seconds") and mine.get("seconds"):
        return seconds * mine["seconds"] / theirs["seconds"], True
    return seconds, False


def estimate(run: Run) -> tuple[float, bool]:
    """About how long making ``run`` takes on this machine, and whether that is its stored
    time scaled to this machine (False: as stored, or GUESS for a run never made)."""
    stored = load(run)
    return scaled(stored.seconds, stored.machine) if stored else (GUESS, False)


def path_of(run: Run) -> Path:
    return RUNS / f"{run.id}.json"


def load(run: Run) -> Stored | None:
    try:
        return Stored(**json.loads(path_of(run).read_text(encoding="utf-8")))
    except (OSError, ValueError, TypeError):
        return None


def fresh(run: Run) -> bool:
    stored = load(run)
    return stored is not None and stored.key == run.key()


def require(run: Run) -> None:
    """Stop with a one-line error if ``run`` reads a classic corpus the cache lacks."""
    if run.data in CLASSIC and not (CACHE / "data" / CLASSIC[run.data]).exists():
        sys.exit(f"error: `{run.command}` needs the {run.data} corpus: pass "
                 f"--{run.data} {'FOLDER' if run.data == 'tang' else 'FILE'} once "
                 "(python -m tools.docs keeps it in .cache/docs/data/)")


def use_classic_corpora() -> None:
    """Let a job read Tiny Shakespeare and the Tang poems where --shakespeare and --tang put
    them (the stages look in $GPT_STAGES_CACHE), as the runs themselves do."""
    os.environ["GPT_STAGES_CACHE"] = str(CACHE / "data")


def run_dir(run: Run) -> Path:
    return CACHE / "runs" / run.id


def execute(run: Run) -> Stored:
    """Make the run in a scratch folder as a reader would, keep its folder and its facts."""
    require(run)
    work = CACHE / "work" / run.id
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONHASHSEED": "0",
           "GPT_STAGES_CACHE": str(CACHE / "data"), "PYTHONIOENCODING": "utf-8"}
    if run.after:  # the reader trained first: its out/ folder is where the command looks
        shutil.copytree(folder(run.after), work / "out" / run.stage)
    for name, data in run.files:
        (work / name).write_bytes(data)
    t0 = time.time()
    proc = subprocess.run([sys.executable, *shlex.split(run.command)[1:]], cwd=work, env=env,
                          capture_output=True, text=True, encoding="utf-8")
    if (proc.returncode != 0) != run.fails:
        sys.exit(f"`{run.command}` exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    # A training run ends by comparing itself with references/ ("is my loss normal?"), which
    # the docs make from these very runs: that verdict is not part of the run's facts.
    stdout = without_verdict(proc.stdout)
    stored = Stored(command=run.command, key=run.key(), seconds=round(time.time() - t0, 1),
                    stdout=proc.stderr if run.fails else stdout, machine=machine())
    out = work / "out" / run.stage
    if run.module == "train" and not run.fails:
        stored.metrics = json.loads((out / "metrics.json").read_text(encoding="utf-8"))
        stored.log = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    shutil.rmtree(run_dir(run), ignore_errors=True)
    run_dir(run).mkdir(parents=True)
    if out.is_dir():
        shutil.copytree(out, run_dir(run), dirs_exist_ok=True)
    (run_dir(run) / "facts.txt").write_text(fingerprint(stored))
    shutil.rmtree(work, ignore_errors=True)
    print(f"  {run.command}  ({stored.seconds:.0f} s)", flush=True)
    return stored


VERDICT = re.compile(r"^is this loss normal\?.*(?:\n|$)(?:  .*(?:\n|$))*", re.MULTILINE)


def without_verdict(stdout: str) -> str:
    """``stdout`` without the "is this loss normal?" line and the indented lines after it."""
    return "\n".join(VERDICT.sub("", stdout).splitlines()) + "\n"


def save(run: Run, stored: Stored) -> None:
    RUNS.mkdir(parents=True, exist_ok=True)
    path_of(run).write_text(json.dumps(stored.__dict__, ensure_ascii=False, indent=1) + "\n",
                            encoding="utf-8")


def make(run: Run) -> Stored:
    """The stored facts of ``run``, made first if they are missing or stale."""
    stored = load(run)
    if stored is None or stored.key != run.key():
        stored = execute(run)
        save(run, stored)
    return stored


def alone(run: Run) -> bool:
    """A run on more threads than one has the machine to itself: its time is on the page."""
    return "--threads" in run.flags and run.flags[run.flags.index("--threads") + 1] != THREADS


def in_turn(work: Callable[[Run], object], runs: list[Run], workers: int = 2) -> None:
    """``work(run)`` for each run: those on one thread ``workers`` at a time, then the
    others one by one."""
    from concurrent.futures import ThreadPoolExecutor

    runs = list(dict.fromkeys(runs))
    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(work, [r for r in runs if not alone(r)]))  # and raise
    for run in filter(alone, runs):
        work(run)


def in_turn_seconds(runs: dict[Run, float], workers: int = 2) -> float:
    """How long ``in_turn`` takes over ``runs`` (each run: its seconds): those on one thread
    go, in order, to whichever of the ``workers`` is free first; then the others one by one."""
    free = [0.0] * workers
    for run, seconds in runs.items():
        if not alone(run):
            free[free.index(min(free))] += seconds
    return max(free) + sum(seconds for run, seconds in runs.items() if alone(run))


def make_all(runs: list[Run]) -> None:
    """Make ``runs`` (stale, or stored on another kind of CPU) and store them. A command that
    reads another run's folder comes after it, and after that folder is made."""
    todo = list(dict.fromkeys(runs))
    in_turn(lambda r: save(r, execute(r)), [r for r in todo if not r.after])
    in_turn(folder, [r.after for r in todo if r.after])
    in_turn(lambda r: save(r, execute(r)), [r for r in todo if r.after])


def folder(run: Run) -> Path:
    """The run's output folder (checkpoints, loss log, ...), made again if the cache lacks
    it. On the kind of CPU the run was stored on (``machine``) the remade run must end on
    the stored numbers bit for bit, or the stage is not deterministic: an error. On another
    kind the sums' last bits differ and 2,000 steps grow them into other printed numbers:
    the run made here replaces the stored one, and the jobs that read it become stale."""
    stored, here = make(run), run_dir(run)
    if not cached(run):
        again = execute(run)
        if numbers(again) == numbers(stored):
            (here / "facts.txt").write_text(fingerprint(stored))
            return here
        kind = stored.machine.get("kind")
        if kind == machine()["kind"]:
            shutil.rmtree(here)  # no folder that disagrees with the facts the pages show
            sys.exit(f"{run.command} did not repeat its stored numbers on the kind of CPU it "
                     f"was stored on ({kind}): val loss {again.metrics.get('val_loss')} now, "
                     f"{stored.metrics.get('val_loss')} stored; something in it is not "
                     "deterministic")
        print(f"  made again on {machine()['kind']} (stored on {kind}): its facts replace the "
              "stored ones", flush=True)
        save(run, again)
    return here


def numbers(stored: Stored) -> tuple[dict, str]:
    """What a remade run must repeat: its metrics but the time, or its output if it has none."""
    metrics = {k: v for k, v in stored.metrics.items() if k != "train_seconds"}
    return metrics, "" if metrics else stored.stdout


def fingerprint(stored: Stored) -> str:
    """What a run's folder is checked against: the facts made with it."""
    return hashlib.sha256(json.dumps([stored.key, stored.stdout, stored.metrics]).encode()).hexdigest()


def cached(run: Run) -> bool:
    """Does the cache hold the folder of the run whose facts are stored?"""
    stored, mark = load(run), run_dir(run) / "facts.txt"
    return stored is not None and mark.is_file() and mark.read_text() == fingerprint(stored)


def made_here(run: Run) -> bool:
    """Was the stored run made on this kind of CPU (so that it repeats here bit for bit)?"""
    stored = load(run)
    return stored is not None and stored.machine.get("kind") == machine()["kind"]


def facts_key(run: Run) -> str:
    """What a job that reads ``run`` depends on: the stored facts, once they are fresh."""
    return hashlib.sha256(path_of(run).read_bytes()).hexdigest() if fresh(run) else run.key()


def provide(shakespeare: Path | None = None, tang: Path | None = None) -> None:
    """Put local copies of the classic corpora where the stages look (GPT_STAGES_CACHE),
    checked as a download is: Tiny Shakespeare by its sha256; the Tang poems' 58 files by
    theirs, their regulated verse extracted once into the cached text (stage5_gpt/tang.py)."""
    from stage5_gpt import tang as poems
    from stage5_gpt.data import SHAKESPEARE_SHA256
    from stage5_gpt.errors import UserError

    data = CACHE / "data"
    data.mkdir(parents=True, exist_ok=True)
    try:
        if shakespeare:
            if hashlib.sha256(shakespeare.read_bytes()).hexdigest() != SHAKESPEARE_SHA256:
                raise UserError(f"{shakespeare} is not Tiny Shakespeare (its sha256 differs from "
                                "the one stage5_gpt/data.py pins)")
            shutil.copy(shakespeare, data / CLASSIC["shakespeare"])
        if tang:
            poems.text_file(data, tang)
    except (OSError, UserError) as e:  # the stages' message names their flag, --data
        sys.exit(f"error: {str(e).replace('--data FOLDER', '--tang FOLDER')}")
