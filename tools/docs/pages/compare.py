"""The compare page: every stage at its defaults on each corpus, side by side; on the
built-in corpora with three seeds, so that a difference between two stages can be set
against the spread between seeds of one stage."""

from __future__ import annotations

import math

from .. import Draw, Job, Page, Run, table
from ..verse import verse_form
from . import BUILTIN, CLASSIC, PRESETS, SEEDS, STAGES, classic, preset, train

RUNS = {(stage, data, seed): train(stage, data, seed=seed)
        for stage in STAGES for data in BUILTIN for seed in SEEDS}
CLASSIC_RUNS = {(stage, data): classic(stage, data) for stage in STAGES for data in CLASSIC}
PRESET_RUNS = {data: preset(name) for data, name in PRESETS.items()}
# The Tang poems at every stage, sampled with seeds of their own: the run's own sample starts
# every stage with the same random draws (--seed 1337), so it shows the same first fragments.
# Seeds differ from stage to stage too (stage 3: 31 and 32): with one seed, every stage makes
# the same random draws, and its samples repeat the others' fragments.
TANG_SEEDS = {stage: (f"{stage[5]}1", f"{stage[5]}2") for stage in STAGES}
TANG_SAMPLES = {(stage, n): Run(stage, "--seed", seed, "--tokens", "120", module="sample",
                                after=CLASSIC_RUNS[stage, "tang"])
                for stage in STAGES for n, seed in enumerate(TANG_SEEDS[stage], 1)}
HEAD = {"en": ["stage", "parameters", "best val, mean of 3 seeds", "perplexity", "spread", "gain",
               "val − train"],
        "zh": ["阶段", "参数量", "平均最低验证损失", "困惑度", "种子间差异", "较上一阶段降低",
               "验证 − 训练"]}


def rare(page: Page, data: str, few: int = 50, many: int = 500) -> None:
    """Stage 5's gap between validation and training loss on every window of both splits
    (not the 20 random batches the run prints), and where it comes from: the characters
    the training text never holds, those it holds fewer than ``few`` times, and those it
    holds ``many`` times or more."""
    from collections import Counter

    import torch
    from torch.nn import functional as F

    from stage5_gpt.checkpoint import load_model
    from stage5_gpt.data import Corpus
    from stage5_gpt.train import build_parser

    model, tok, _ = load_model(page.folder(RUNS["stage5_gpt", data, SEEDS[0]]) / "best.pt")
    corpus = Corpus.load(data, tokenizer=tok)
    seen, T, out = Counter(corpus.train.tolist()), model.config.block_size, {}
    for split, ids in (("train", corpus.train.long()), ("val", corpus.val.long())):
        starts = torch.arange(0, len(ids) - T - 1, T)
        x = torch.stack([ids[s:s + T] for s in starts])
        y = torch.stack([ids[s + 1:s + T + 1] for s in starts])
        with torch.no_grad():
            loss = torch.cat([F.cross_entropy(model(xs)[0].flatten(0, 1), ys.flatten(),
                                              reduction="none")
                              for xs, ys in zip(x.split(100), y.split(100), strict=True)])
        n = torch.tensor([seen[int(t)] for t in y.flatten()])  # times each target is in train
        out[split] = loss, {"never": n == 0, "rare": (n > 0) & (n < few), "both": n < few,
                            "mid": (n >= few) & (n < many), "common": n >= many, "all": n >= 0}
        page.fact(f"{data}.rare.windows_{split}", len(starts))
        if split == "train":  # the val share: both_share below
            page.fact(f"{data}.rare.both_share_train", (n < few).float().mean().item())
        if split == "val":  # distinct characters of these windows never in the training text
            page.fact(f"{data}.rare.never_distinct", len(set(y.flatten().tolist()) - set(seen)))

    def mean(split: str, kind: str, per_kind: bool = True) -> float:
        """The mean loss over the characters of one kind, or (per_kind False) their
        losses summed and divided by every character: their part of the mean."""
        loss, kinds = out[split]
        return ((loss * kinds[kind]).sum() / (kinds[kind].sum() if per_kind else len(loss))).item()

    val, gap = out["val"][1], mean("val", "all") - mean("train", "all")
    page.fact(f"{data}.rare.gap", gap)  # on every window
    for kind in ("never", "rare", "both", "mid", "common"):  # share of val, part of the gap
        page.fact(f"{data}.rare.{kind}_share", val[kind].float().mean().item())
        page.fact(f"{data}.rare.{kind}_part",
                  (mean("val", kind, False) - mean("train", kind, False)) / gap)
    for kind in ("rare", "mid", "common"):  # the gap per character of the kind
        page.fact(f"{data}.rare.{kind}_gap", mean("val", kind) - mean("train", kind))
    page.fact(f"{data}.rare.never_loss", mean("val", "never") if val["never"].any() else 0.0)
    page.fact("rare.few", few)
    page.fact("rare.many", many)
    page.fact("rare.block_size", T)
    defaults = build_parser().parse_args([])  # what the printed gap is the mean over
    page.fact("rare.eval_iters", defaults.eval_iters)
    page.fact("rare.batch_size", defaults.batch_size)


FORM = ("clauses", "five_or_seven", "lines_end")  # what the table shows of each


