"""Regenerate the numbers, outputs and figures the docs quote, by running the stages;
only the parts whose inputs changed.

    python tools/gen_docs.py --list                   # every job: fresh or stale, and its time
    python tools/gen_docs.py                          # rerun the stale jobs, and only those
    python tools/gen_docs.py --shakespeare PATH       # ... the Tiny Shakespeare ones included
    python tools/gen_docs.py --only stage5_en worked  # these jobs (and the tables built on them)
    python tools/gen_docs.py --all --shakespeare PATH # everything: about half an hour on 2 cores
    python tools/gen_docs.py --restamp                # record the inputs as current; runs nothing

The work is split into named jobs (see --list). Each one declares its inputs: the
stage folders it runs (their sources and built-in corpora), the tool scripts it
calls, the functions of this script and of tools/compare.py it runs, its settings,
and the jobs whose results it builds on; and the files it writes under
docs/generated/. docs/generated/manifest.json records, per job, a hash of its
inputs and the list of its outputs. A job is stale when its inputs hash no longer
matches the recorded one; a job built on a stale job is stale too (its hash covers
theirs). tests/test_docs_generated.py fails while any job is stale, names the stale
jobs and says what to run.

Each training job stores its table row in docs/generated/runs/<job>.json. The
tables that set several stages side by side (compare_en.md, compare_budget_en.md,
compare_shakespeare.md, and the stage-3 and stage-4 variant tables) are assembled
from those stored rows in well under a second, so a change to one stage reruns that
stage's trainings and then assembles the tables again. A change to stage5_gpt/ only
reruns stage5_en, stage5_zh, budget_stage5, bench (it times stage 4 against stage
5) and, with --shakespeare, stage5_shakespeare, then the tables: about 8 minutes on 2
cores, 10 with Tiny Shakespeare (--list shows each job's time; the manifest keeps the
time each job took when it last ran).

The Tiny Shakespeare jobs need --shakespeare PATH, a local copy of the corpus (it
is not in the repository). Without it they are reported as stale but skipped, not
as an error. Their hash covers the stage sources and the corpus's expected sha256
(SHAKESPEARE_SHA256), which PATH must match, not the file itself.

--restamp records the current input hashes of every job without running any. Use
it only after you verified that the outputs are current, for instance after a
change to this script that does not change what its jobs produce.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import inspect
import json
import math
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GEN = ROOT / "docs" / "generated"  # outputs are named relative to this folder
MANIFEST = "manifest.json"
RUNS = "runs"  # GEN/runs/<job>.json: a training job's table row
STAGES = ["stage2_bigram", "stage3_attention", "stage4_block", "stage5_gpt"]
FIGURES = {"stage2_bigram": ("loss",)}  # what each trainer draws; the others add attention
# Tiny Shakespeare as the stages download it (their data.py checks the same sha256).
SHAKESPEARE_SHA256 = "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"
SHAKESPEARE_FILE = "tinyshakespeare.txt"  # its name in the scratch folder: a short path in outputs
# Stage 5 on Tiny Shakespeare: nanoGPT's CPU configuration, a preset of stage5_gpt/train.py.
NANOGPT_CPU = ("--preset", "nanogpt-cpu")
# The same-budget table: tools/compare.py's options, one stage at a time.
BUDGET = ("--data", "en", "--max-iters", "2000", "--batch-size", "16", "--block-size", "32")


def load_compare():
    """tools/compare.py as a module: its tables and run files are the ones the docs show."""
    spec = importlib.util.spec_from_file_location("compare", ROOT / "tools" / "compare.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["compare"] = module
    spec.loader.exec_module(module)
    return module


compare = load_compare()  # no torch import: cheap
# The runs here make the reference of "is my loss normal?": they must not print a verdict
# against the reference they are about to replace (every stage's harness.py reads this).
os.environ["COURSE_NO_REFERENCE"] = "1"


# ----------------------------------------------------------------------------- helpers


def run(cwd: Path, *args: str, stderr: bool = False, ok: bool = True, script: bool = False) -> str:
    """Run ``python -m ...`` (or a script) as a reader would, from a scratch folder.

    Returns stdout, or stderr with ``stderr=True``; ``ok=False`` expects a failure.
    """
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONHASHSEED": "0"}
    cmd = [sys.executable, *args] if script else [sys.executable, "-m", *args]
    t0 = time.time()
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    if (proc.returncode == 0) != ok:
        sys.exit(f"`{' '.join(cmd)}` exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    print(f"  {' '.join(args)}  ({time.time() - t0:.0f} s)", flush=True)
    return proc.stderr if stderr else proc.stdout


def write(name: str, text: str) -> None:
    path = GEN / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text.rstrip("\n") + "\n", encoding="utf-8")


def record_run(job: Job, row: dict) -> None:
    """Keep a training job's table row: the tables are assembled from these."""
    write(f"{RUNS}/{job.name}.json", json.dumps(row, ensure_ascii=False, indent=2))


