"""gen_docs jobs: "is my loss normal?" (each stage's reference.json) and the troubleshooting page.

At the end of every ``train`` the harness compares the run with the reference for
the same settings, read from the stage's ``reference.json``. These jobs write those
files from the runs the docs already show (the stored rows of stage2_en ... stage5_en
and of stage5_shakespeare, nanoGPT's CPU preset), plus the same settings at two more
seeds: the spread of the three final val losses is the range a run is expected to
land in. They also generate the outputs the troubleshooting page quotes.

    python tools/gen_docs.py --only reference_seeds_en reference_seeds_shakespeare \\
        reference troubleshooting --shakespeare PATH

The reference files are outputs here and not inputs of the trainings (gen_docs
leaves them out of the stage folders' hashes: see NOT_INPUTS there), so writing
them does not make the trainings they come from stale.
"""

from __future__ import annotations

import importlib
import json
import math
import os
import re
import shlex
import sys
from pathlib import Path

MODULE = "tools/docs_reference.py"
STAGES = ("stage2_bigram", "stage3_attention", "stage4_block", "stage5_gpt")
SEEDS = (1338, 1339)  # next to the docs' seed 1337
FLOOR = 0.002  # the narrowest range: below this, runs differ by rounding alone
REFERENCE = "reference.json"
TABLE = "reference.md"
TABLE_ZH = "reference_zh.md"  # the same table for the Chinese edition (docs/zh/)
ERRORS = "troubleshooting_errors.txt"
STUCK = "troubleshooting_stuck.txt"
NORMAL = "troubleshooting_normal.txt"


def reference_path(stage: str) -> str:
    """A stage's reference file, relative to docs/generated/ as gen_docs outputs are."""
    return f"../../{stage}/{REFERENCE}"


def seed_runs(work: Path, gen_docs, stage: str, flags: tuple[str, ...], tag: str) -> dict:
    """Train ``stage`` with ``flags`` at each of SEEDS; their final metrics."""
    runs = {}
    for seed in SEEDS:
        out = work / "out" / "reference" / f"{stage}_{tag}_{seed}"
        gen_docs.run(work, f"{stage}.train", *flags, "--seed", str(seed), "--out-dir", str(out),
                     "--sample-tokens", "0")
        m = json.loads((out / "metrics.json").read_text(encoding="utf-8"))
        runs[str(seed)] = {k: m[k] for k in ("val_loss", "best_val_loss", "train_seconds")}
    return runs


def seeds_action(gen_docs, plan: dict[str, tuple[str, ...]], tag: str):
    def reference_seeds(work: Path, job) -> None:
        rows = {stage: seed_runs(work, gen_docs, stage, flags, tag)
                for stage, flags in plan.items()}
        gen_docs.record_run(job, rows)
    reference_seeds.__name__ = f"reference_seeds_{tag}"
    return reference_seeds


def transcript_fact(path: Path, pattern: str) -> str | None:
    """The first match of ``pattern`` in a generated transcript (device, precision)."""
    found = re.search(pattern, path.read_text(encoding="utf-8"), re.M)
    return found.group(1) if found else None


def settings_of(command: str, stage: str, work: Path) -> dict:
    """A run's settings as the harness computes them, from the command the docs ran."""
    train = importlib.import_module(f"{stage}.train")
    harness = importlib.import_module(f"{stage}.harness")
    data = importlib.import_module(f"{stage}.data")
    argv = shlex.split(command)[3:]  # after "python -m <stage>.train"
    parser = train.build_parser()
    preset = getattr(parser.parse_known_args(argv)[0], "preset", None)
    if preset:  # as the stage's main() does
        parser.set_defaults(**train.PRESETS[preset])
    args = parser.parse_args(argv)
    local = work / args.data  # a file the job copied into its scratch folder, or a name
    return harness.run_settings(args, harness.resumed_flags(train.build_parser()),
                                data.load_text(str(local) if local.is_file() else args.data))


