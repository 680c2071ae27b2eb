"""The troubleshooting page: references/<stage>.json for "is my loss normal?" (each stage's
report.py reads it) made from the runs the docs show, their table, what a run prints
next to them, and the messages of the usual failures."""

from __future__ import annotations

import importlib
import json
import os

from .. import Job, Page, Run, store, table
from ..store import CACHE, ROOT
from . import SEEDS, STAGES
from .compare import CLASSIC_RUNS, PRESET_RUNS, RUNS
from .stage1 import transcript

STUCK = Run("stage2_bigram", "--data", "en", "--lr", "1e-5", "--max-iters", "600",
            "--eval-interval", "200")
ELSEWHERE = Run("stage2_bigram", "--data", "zh", "--max-iters", "1000")  # no exact reference
ERRORS = (Run("stage5_gpt", "--lr", "1e6", "--warmup-iters", "0", "--grad-clip", "0",
              "--max-iters", "60", fails=True),
          Run("stage2_bigram", "--prompt", "naïve", module="sample", fails=True,
              after=RUNS["stage2_bigram", "en", SEEDS[0]]),
          Run("stage2_bigram", "--device", "mps", fails=True),
          Run("stage5_gpt", "--lr", "1e-4", "--min-lr", "1e-3", fails=True),
          Run("stage5_gpt", "--dtype", "float16", fails=True),  # a GPU's precision, on a CPU
          Run("stage5_gpt", "--init-from", "path/to/gpt2", module="sample", fails=True))

DEFAULTS = ("defaults", "默认设置")  # a run at a stage's defaults, in each language
FLOOR = 0.002  # the narrowest range: below this, runs differ by rounding alone


def settings(run) -> dict:
    """The run's settings as the stage's harness computes them at the end of training."""
    store.require(run)  # the settings hold the corpus' sha256
    train = importlib.import_module(f"{run.stage}.train")
    report = importlib.import_module(f"{run.stage}.report")
    data = importlib.import_module(f"{run.stage}.data")
    parser = train.build_parser()
    preset = getattr(parser.parse_known_args(list(run.flags))[0], "preset", None)
    if preset:
        parser.set_defaults(**train.PRESETS[preset])
    args = parser.parse_args(list(run.flags))
    os.environ["GPT_STAGES_CACHE"] = str(CACHE / "data")  # where the classic corpora are
    return report.run_settings(args, train.RESUMED, data.load_text(args.data))


def write(page: Page) -> None:
    rows = []
    for stage in STAGES:
        spreads = {}
        refs = []
        for data in ("en", "zh"):
            vals = [page.stored(RUNS[stage, data, s]).metrics["val_loss"] for s in SEEDS]
            spreads[data] = max(FLOOR, max(vals) - min(vals))
        wide = max(spreads.values())
        runs = [((DEFAULTS, f"--data {d}"), RUNS[stage, d, SEEDS[0]], spreads[d]) for d in spreads]
        for d in ("shakespeare", "tang"):
            run = CLASSIC_RUNS[stage, d]
            short = " ".join(run.flags[2:run.flags.index("--seed")]) or DEFAULTS  # after --data D
            runs.append(((short, f"--data {d}"), run, wide))
        if stage == "stage5_gpt":
            runs += [((f"--preset {r.flags[1]}",), r, wide) for r in PRESET_RUNS.values()]
        for parts, run, tol in runs:  # a part: flags, or a word in (English, Chinese)
            words = [[p[lang] if isinstance(p, tuple) else p for p in parts] for lang in (0, 1)]
            name = ", ".join(words[0])
            m = page.stored(run).metrics
            refs.append({"name": name, "data": run.data, "command": run.command,
                         "settings": settings(run), "val_loss": m["val_loss"], "tolerance": tol,
                         "best_val_loss": m["best_val_loss"], "train_seconds": m["train_seconds"],
                         "precision": "float32" if stage == "stage5_gpt" else None})
            en, zh = (sep.join(f"`{p}`" if p.startswith("--") else p for p in w)  # flags as code
                      for sep, w in zip((", ", "，"), words, strict=True))
            rows.append((f"`{stage}`", (en, zh),
                         f"{m['val_loss']:.4f} ± {tol:.4f}", f"{m['train_seconds']:,.0f}"))
        doc = {"made_by": "the runs the docs show (python -m tools.docs)",
               "torch": page.stored(RUNS[stage, "en", SEEDS[0]]).machine["torch"], "device": "cpu",
               "tolerance_is": "the spread of the final val loss over seeds 1337, 1338, 1339 on "
                               "the built-in corpus (for the classic corpora and the presets: the "
                               "wider of the two built-in spreads), at least 0.002",
               "references": refs}
        (ROOT / "references").mkdir(exist_ok=True)
        (ROOT / "references" / f"{stage}.json").write_text(
            json.dumps(doc, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    verdicts(page)
    stuck = page.stored(STUCK).stdout
    page.write("stuck.txt", f"$ {STUCK.command}\n" + "\n".join(
        line for line in stuck.splitlines() if line.startswith("step")))
    log = page.stored(STUCK).log
    page.fact("stuck.first", log[0]["val"])
    page.fact("stuck.last", log[-1]["val"])
    page.fact("stuck.steps", log[-1]["step"])
    page.write("errors.txt", transcript(page, ERRORS))
    page.both("references", table({"en": ["stage", "settings", "final val loss", "time (s)"],
                                   "zh": ["阶段", "设置", "最后的验证损失", "时间（秒）"]},
                                  rows, right={2, 3}))


def verdicts(page: Page) -> None:
    """What two runs print at their end: one at the defaults, one without a reference."""
    from stage2_bigram.report import reference_report

    lines = []
    for run in (RUNS["stage2_bigram", "en", SEEDS[0]], ELSEWHERE):
        m = page.stored(run).metrics
        lines += [f"$ {run.command}", "...", *reference_report(m, settings(run), "cpu"), ""]
    page.write("verdicts.txt", "\n".join(lines))


JOBS = [Job("troubleshooting", write, runs=(*RUNS.values(), *CLASSIC_RUNS.values(),
                                            *PRESET_RUNS.values(), STUCK, ELSEWHERE, *ERRORS),
            files=(*(f"{s}/{m}.py" for s in STAGES for m in ("train", "report", "harness")),
                   "stage5_gpt/precision.py", "stage5_gpt/gpt2.py"))]