def load_run(name: str) -> dict:
    path = GEN / RUNS / f"{name}.json"
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError:
        sys.exit(f"{path} is missing: run `python tools/gen_docs.py --only {name}`")


def copy_output(job: Job, src: Path, name: str) -> None:
    """Copy a file a stage wrote into docs/generated/, if the job declares it."""
    if name not in job.outputs:
        print(f"  (left out: {name} is not among the outputs of job {job.name})")
        return
    (GEN / name).parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(src, GEN / name)


def train(work: Path, stage: str, out: str, *flags: str) -> tuple[dict, str]:
    """Train one stage; returns its row for compare.markdown_table and its stdout.

    The row comes from the files the trainer writes (metrics.json, log.jsonl).
    """
    stdout = run(work, f"{stage}.train", "--out-dir", out, *flags)
    metrics = compare.read_run(work / out)
    row = compare.table_row(int(stage[5]), stage, metrics)
    row["command"] = shlex.join(["python", "-m", f"{stage}.train", "--out-dir", out, *flags])
    return row, stdout


def variants_table(rows: list[tuple[str, dict]]) -> str:
    return compare.md_table(
        ["flags", "parameters", "train loss", "val loss", "time (s)"],
        [[compare.md_code(flags or "(defaults)"), f"{r['params']:,}", f"{r['train_loss']:.4f}",
          f"{r['val_loss']:.4f}", f"{r['train_seconds']:.1f}"] for flags, r in rows],
        right={1, 2, 3, 4})


def errors(work: Path) -> str:
    """What the bad inputs of stage 1 and 2 print (stderr), for the error tables."""
    (work / "gbk.txt").write_bytes("你好，世界".encode("gbk"))
    (work / "empty.txt").write_text("", encoding="utf-8")
    cases = [
        ("stage1_data", "--data", "missing.txt"),
        ("stage1_data", "--data", "gbk.txt"),
        ("stage1_data", "--data", "empty.txt"),
        ("stage1_data", "--block-size", "100000"),
        ("stage2_bigram.sample", "--prompt", "café"),
        ("stage2_bigram.train", "--lr", "0"),
    ]
    out = []
    for case in cases:
        err = run(work, *case, stderr=True, ok=False).strip().splitlines()[-1]
        out.append(f"$ python -m {' '.join(case)}\n{err}\n")
    return "\n".join(out)


def worked_examples() -> None:
    """The 3x3 attention example of the stage-3 page, computed, not typed."""
    import torch

    q = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    k = torch.tensor([[1.0, 0.0], [1.0, 1.0], [0.0, 2.0]])
    v = torch.tensor([[1.0, 0.0], [0.0, 1.0], [2.0, 2.0]])
    hs = q.shape[1]
    scores = q @ k.T
    scaled = scores / math.sqrt(hs)
    mask = torch.tril(torch.ones(3, 3))
    masked = scaled.masked_fill(mask == 0, float("-inf"))
    weights = torch.softmax(masked, dim=-1)
    out = weights @ v

    def tex(m: torch.Tensor) -> str:
        def cell(x: float) -> str:
            return r"-\infty" if x == float("-inf") else f"{x:.2f}".rstrip("0").rstrip(".")
        rows = [" & ".join(cell(float(x)) for x in row) for row in m]
        return r"\begin{bmatrix}" + r" \\ ".join(rows) + r"\end{bmatrix}"

    w2 = weights[2]
    parts = " + ".join(f"{float(w2[j]):.2f}" + r"\," + tex(v[j : j + 1]) for j in range(3))
    text = f"""Three tokens, head size $d_k = {hs}$. Queries, keys and values:

$$
Q = {tex(q)}, \\quad K = {tex(k)}, \\quad V = {tex(v)}
$$

Scores, then scaled by $1/\\sqrt{{d_k}} = {1 / math.sqrt(hs):.3f}$:

$$
QK^\\top = {tex(scores)}, \\qquad \\frac{{QK^\\top}}{{\\sqrt{{d_k}}}} = {tex(scaled)}
$$

The causal mask adds $-\\infty$ above the diagonal (a token may not look ahead), and the
softmax of each row turns scores into weights that sum to 1 ($e^{{-\\infty}} = 0$):

$$
M = {tex(torch.where(mask == 1, 0.0, float("-inf")))}, \\qquad
\\operatorname{{softmax}}\\!\\left(\\frac{{QK^\\top}}{{\\sqrt{{d_k}}}} + M\\right) = {tex(weights)}
$$

Each output row is a weighted sum of value vectors. For the last token:

$$
\\text{{out}}_2 = {parts} = {tex(out[2:3])}
$$

and all three at once:

$$
\\text{{out}} = \\operatorname{{softmax}}(\\cdot)\\, V = {tex(out)}
$$
"""
    write("worked_attention.md", text)
    print("  worked_attention.md")