def reference_entry(gen_docs, work: Path, stage: str, row: str, seeds: dict, name: str,
                    transcript: str) -> dict:
    r = gen_docs.load_run(row)
    vals = [r["val_loss"], *(s["val_loss"] for s in seeds.values())]
    spread = max(vals) - min(vals)
    entry = {
        "name": name,
        "command": r["command"],
        "settings": settings_of(r["command"], stage, work),
        "val_loss": round(r["val_loss"], 4),
        "best_val_loss": round(r["best_val_loss"], 4),
        "train_seconds": r["train_seconds"],
        "tolerance": max(FLOOR, math.ceil(spread * 1000) / 1000),
        "val_loss_by_seed": {"1337": round(r["val_loss"], 4),
                             **{k: round(s["val_loss"], 4) for k, s in seeds.items()}},
    }
    precision = transcript_fact(gen_docs.GEN / transcript, r"^precision: (\S+)")
    if precision:
        entry["precision"] = precision
    return entry


def reference_action(gen_docs):
    def reference(work: Path, job) -> None:
        import torch

        sys.path.insert(0, str(gen_docs.ROOT))
        en = gen_docs.load_run("reference_seeds_en")
        sh = gen_docs.load_run("reference_seeds_shakespeare")
        lines = ["| stage | settings | val loss (seed 1337) | expected range | seeds 1338, 1339 "
                 "| best val loss | training (s) |", "|---|---|---:|---:|---:|---:|---:|"]
        lines_zh = ["| 阶段 | 设置 | 验证损失（种子 1337） | 预期范围 | 种子 1338、1339 "
                    "| 最佳验证损失 | 训练时间（秒） |", "|---|---|---:|---:|---:|---:|---:|"]
        for stage in STAGES:
            n = stage[5]
            entries = [reference_entry(gen_docs, work, stage, f"stage{n}_en", en[stage],
                                       "defaults", f"{stage}_train.txt")]
            if stage == "stage5_gpt":
                entries.append(reference_entry(
                    gen_docs, work, stage, "stage5_shakespeare", sh[stage],
                    " ".join(gen_docs.NANOGPT_CPU), f"{stage}_train_shakespeare.txt"))
            device = transcript_fact(gen_docs.GEN / f"{stage}_train.txt", r"device (\w+)")
            data = {
                "about": "Written by tools/gen_docs.py (tools/docs_reference.py); read by "
                         "harness.py at the end of every run: see docs/troubleshooting.md, "
                         "'Is my loss normal?'. Do not edit by hand.",
                "made_by": f"the runs the docs show, tools/gen_docs.py on {os.cpu_count()} "
                           "CPU cores",
                "torch": torch.__version__.split("+")[0],
                "device": device or "cpu",
                "tolerance_is": "the spread of the final val loss over seeds 1337, 1338, 1339 "
                                f"there (at least {FLOOR})",
                "references": entries,
            }
            gen_docs.write(reference_path(stage), json.dumps(data, indent=2))
            for e in entries:
                seeds = ", ".join(f"{v:.4f}" for k, v in e["val_loss_by_seed"].items()
                                  if k != "1337")
                lines.append(
                    f"| {stage} | `{e['name']}`" + (f" ({e['precision']})" if "precision" in e
                                                    else "")
                    + f" | {e['val_loss']:.4f} | ± {e['tolerance']:.3f} | {seeds} | "
                    f"{e['best_val_loss']:.4f} | {e['train_seconds']:.1f} |")
                lines_zh.append(
                    f"| {stage} | " + ("默认参数 `defaults`" if e["name"] == "defaults"
                                       else f"`{e['name']}`")
                    + (f"（{e['precision']}）" if "precision" in e else "")
                    + f" | {e['val_loss']:.4f} | ± {e['tolerance']:.3f} | {seeds.replace(', ', '、')}"
                    f" | {e['best_val_loss']:.4f} | {e['train_seconds']:.1f} |")
        gen_docs.write(TABLE, "\n".join(lines))
        gen_docs.write(TABLE_ZH, "\n".join(lines_zh))
    return reference


