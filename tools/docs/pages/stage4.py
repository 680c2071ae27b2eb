"""Stage 4 page: the block trained on every corpus, its attention layer by layer, its
variants, and what each part buys (a part taken out, against the spread of seeds)."""

from __future__ import annotations

import math

from .. import Draw, Job, Page, table
from ..verse import verse_form
from . import SEEDS, ZH_LABELS, classic, train
from .stage2 import training

STAGE = "stage4_block"
CORPORA = ("en", "zh", "shakespeare", "tang")
RUNS = {d: classic(STAGE, d) for d in CORPORA}  # the defaults on every corpus
SEED_RUNS = [train(STAGE, "en", seed=s) for s in SEEDS[1:]]
VARIANTS = {f: train(STAGE, "en", *f.split()) for f in
            ("--n-head 1", "--norm post", "--activation gelu")}
ABLATIONS = {f: train(STAGE, "en", f) for f in ("--no-residual", "--no-mlp")}
ABLATIONS["--norm none"] = train(STAGE, "en", "--norm", "none")
HARDER = {norm: train(STAGE, "en", "--n-layer", "12", "--lr", "1e-2", "--max-iters", "600",
                      "--norm", norm) for norm in ("pre", "post")}  # exercise 3
DEEP = {"residual": train(STAGE, "en", "--n-layer", "8"),  # exercise 4: 8 blocks, with and
        "no_residual": train(STAGE, "en", "--no-residual", "--n-layer", "8")}  # without
STAGE3 = {d: classic("stage3_attention", d) for d in CORPORA}  # the stage before, for its loss
PARTS = {"--no-residual": ("residual connections", "残差连接"),
         "--no-mlp": ("the MLP", "MLP（前馈网络）"), "--norm none": ("LayerNorm", "层归一化"),
         "--n-head 1": ("four heads, one left", "四个头只留一个")}


def attention(page: Page, data: str, labels: dict | None, tag: str) -> None:
    """One figure per layer, every head of it, on the default prompt."""
    from stage4_block.checkpoint import load_model
    from stage4_block.data import load_text
    from stage4_block.prompts import default_prompt
    from stage4_block.visualize import LABELS, attention_layer_figures

    model, tok, _ = load_model(page.folder(RUNS[data]) / "best.pt")
    prompt = default_prompt(load_text(data), min(model.config.block_size, 24))
    out = page.dir / f"attention_{data}{tag}"
    for path in attention_layer_figures(model, tok, prompt, out, labels or LABELS):
        path.rename(page.dir / f"attention_{data}_{path.stem.removeprefix('attention_')}{tag}.png")
    out.rmdir()
    page.fact(f"{data}.prompt", prompt)


def unigram(data: str) -> float:
    """The validation loss of a model that only knows how often each character occurs in the
    training text (its frequencies, each count plus one so that none is 0)."""
    from collections import Counter

    from stage4_block.data import Corpus

    corpus = Corpus.load(data)
    counts, n = Counter(corpus.train.tolist()), len(corpus.train)
    V = corpus.tokenizer.vocab_size
    return sum(-math.log((counts[t] + 1) / (n + V)) for t in corpus.val.tolist()) / len(corpus.val)