# ----------------------------------------------------------------------------- what jobs do
# Each takes the scratch folder of this invocation and its job, plus the job's params.


def worked_job(work: Path, job: Job) -> None:
    worked_examples()


def stage1_job(work: Path, job: Job) -> None:
    write("stage1_data.txt", run(work, "stage1_data"))


def errors_job(work: Path, job: Job) -> None:
    write("stage1_errors.txt", errors(work))


def train_job(work: Path, job: Job, stage: str, out: str, flags: tuple[str, ...],
              transcript: str | None = None, tag: str = "", figures: bool = True,
              record: bool = True) -> None:
    """Train a stage; keep what it printed, its figures and its table row."""
    row, stdout = train(work, stage, out, *flags)
    if transcript:
        write(transcript, stdout)
    for fig in ("loss", "attention") if figures else ():
        if (work / out / f"{fig}.png").exists():
            copy_output(job, work / out / f"{fig}.png", f"img/{stage}_{fig}{tag}.png")
    if record:
        record_run(job, row)


def gpt_job(work: Path, job: Job, out: str, flags: tuple[str, ...], transcript: str,
            prefix: str, figures: bool, record: bool, prompts: bool) -> None:
    """Stage 5: train, then draw its figures (visualize) and, with ``prompts``, show
    one head's computation (inspect) and a streamed sample."""
    train_job(work, job, "stage5_gpt", out, flags, transcript, figures=figures, record=record)
    run(work, "stage5_gpt.visualize", "--ckpt", f"{out}/best.pt", "--out-dir", f"{out}/figures")
    for png in sorted((work / out / "figures").glob("*.png")):
        copy_output(job, png, f"img/{prefix}_{png.name}")
    for md in sorted((work / out / "figures").glob("*.md")):  # what two figures show, in numbers
        copy_output(job, md, f"{prefix}_{md.name}")
    if prompts:
        write("stage5_gpt_inspect.txt", run(work, "stage5_gpt.inspect", "--ckpt", f"{out}/best.pt",
                                            "--prompt", "Pip the"))
        write("stage5_gpt_sample.txt", run(work, "stage5_gpt.sample", "--ckpt", f"{out}/best.pt",
                                           "--prompt", "TEACHER:", "--tokens", "300",
                                           "--temperature", "0.8"))


def budget_job(work: Path, job: Job, number: int, flags: tuple[str, ...]) -> None:
    """One stage's row of the same-budget table, by tools/compare.py itself."""
    rows = work / "out" / "budget" / f"{job.name}.json"
    run(work, str(ROOT / "tools" / "compare.py"), "--stages", str(number), *flags,
        "--out-dir", "out/budget", "--json", str(rows), script=True)
    record_run(job, json.loads(rows.read_text(encoding="utf-8"))["rows"][0])


def bench_job(work: Path, job: Job) -> None:
    out = run(work, str(ROOT / "tools" / "bench.py"), script=True)
    write("bench.txt", out)
    # Section (c), the KV cache, is also shown on its own on the flows page.
    start = out.index("\n(c) ")
    write("bench_cache.txt", out[start:out.index("\n(d) ", start)].strip("\n"))


def compare_table_job(work: Path, job: Job, title: str) -> None:
    """A table of stages side by side, from the rows their jobs stored."""
    write(job.outputs[0], compare.markdown_table([load_run(n) for n in job.needs], title))