def tang_samples(page: Page) -> None:
    """Each stage's Tang poems, sampled twice with seeds of their own (TANG_SEEDS), and their
    form; the samples' files are tang_<stage>_seed1.txt and _seed2.txt (first and second)."""
    from ..store import CACHE  # the Tang poems' text, as --tang put it there
    from ..store import CLASSIC as FILES

    corpus = verse_form((CACHE / "data" / FILES["tang"]).read_text(encoding="utf-8")[:200_000])
    for key in FORM:
        page.fact(f"tang_form.corpus.{key}", corpus[key])
    for stage in STAGES:
        texts = []
        for n in (1, 2):  # the stage's first and second seed
            out = page.stored(TANG_SAMPLES[stage, n]).stdout
            texts.append(out[1:] if out.startswith("\n") else out)  # after the prompt, a newline
            page.write(f"tang_{stage}_seed{n}.txt", texts[-1].rstrip("\n"))
        form = verse_form(*texts)  # counted as on the stage pages (verse.py)
        for key in FORM:
            page.fact(f"tang_form.{stage[:6]}.{key}", form[key])


# How like its corpus each built-in sample reads: runs of this many characters (within a line)
# that occur somewhere in the corpus. Three for Chinese: a 汉字 is about a word's worth of
# text, and four in a row are rare even in the corpus's own sentences.
SEEN_RUN = {"en": 4, "zh": 3}


def sample_facts(page: Page, data: str, samples: dict[str, str]) -> None:
    """What the page says about the seed-1337 samples of the built-in corpora: for each stage,
    the share of its runs of SEEN_RUN[data] characters found in the corpus (``seen``); and how
    many first characters the samples of stages 3 to 5 share (``sample_prefix``): one seed,
    the same random draws, so models that predict alike pick alike."""
    from stage5_gpt.data import load_text

    n, corpus = SEEN_RUN[data], load_text(data)
    grams = {corpus[i:i + n] for i in range(len(corpus) - n + 1)}
    page.fact(f"{data}.seen_run", n)
    for stage, text in samples.items():
        runs = [text[i:i + n] for i in range(len(text) - n + 1) if "\n" not in text[i:i + n]]
        page.fact(f"{data}.{stage[:6]}.seen", sum(r in grams for r in runs) / max(1, len(runs)))
    later = [samples[stage].lstrip("\n") for stage in STAGES[1:]]
    prefix = 0
    while all(len(t) > prefix for t in later) and len({t[prefix] for t in later}) == 1:
        prefix += 1
    page.fact(f"{data}.sample_prefix", prefix)


def write(page: Page) -> None:
    tang_samples(page)
    page.fact("drop01.ratio", math.exp(-0.1))  # perplexity ratio for a loss 0.1 lower
    page.fact("drop01.cut", 1 - math.exp(-0.1))  # the share of perplexity that drop removes
    for data in BUILTIN:
        page.draw(rare, data)
        rows, before, samples = [], None, {}
        for stage in STAGES:
            runs = [page.stored(RUNS[stage, data, s]).metrics for s in SEEDS]
            best = [m["best_val_loss"] for m in runs]
            mean, spread, m = sum(best) / len(best), max(best) - min(best), runs[0]
            gain = before - mean if before is not None else None
            key = f"{data}.{stage[:6]}"
            for name, value in (("params", m["params"]), ("best", m["best_val_loss"]),
                                ("mean", mean), ("ppl", math.exp(mean)), ("spread", spread),
                                ("gap", m["val_loss"] - m["train_loss"]),
                                ("seconds", m["train_seconds"]), ("gain", gain)):
                page.fact(f"{key}.{name}", value)  # ppl: perplexity, e^(mean best val)
            rows.append((f"`{stage}`", f"{m['params']:,}", f"{mean:.4f}", f"{math.exp(mean):.2f}",
                         f"{spread:.4f}", "" if gain is None else f"{gain:.4f}",
                         f"{m['val_loss'] - m['train_loss']:.4f}"))
            page.write(f"sample_{data}_{stage}.txt", m["sample"])
            samples[stage] = m["sample"]
            before = mean
        sample_facts(page, data, samples)
        page.both(f"table_{data}", table(HEAD, rows, right={1, 2, 3, 4, 5, 6}))
    rows = []
    for data in CLASSIC:
        runs = [(f"`{s}`", CLASSIC_RUNS[s, data]) for s in STAGES]
        runs.append((f"`stage5_gpt --preset {PRESETS[data]}`", PRESET_RUNS[data]))
        for label, run in runs:
            m = page.stored(run).metrics
            rows.append((data, label, f"{m['params']:,}", m["best_val_loss"],
                         f"{math.exp(m['best_val_loss']):.2f}", m["val_loss"],
                         f"{m['train_seconds']:,.0f}"))
            key = f"{data}.{label.strip('`').split()[0][:6]}" + ("_preset" if "preset" in label else "")
            page.fact(f"{key}.best", m["best_val_loss"])
            page.fact(f"{key}.ppl", math.exp(m["best_val_loss"]))
            page.fact(f"{key}.seconds", m["train_seconds"])
    # the last evaluation was the best in every row: the loss was still falling at the end
    page.fact("classic.final_is_best", all(row[3] == row[5] for row in rows))
    page.both("table_classic", table(
        {"en": ["corpus", "stage", "parameters", "best val", "perplexity", "final val", "time (s)"],
         "zh": ["语料", "阶段", "参数量", "最低验证损失", "困惑度", "最后的验证损失", "时间（秒）"]},
        rows, right={2, 3, 4, 5, 6}))


JOBS = [Job("compare", write, runs=(*RUNS.values(), *CLASSIC_RUNS.values(),
                                    *PRESET_RUNS.values(), *TANG_SAMPLES.values()),
            draws=tuple(Draw(rare, data, reads=RUNS["stage5_gpt", data, SEEDS[0]])
                        for data in BUILTIN),
            timed=(*CLASSIC_RUNS.values(), *PRESET_RUNS.values()))]