def write(page: Page) -> None:
    training(page, STAGE, RUNS)
    for data, run in RUNS.items():  # perplexity e^loss beside each best loss, and stage 3's
        m = page.stored(run).metrics
        page.fact(f"{data}.steps", m["steps"])
        page.fact(f"{data}.best_val_ppl", math.exp(m["best_val_loss"]))
        page.fact(f"stage3.{data}.best_val_ppl",
                  math.exp(page.stored(STAGE3[data]).metrics["best_val_loss"]))
    form = verse_form(page.stored(RUNS["tang"]).metrics["sample"])
    for key in ("titles", "clauses", "five_or_seven"):
        page.fact(f"tang.form.{key}", form[key])
    page.fact("unigram.en", unigram("en"))
    for data in ("en", "zh"):
        page.draw(attention, data, None, "")
        page.draw(attention, data, ZH_LABELS, "_zh")
    full = page.stored(RUNS["en"]).metrics
    seeds = [full["val_loss"]] + [page.stored(r).metrics["val_loss"] for r in SEED_RUNS]
    spread = max(seeds) - min(seeds)
    page.fact("spread", spread)
    rows = [(("(defaults)", "（默认设置）"), full)] + [(f, page.stored(r).metrics) for f, r in VARIANTS.items()]
    for flag, m in rows[1:]:  # each variant's val loss against the defaults'
        page.fact(f"variant.{flag.strip('-').replace(' ', '_')}", m["val_loss"] - full["val_loss"])
    post = page.stored(VARIANTS["--norm post"]).metrics["val_loss"]
    page.fact("variant.norm_post_lower", full["val_loss"] - post)  # how far below pre-LN's
    page.both("variants", table(
        {"en": ["flags", "parameters", "train loss", "val loss", "val perplexity", "time (s)"],
         "zh": ["命令行参数", "参数量", "训练损失", "验证损失", "验证困惑度", "时间（秒）"]},
        [(f if isinstance(f, tuple) else f"`{f}`", f"{m['params']:,}", m["train_loss"], m["val_loss"],
          f"{math.exp(m['val_loss']):.2f}", f"{m['train_seconds']:,.0f}")
         for f, m in rows], right={1, 2, 3, 4, 5}))
    for norm, run in HARDER.items():
        page.fact(f"harder.{norm}", page.stored(run).metrics["val_loss"])
        page.fact(f"harder.{norm}_ppl", math.exp(page.stored(run).metrics["val_loss"]))
    for name, run in DEEP.items():
        m = page.stored(run).metrics
        page.fact(f"deep.{name}", m["val_loss"])
        page.fact(f"deep.{name}_ppl", math.exp(m["val_loss"]))
        page.fact(f"deep.{name}_params", m["params"])
        page.fact(f"deep.{name}_best_step", m["best_val_step"])
        page.fact(f"deep.{name}_first_eval", page.stored(run).log[1]["val"])  # at step 300
    page.fact("no_residual.val", page.stored(ABLATIONS["--no-residual"]).metrics["val_loss"])
    taken = {**ABLATIONS, "--n-head 1": VARIANTS["--n-head 1"]}
    cells = []
    for flag, run in taken.items():
        m = page.stored(run).metrics
        change = m["val_loss"] - full["val_loss"]
        page.fact(f"ablation.{flag.strip('-').replace(' ', '_')}", change)
        cells.append((PARTS[flag], f"`{flag}`", f"{m['params']:,}", m["val_loss"],
                      f"{math.exp(m['val_loss']):.2f}", f"{change:+.4f}",
                      ("yes", "是") if abs(change) > spread else ("no", "否")))
    page.both("ablation", table(
        {"en": ["part taken out", "flag", "parameters", "val loss", "val perplexity", "change",
                "beyond the seeds?"],
         "zh": ["去掉的部分", "命令行参数", "参数量", "验证损失", "验证困惑度", "变化",
                "超出种子间的差异？"]},
        cells, right={2, 3, 4, 5}))
    page.fact("full.val", full["val_loss"])
    page.fact("full.val_ppl", math.exp(full["val_loss"]))


JOBS = [Job("stage4", write, runs=(*RUNS.values(), *SEED_RUNS, *VARIANTS.values(),
                                   *ABLATIONS.values(), *HARDER.values(), *DEEP.values(),
                                   *STAGE3.values()), files=(STAGE,),
            draws=tuple(Draw(attention, d, labels, tag, reads=RUNS[d]) for d in ("en", "zh")
                        for labels, tag in ((None, ""), (ZH_LABELS, "_zh"))),
            timed=(*RUNS.values(), *VARIANTS.values()))]