def budget_table_job(work: Path, job: Job, flags: tuple[str, ...]) -> None:
    """The same-budget table: the stored rows, under the title compare.py gives them."""
    args = compare.build_parser().parse_args(["--stages", "2", "3", "4", "5", *flags])
    title = compare.title_for(compare.plan_runs(args), args)
    write(job.outputs[0], compare.markdown_table([load_run(n) for n in job.needs], title))


def variants_job(work: Path, job: Job, labels: tuple[str, ...]) -> None:
    """A table of one stage's variants, from the rows their jobs stored."""
    write(job.outputs[0], variants_table([(label, load_run(n))
                                          for label, n in zip(labels, job.needs, strict=True)]))


# ----------------------------------------------------------------------------- the jobs

TRAINING = ("run", "train", "write", "record_run", "copy_output", "train_job",
            "compare.log_rows", "compare.read_log", "compare.read_run", "compare.table_row",
            "compare.stage_defaults")
TABLE = ("write", "load_run")


@dataclass
class Job:
    """One unit of regeneration: what it runs, what it reads, what it writes."""

    name: str
    about: str
    action: Callable[..., None]
    params: dict = field(default_factory=dict)  # keyword arguments of ``action``
    stages: tuple[str, ...] = ()  # stage folders it runs: sources and built-in corpora
    files: tuple[str, ...] = ()  # other files of the repository it runs or reads
    code: tuple[str, ...] = ()  # functions here ("name") or in compare.py ("compare.name")
    needs: tuple[str, ...] = ()  # jobs whose stored rows it builds on
    outputs: tuple[str, ...] = ()  # files it writes, relative to docs/generated/
    seconds: int = 1  # about how long it takes on 2 cores (the manifest keeps the last time)
    shakespeare: bool = False  # needs --shakespeare PATH

    def identity(self) -> str:
        """Everything about the job that decides what it produces."""
        return repr((self.name, self.action.__name__, self.params, self.stages, self.files,
                     self.code, self.needs, self.outputs, self.shakespeare))


def train_outputs(stage: str, tag: str) -> tuple[str, ...]:
    """What train_job keeps of a stage's training: what it printed and its figures."""
    return (f"{stage}_train{tag}.txt",
            *(f"img/{stage}_{fig}{tag}.png" for fig in FIGURES.get(stage, ("loss", "attention"))))


VISUALIZE = ("attention_grid", "attention_layer0", "attention_layer1", "attention_layer2",
             "attention_layer3", "layer_predictions", "loss", "position_similarity")
READINGS = ("layer_predictions", "position_similarity")  # visualize writes their numbers (.md)