def troubleshooting_action(gen_docs):
    def troubleshooting(work: Path, job) -> None:
        """The messages and outputs the troubleshooting page quotes, made by running them."""
        run = gen_docs.run
        # A learning rate far too small: the loss stays near ln V.
        out = run(work, "stage2_bigram.train", "--lr", "1e-5", "--max-iters", "600",
                  "--eval-interval", "200", "--sample-tokens", "0", "--out-dir", "out/stuck")
        gen_docs.write(STUCK, "$ python -m stage2_bigram.train --lr 1e-5 --max-iters 600 "
                       "--eval-interval 200\n" + "\n".join(
                           line for line in out.splitlines() if line.startswith("step")))
        run(work, "stage2_bigram.train", "--max-iters", "50", "--sample-tokens", "0",
            "--out-dir", "out/tiny")
        cases = [
            ("stage5_gpt.train", "--lr", "1e6", "--warmup-iters", "0", "--grad-clip", "0",
             "--max-iters", "60", "--out-dir", "out/nan"),
            ("stage2_bigram.sample", "--ckpt", "out/tiny/best.pt", "--prompt", "naïve"),
            ("stage2_bigram.train", "--device", "mps"),
            ("stage2_bigram.train", "--data", "shakespeare"),
        ]
        # "Offline": an empty download cache and a proxy that refuses every connection.
        saved = {k: os.environ.get(k) for k in ("GPT_STAGES_CACHE", "https_proxy", "HTTPS_PROXY")}
        os.environ.update(GPT_STAGES_CACHE=str(work / "empty_cache"),
                          https_proxy="http://127.0.0.1:9", HTTPS_PROXY="http://127.0.0.1:9")
        try:
            errs = [f"$ python -m {shlex.join(c)}\n"
                    + run(work, *c, stderr=True, ok=False).strip().splitlines()[-1] + "\n"
                    for c in cases]
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        gen_docs.write(ERRORS, "\n".join(errs))
        # "Is my loss normal?" as a learner sees it: the defaults, then a changed flag.
        os.environ.pop("COURSE_NO_REFERENCE", None)
        try:
            normal = []
            for flags in ((), ("--max-iters", "1000")):
                out = run(work, "stage2_bigram.train", *flags, "--out-dir", "out/normal")
                tail = out[out.index("is this loss normal?"):].rstrip()
                normal.append(f"$ python -m stage2_bigram.train {shlex.join(flags)}".rstrip()
                              + f"\n...\n{tail}\n")
        finally:
            os.environ["COURSE_NO_REFERENCE"] = "1"
        gen_docs.write(NORMAL, "\n".join(normal))
    return troubleshooting


def jobs(Job, gen_docs) -> list:
    en = {stage: ("--data", "en") for stage in STAGES}
    shakespeare = {"stage5_gpt": ("--data", gen_docs.SHAKESPEARE_FILE, *gen_docs.NANOGPT_CPU)}
    seeds = [("reference_seeds_en", en, "en", False, 550),
             ("reference_seeds_shakespeare", shakespeare, "shakespeare", True, 230)]
    out = [Job(name, f"the reference settings at seeds {SEEDS}: the expected range",
               seeds_action(gen_docs, plan, tag), stages=tuple(plan), files=(MODULE,),
               code=("run", "write", "record_run"),
               params={"sha256": gen_docs.SHAKESPEARE_SHA256} if sh else {},
               outputs=(f"{gen_docs.RUNS}/{name}.json",), seconds=seconds, shakespeare=sh)
           for name, plan, tag, sh, seconds in seeds]
    out.append(Job(
        "reference", "each stage's reference.json and the table of references",
        reference_action(gen_docs), params={"sha256": gen_docs.SHAKESPEARE_SHA256},
        stages=STAGES, files=(MODULE,), code=("write", "load_run"),
        needs=("stage2_en", "stage3_en", "stage4_en", "stage5_en", "stage5_shakespeare",
               "reference_seeds_en", "reference_seeds_shakespeare"),
        outputs=(*(reference_path(s) for s in STAGES), TABLE, TABLE_ZH), seconds=5, shakespeare=True))
    out.append(Job(
        "troubleshooting", "the messages and outputs the troubleshooting page quotes",
        troubleshooting_action(gen_docs), params={"sha256": gen_docs.SHAKESPEARE_SHA256},
        stages=("stage2_bigram", "stage5_gpt"), files=(MODULE,), code=("run", "write"),
        needs=("reference",),
        outputs=(ERRORS, STUCK, NORMAL), seconds=20, shakespeare=True))
    return out
