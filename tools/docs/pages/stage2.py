"""Stage 2 page: the bigram trained on every corpus, its loss curves, and its errors."""

from __future__ import annotations

import math
import re

from .. import Job, Page, Run, Stored, store
from . import ZH_LABELS, classic
from .stage1 import transcript

CORPORA = ("en", "zh", "shakespeare", "tang")
RUNS = {d: classic("stage2_bigram", d) for d in CORPORA}  # the defaults on every corpus
BACKWARD = {d: Run("stage2_bigram", module="backward", after=RUNS[d]) for d in ("en", "zh")}
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
    for data, run in RUNS.items():  # what the samples show: perplexity, pairs, sameness
        samples(page, data, page.stored(run))
    for data, run in BACKWARD.items():  # backward() by hand, beside autograd
        out = page.stored(run).stdout
        page.write(f"backward_{data}.txt", f"$ {run.command}\n{out}")
        diffs = re.findall(r"max \|by hand - autograd\| = (\S+)", out)
        page.fact(f"backward.{data}.largest_difference", max(float(d) for d in diffs))
        page.fact(f"backward.{data}.differ", float(re.search(r"differ by (\S+) in total", out)[1]))


def samples(page: Page, data: str, stored: Stored) -> None:
    """Facts on a run's loss and its two samples: the perplexity exp(loss) of the lowest
    val loss; the share of the sample's neighbouring pairs that occur in the training
    text, after and before training; the share of the sample's characters that are the
    same as before training, at the same places (the same seed draws both)."""
    from stage1_data.data import load_text, split

    store.use_classic_corpora()  # Tiny Shakespeare and the Tang poems, where the runs read them
    page.fact(f"{data}.best_val_ppl", math.exp(stored.metrics["best_val_loss"]))
    before = re.search(r"sample before training:\n(.*?)\n\nstep ", stored.stdout, re.S)[1]
    after = stored.metrics["sample"]
    text = load_text(data)
    train = text[: len(split(range(len(text)))[0])]  # the split the run trained on
    seen = {train[i : i + 2] for i in range(len(train) - 1)}
    for name, sample in (("pairs_seen", after), ("pairs_seen_before", before)):
        pairs = [sample[i : i + 2] for i in range(len(sample) - 1)]
        page.fact(f"{data}.{name}", sum(p in seen for p in pairs) / len(pairs))
    page.fact(f"{data}.sample_same",
              sum(a == b for a, b in zip(after, before, strict=False)) / len(after))


JOBS = [Job("stage2", write, runs=(*RUNS.values(), *ERRORS, *BACKWARD.values()),
            files=("stage2_bigram/plots.py",),
            timed=tuple(RUNS.values()))]