def build_jobs() -> list[Job]:
    """Every job, each after the jobs it needs."""
    jobs = [
        Job("worked", "the 3x3 attention example of the stage-3 page (no training)",
            worked_job, code=("worked_examples", "write"), outputs=("worked_attention.md",),
            seconds=3),
        Job("stage1", "what stage 1 prints about the English corpus", stage1_job,
            stages=("stage1_data",), code=("run", "write"), outputs=("stage1_data.txt",),
            seconds=5),
        Job("errors", "the messages of stages 1 and 2 for bad input", errors_job,
            stages=("stage1_data", "stage2_bigram"), code=("run", "write", "errors"),
            outputs=("stage1_errors.txt",), seconds=20),
    ]
    # Every stage at its defaults on the English corpus; stage 5 also its figures,
    # one head's computation and a sample.
    en_seconds = {"stage2_bigram": 12, "stage3_attention": 28, "stage4_block": 100}
    for stage in STAGES[:-1]:
        n = stage[5]
        jobs.append(Job(
            f"stage{n}_en", f"train {stage} at its defaults on en", train_job,
            params={"stage": stage, "out": f"out/{stage}", "flags": ("--data", "en"),
                    "transcript": f"{stage}_train.txt"},
            stages=(stage,), code=TRAINING,
            outputs=(*train_outputs(stage, ""), f"{RUNS}/stage{n}_en.json"),
            seconds=en_seconds[stage]))
    jobs.append(Job(
        "stage5_en", "train stage5_gpt at its defaults on en; its figures, inspect, sample",
        gpt_job, params={"out": "out/stage5_gpt", "flags": ("--data", "en"),
                         "transcript": "stage5_gpt_train.txt", "prefix": "stage5_gpt",
                         "figures": True, "record": True, "prompts": True},
        stages=("stage5_gpt",), code=(*TRAINING, "gpt_job"),
        outputs=(*train_outputs("stage5_gpt", ""),
                 *(f"img/stage5_gpt_{f}.png" for f in VISUALIZE if f != "loss"),
                 *(f"stage5_gpt_{f}.md" for f in READINGS),
                 "stage5_gpt_inspect.txt", "stage5_gpt_sample.txt", f"{RUNS}/stage5_en.json"),
        seconds=145))
    jobs.append(Job(
        "stage5_zh", "train stage5_gpt on zh, for the Chinese attention maps", gpt_job,
        params={"out": "out/zh", "flags": ("--data", "zh"), "transcript": "stage5_gpt_train_zh.txt",
                "prefix": "stage5_gpt_zh", "figures": False, "record": False, "prompts": False},
        stages=("stage5_gpt",), code=(*TRAINING, "gpt_job"),
        outputs=("stage5_gpt_train_zh.txt", *(f"img/stage5_gpt_zh_{f}.png" for f in VISUALIZE),
                 *(f"stage5_gpt_zh_{f}.md" for f in READINGS)),
        seconds=150))
    jobs.append(Job(
        "compare_en", "the table of every stage at its defaults on en", compare_table_job,
        params={"title": "Each stage at its default settings, on the built-in English corpus "
                         "(seed 1337)"},
        files=("tools/compare.py",), code=(*TABLE, "compare_table_job"),
        needs=("stage2_en", "stage3_en", "stage4_en", "stage5_en"),
        outputs=("compare_en.md",)))

    # Exercises: stage 3's position options, stage 4's variants.
    for pos, seconds in (("sinusoidal", 28), ("none", 28)):
        jobs.append(Job(
            f"stage3_pos_{pos}", f"train stage3_attention with --pos {pos}", train_job,
            params={"stage": "stage3_attention", "out": f"out/pos_{pos}",
                    "flags": ("--pos", pos)},
            stages=("stage3_attention",), code=TRAINING,
            outputs=(f"{RUNS}/stage3_pos_{pos}.json",), seconds=seconds))
    jobs.append(Job(
        "stage3_positions", "the table of stage 3's position options", variants_job,
        params={"labels": ("--pos learned", "--pos sinusoidal", "--pos none")},
        files=("tools/compare.py",), code=(*TABLE, "variants_job", "variants_table"),
        needs=("stage3_en", "stage3_pos_sinusoidal", "stage3_pos_none"),
        outputs=("stage3_attention_positions.md",)))
    variants = (("--n-head 1", 90), ("--norm post", 110), ("--activation gelu", 100))
    for flags, seconds in variants:
        name = f"stage4_{flags[2:].replace(' ', '_').replace('-', '_')}"
        jobs.append(Job(
            name, f"train stage4_block with {flags}", train_job,
            params={"stage": "stage4_block", "out": f"out/{flags[2:].replace(' ', '_')}",
                    "flags": tuple(flags.split())},
            stages=("stage4_block",), code=TRAINING, outputs=(f"{RUNS}/{name}.json",),
            seconds=seconds))
    jobs.append(Job(
        "stage4_variants", "the table of stage 4's variants", variants_job,
        params={"labels": ("", *(f for f, _ in variants))},
        files=("tools/compare.py",), code=(*TABLE, "variants_job", "variants_table"),
        needs=("stage4_en", *(f"stage4_{f[2:].replace(' ', '_').replace('-', '_')}"
                              for f, _ in variants)),
        outputs=("stage4_block_variants.md",)))

    # Every stage at one budget, by tools/compare.py, one stage per job.
    for stage, seconds in zip(STAGES, (12, 15, 48, 95), strict=True):
        n = stage[5]
        jobs.append(Job(
            f"budget_stage{n}", f"tools/compare.py --stages {n} at the same budget (2000 steps)",
            budget_job, params={"number": int(n), "flags": BUDGET}, stages=(stage,),
            files=("tools/compare.py",), code=("run", "write", "record_run", "budget_job"),
            outputs=(f"{RUNS}/budget_stage{n}.json",), seconds=seconds))
    jobs.append(Job(
        "compare_budget_en", "the table of every stage at the same budget", budget_table_job,
        params={"flags": BUDGET}, files=("tools/compare.py",), code=(*TABLE, "budget_table_job"),
        needs=tuple(f"budget_stage{s[5]}" for s in STAGES), outputs=("compare_budget_en.md",)))

    jobs.append(Job(
        "bench", "tools/bench.py: attention forms, stage 5 vs 4, KV cache, thread choice",
        bench_job, stages=("stage4_block", "stage5_gpt"),
        files=("tools/bench.py", "tools/compare.py"), code=("run", "write", "bench_job"),
        outputs=("bench.txt", "bench_cache.txt"), seconds=200))

    # Tiny Shakespeare: every stage; stage 5 in nanoGPT's CPU configuration.
    for stage, seconds in zip(STAGES, (15, 28, 120, 110), strict=True):
        n = stage[5]
        flags = ("--data", SHAKESPEARE_FILE, *(NANOGPT_CPU if stage == "stage5_gpt" else ()))
        jobs.append(Job(
            f"stage{n}_shakespeare", f"train {stage} on Tiny Shakespeare", train_job,
            params={"stage": stage, "out": f"out_shakespeare/{stage}", "flags": flags,
                    "transcript": f"{stage}_train_shakespeare.txt", "tag": "_shakespeare",
                    "sha256": SHAKESPEARE_SHA256},
            stages=(stage,), code=TRAINING,
            outputs=(*train_outputs(stage, "_shakespeare"), f"{RUNS}/stage{n}_shakespeare.json"),
            seconds=seconds, shakespeare=True))
    jobs.append(Job(
        "compare_shakespeare", "the Tiny Shakespeare table", compare_table_job,
        params={"title": "Tiny Shakespeare: stages 2-4 at their defaults, stage 5 in nanoGPT's "
                         "CPU configuration (`" + " ".join(NANOGPT_CPU) + "`)"},
        files=("tools/compare.py",), code=(*TABLE, "compare_table_job"),
        needs=tuple(f"stage{s[5]}_shakespeare" for s in STAGES),
        outputs=("compare_shakespeare.md",), shakespeare=True))
    return in_order(jobs + extra_jobs())


