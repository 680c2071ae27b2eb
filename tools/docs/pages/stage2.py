"""Stage 2 page: the bigram trained on every corpus, its loss curves, and its errors."""

from __future__ import annotations

import math

from .. import Job, Page, Run, Stored
from . import ZH_LABELS, classic
from .stage1 import transcript

CORPORA = ("en", "zh", "shakespeare", "tang")
RUNS = {d: classic("stage2_bigram", d) for d in CORPORA}  # the defaults on every corpus
ERRORS = (Run("stage2_bigram", "--prompt", "café", module="sample", fails=True, after=RUNS["en"]),
          Run("stage2_bigram", "--lr", "0", fails=True))


def training(page: Page, stage: str, runs: dict[str, Run]) -> None:
    """Per corpus: what the trainer printed, its loss curve in both languages (drawn from the
    stored log as the trainer draws it: no checkpoint folder needed), its numbers."""
    from stage2_bigram.plots import plot_losses  # the same drawing in every stage

    for data, run in runs.items():
        stored = page.stored(run)
        name = data if run.flags[:1] != ("--preset",) else run.flags[1]
        page.write(f"train_{name}.txt", stored.stdout)
        plot_losses(stored.log, page.dir / f"loss_{name}.png", f"{stage} on {data}")
        plot_losses(stored.log, page.dir / f"loss_{name}_zh.png", f"{stage}，{data}", ZH_LABELS)
        numbers(page, name, stored)


def numbers(page: Page, name: str, stored: Stored) -> None:
    """A training run's numbers as facts ``{name}.params``, ``{name}.gap``, ..."""
    m = stored.metrics
    for key in ("params", "train_loss", "val_loss", "best_val_loss", "best_val_step",
                "train_seconds"):
        page.fact(f"{name}.{key}", m[key])
    page.fact(f"{name}.first_val", stored.log[0]["val"])
    page.fact(f"{name}.gap", m["val_loss"] - m["train_loss"])


def write(page: Page) -> None:
    training(page, "stage2_bigram", RUNS)
    for data, run in RUNS.items():  # the bigram's table is V x V: its size is V squared
        page.fact(f"{data}.vocab", round(math.sqrt(page.stored(run).metrics["params"])))
        page.fact(f"{data}.ln_vocab", math.log(math.sqrt(page.stored(run).metrics["params"])))
    page.write("errors.txt", transcript(page, ERRORS))


JOBS = [Job("stage2", write, runs=(*RUNS.values(), *ERRORS), files=("stage2_bigram/plots.py",),
            timed=tuple(RUNS.values()))]