def in_order(jobs: list[Job]) -> list[Job]:
    """The jobs, each after the jobs it builds on: those it ``needs`` and those whose
    outputs it reads as ``files`` (docs/generated/...). Otherwise in the given order."""
    by_output = {f"docs/generated/{o}": j.name for j in jobs for o in j.outputs}
    before = {j.name: {*j.needs, *(by_output[f] for f in j.files if f in by_output)} - {j.name}
              for j in jobs}
    done: list[Job] = []
    todo = list(jobs)
    while todo:
        ready = next((j for j in todo if before[j.name] <= {d.name for d in done}), None)
        if ready is None:
            sys.exit(f"jobs wait on each other: {', '.join(j.name for j in todo)}")
        done.append(ready)
        todo.remove(ready)
    return done


def extra_jobs() -> list[Job]:
    """Jobs declared by tools/docs_*.py modules, each through ``jobs(Job, gen_docs)``
    (``gen_docs`` is this module, for ``write``, ``run``, ``GEN`` ...). A module's
    jobs list the module itself in ``files``, so a change to it makes them stale."""
    jobs = []
    for path in sorted(Path(__file__).parent.glob("docs_*.py")):
        spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        jobs += module.jobs(Job, sys.modules[__name__])
    return jobs


JOBS = build_jobs()


def run_job(job: Job, work: Path) -> None:
    params = {k: v for k, v in job.params.items() if k != "sha256"}  # sha256: checked in main()
    job.action(work, job, **params)


# ----------------------------------------------------------------------------- input hashes


def digest(path: Path) -> str:
    """sha256 of a file; "missing" for none (the job that reads it will say so)."""
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "missing"


# A stage's reference.json ("is my loss normal?") is written by a job from the results of
# that stage's trainings (tools/docs_reference.py): as their input it would make them stale
# at every write. The trainers run here only print a comparison with it, and not even that
# (COURSE_NO_REFERENCE, set at the top), so what they produce does not depend on it.
NOT_INPUTS = {"reference.json"}


def folder_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*")
                  if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
                  and not (p.parent == folder and p.name in NOT_INPUTS))


def code_of(name: str) -> str:
    """The source of a function of this script ("name") or of compare.py ("compare.name")."""
    module, _, attr = name.rpartition(".")
    return inspect.getsource(getattr(compare, attr) if module == "compare" else globals()[attr])


def input_hashes(jobs: list[Job] | None = None) -> dict[str, str]:
    """Per job, a hash of everything it reads (see the module docstring)."""
    jobs = JOBS if jobs is None else jobs
    files: dict[Path, str] = {}

    def file_hash(path: Path) -> str:
        if path not in files:
            files[path] = digest(path)
        return files[path]

    # A file another job writes stands for that job's inputs, as with ``needs``: the job
    # reading it is stale exactly when that job is, whatever the file holds right now.
    made_by = {f"docs/generated/{o}": j.name for j in jobs for o in j.outputs}
    hashes: dict[str, str] = {}
    for job in jobs:
        h = hashlib.sha256(job.identity().encode())
        paths = [p for s in job.stages for p in folder_files(ROOT / s)]
        paths += [ROOT / f for f in job.files if f not in made_by]
        for f in job.files:
            if f in made_by:
                h.update(f"\n{f} from {made_by[f]} {hashes[made_by[f]]}".encode())
        for p in paths:
            h.update(f"\n{p.relative_to(ROOT).as_posix()} {file_hash(p)}".encode())
        # The action by its own source: it may live in a tools/docs_*.py module.
        h.update(f"\n{job.action.__name__}\n{inspect.getsource(job.action)}".encode())
        for name in job.code:
            h.update(f"\n{name}\n{code_of(name)}".encode())
        for need in job.needs:
            h.update(f"\n{need} {hashes[need]}".encode())
        hashes[job.name] = h.hexdigest()
    return hashes


# ----------------------------------------------------------------------------- manifest


def read_manifest() -> dict[str, dict]:
    """Per job: inputs_sha256, outputs, seconds. {} for none (or the old one-hash form)."""
    try:
        data = json.loads((GEN / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data.get("jobs", {})


def write_manifest(entries: dict[str, dict]) -> None:
    order = [j.name for j in JOBS]
    data = {
        "about": "Written by tools/gen_docs.py: per job, a hash of its inputs and the files it "
                 "wrote under docs/generated/. See `python tools/gen_docs.py --list`.",
        "jobs": {n: entries[n] for n in order if n in entries},
    }
    (GEN / MANIFEST).write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


def stale_jobs(hashes: dict[str, str], manifest: dict[str, dict]) -> list[str]:
    return [j.name for j in JOBS if manifest.get(j.name, {}).get("inputs_sha256") != hashes[j.name]]


def command_for(stale: list[str]) -> str:
    """What to run to bring these jobs up to date (``make docs-figures`` runs the same)."""
    by_name = {j.name: j for j in JOBS}
    if any(by_name[n].shakespeare for n in stale):
        return "python tools/gen_docs.py --shakespeare PATH/TO/tinyshakespeare.txt"
    return "python tools/gen_docs.py"


def plan(hashes: dict[str, str], manifest: dict[str, dict], only: list[str] | None,
         everything: bool, shakespeare: bool) -> tuple[list[Job], list[Job]]:
    """The jobs to run, in order, and the Tiny Shakespeare ones skipped for want of PATH.

    Default: the stale jobs. A job built on one that runs runs too (a table is
    assembled again), and a job may not run on the stored rows of a stale job.
    """
    stale = set(stale_jobs(hashes, manifest))
    chosen = set(only) if only else {j.name for j in JOBS} if everything else set(stale)
    for job in JOBS:
        if any(n in chosen for n in job.needs):
            chosen.add(job.name)
    todo = [j for j in JOBS if j.name in chosen and (shakespeare or not j.shakespeare)]
    skipped = [j for j in JOBS if j.name in chosen and j not in todo]
    names = {j.name for j in todo}
    for job in todo:
        behind = [n for n in job.needs if n not in names and n in stale]
        if behind:
            sys.exit(f"job {job.name} builds on {', '.join(behind)}, which "
                     f"{'is' if len(behind) == 1 else 'are'} stale: run "
                     f"{'it' if len(behind) == 1 else 'them'} too (--only {job.name} "
                     f"{' '.join(behind)}), or leave out --only")
        missing = [n for n in job.needs if n not in names and not (GEN / RUNS / f"{n}.json").exists()]
        if missing:
            sys.exit(f"job {job.name} builds on the stored rows of {', '.join(missing)}, which "
                     f"are missing: run --only {' '.join(missing)} {job.name}")
    return todo, skipped


def minutes(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.1f} min"


def list_jobs(hashes: dict[str, str], manifest: dict[str, dict], shakespeare: bool) -> str:
    """The jobs as a table: fresh or stale, the last time each took, what each reads."""
    stale = set(stale_jobs(hashes, manifest))
    rows, todo = [], 0.0
    for job in JOBS:
        seconds = manifest.get(job.name, {}).get("seconds", job.seconds)
        state = "stale" if job.name in stale else "fresh"
        if job.name in stale and job.shakespeare and not shakespeare:
            state += ", needs --shakespeare"
        elif job.name in stale:
            todo += seconds
        inputs = [f"{s}/" for s in job.stages] + list(job.files)
        inputs += [f"rows of {', '.join(job.needs)}"] if job.needs else []
        rows.append([job.name, state, minutes(seconds), "; ".join(inputs) or "this script"])
    table = compare.plain_table(["job", "state", "time", "inputs"], rows, right={2})
    if not stale:
        return table + "\nevery job is fresh"
    skipped = "" if shakespeare else " (the Tiny Shakespeare jobs left out)"
    return (table + f"\n{len(stale)} stale jobs; rerunning them takes about {minutes(todo)}"
            f"{skipped}: {command_for(sorted(stale))}")


# ----------------------------------------------------------------------------- main


def check_shakespeare(path: Path) -> None:
    if not path.is_file():
        sys.exit(f"--shakespeare {path}: no such file")
    if digest(path) != SHAKESPEARE_SHA256:
        sys.exit(f"--shakespeare {path}: not the Tiny Shakespeare the docs were made from "
                 f"(its sha256 should be {SHAKESPEARE_SHA256})")


def restamp(hashes: dict[str, str], manifest: dict[str, dict]) -> None:
    missing = [o for j in JOBS for o in j.outputs if not (GEN / o).is_file()]
    if missing:
        sys.exit("--restamp: these outputs are missing, so they cannot be current: "
                 + ", ".join(missing))
    write_manifest({j.name: {"inputs_sha256": hashes[j.name], "outputs": list(j.outputs),
                             "seconds": manifest.get(j.name, {}).get("seconds", j.seconds)}
                    for j in JOBS})
    print(f"recorded the inputs of all {len(JOBS)} jobs as current in {GEN / MANIFEST}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python tools/gen_docs.py",
                                description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 1)[1])
    what = p.add_mutually_exclusive_group()
    what.add_argument("--only", nargs="+", metavar="JOB", choices=[j.name for j in JOBS],
                      help="run these jobs (fresh or not), and the tables built on them")
    what.add_argument("--all", action="store_true", help="run every job, fresh or not")
    what.add_argument("--list", action="store_true",
                      help="list the jobs, fresh or stale, with their inputs and times")
    what.add_argument("--restamp", action="store_true",
                      help="record every job's current inputs as current, running nothing: only "
                           "after you verified that the outputs are current")
    p.add_argument("--shakespeare", type=Path, default=None, metavar="PATH",
                   help="a local copy of Tiny Shakespeare, for its jobs (skipped without it)")
    args = p.parse_args(argv)
    hashes, manifest = input_hashes(), read_manifest()
    if args.list:
        print(list_jobs(hashes, manifest, args.shakespeare is not None))
        return 0
    if args.restamp:
        restamp(hashes, manifest)
        return 0
    if args.shakespeare:
        check_shakespeare(args.shakespeare)
    todo, skipped = plan(hashes, manifest, args.only, args.all, args.shakespeare is not None)
    if skipped:
        print(f"skipped, stale until run with --shakespeare PATH: "
              f"{', '.join(j.name for j in skipped)}")
    if not todo:
        print("nothing to do: every job is fresh" if not skipped else "nothing else to do")
        return 0
    print(f"{len(todo)} jobs, about {minutes(sum(j.seconds for j in todo))}: "
          f"{', '.join(j.name for j in todo)}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        if args.shakespeare and any(j.shakespeare for j in todo):
            shutil.copy(args.shakespeare, work / SHAKESPEARE_FILE)
        for job in todo:
            print(f"[{job.name}] {job.about}", flush=True)
            t0 = time.time()
            run_job(job, work)
            late = [o for o in job.outputs
                    if not (GEN / o).is_file() or (GEN / o).stat().st_mtime < t0 - 1]
            if late:
                sys.exit(f"job {job.name} did not write {', '.join(late)}: fix the job's outputs")
            for old in manifest.get(job.name, {}).get("outputs", []):
                if not any(old in j.outputs for j in JOBS):  # no job writes it any more
                    (GEN / old).unlink(missing_ok=True)
            manifest[job.name] = {"inputs_sha256": hashes[job.name], "outputs": list(job.outputs),
                                  "seconds": round(time.time() - t0)}
            write_manifest(manifest)
    print(f"wrote {GEN}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
