"""The last page, "Scale up and go further": the two-minute presets next to published
runs (losses and perplexities), what the lecture's run would take here, and the
encoder-decoder Transformer in one figure."""

from __future__ import annotations

import math

from .. import Job, Page
from .stage5 import PRESETS, SAMPLES

# Published validation losses on Tiny Shakespeare, character level (the sources the page cites).
PUBLISHED = {"nanogpt_cpu": 1.88, "lecture_gpu": 1.48}
LECTURE = {"params": 10_788_929, "tokens": 64 * 256 * 5000}  # as its script prints; B * T * steps
# The lecture's model as stage 5's flags build it (Tiny Shakespeare's 65 characters).
LECTURE_FLAGS = dict(vocab_size=65, block_size=256, n_layer=6, n_head=6, n_embd=384, dropout=0.2,
                     bias=True, tie_weights=False)


def lecture_params_here() -> int:
    """Stage 5's parameters with the lecture's sizes and --no-tie-weights, counted on the
    meta device (shapes, no memory)."""
    import torch

    from stage5_gpt.model import GPT, GPTConfig

    with torch.device("meta"):
        model = GPT(GPTConfig(**LECTURE_FLAGS))
    return sum(p.numel() for p in model.parameters())


def transformer_figure(page: Page, lang: str) -> None:
    """The encoder-decoder Transformer beside the decoder-only GPT, as boxes."""
    from stage5_gpt.plots import plt, use_cjk_font

    use_cjk_font()
    w = {"en": ("encoder", "decoder", "GPT (decoder only)", "self-attention\n(sees all)",
                "masked self-attention", "cross-attention\n(queries: decoder,\nkeys, values: encoder)",
                "MLP", "source: «the cat sat»", "target so far", "next token", "text so far"),
         "zh": ("编码器", "解码器", "GPT（只有解码器）", "自注意力\n（看得到全部）", "带掩码的自注意力",
                "交叉注意力\n（查询来自解码器，\n键和值来自编码器）", "MLP", "源句：«the cat sat»",
                "已生成的目标", "下一个词元", "已有的文本")}[lang]
    fig, ax = plt.subplots(figsize=(8, 5.2), dpi=120)
    ax.set_axis_off()
    box = dict(boxstyle="round,pad=0.4", fc="#e8eaf6", ec="#3f51b5")
    for x, title in ((0.17, w[0]), (0.5, w[1]), (0.84, w[2])):
        ax.text(x, 0.97, title, ha="center", fontsize=11, weight="bold")
    inputs, outputs, plain = "#fff3e0", "#e8f5e9", box["fc"]  # (x, y, words, colour) per box
    for x, y, i, color in ((0.17, 0.1, 7, inputs), (0.17, 0.42, 3, plain), (0.17, 0.7, 6, plain),
                           (0.5, 0.1, 8, inputs), (0.5, 0.32, 4, plain), (0.5, 0.56, 5, "#fce4ec"),
                           (0.5, 0.78, 6, plain), (0.5, 0.91, 9, outputs), (0.84, 0.1, 10, inputs),
                           (0.84, 0.42, 4, plain), (0.84, 0.7, 6, plain), (0.84, 0.91, 9, outputs)):
        ax.text(x, y, w[i], ha="center", va="center", fontsize=9, bbox={**box, "fc": color})
    ax.annotate("", xy=(0.41, 0.56), xytext=(0.24, 0.7), arrowprops=dict(arrowstyle="->", lw=1.5))
    fig.savefig(page.dir / f"transformer{'' if lang == 'en' else '_zh'}.png", bbox_inches="tight")
    plt.close(fig)


def write(page: Page) -> None:
    for name, run in PRESETS.items():
        m = page.stored(run).metrics
        page.fact(f"{name}.best", m["best_val_loss"])
        page.fact(f"{name}.seconds", m["train_seconds"])
        page.fact(f"{name}.ppl", math.exp(m["best_val_loss"]))  # perplexity of the best loss
    # The two 2-minute presets: one time for both when they print the same whole seconds.
    two = [round(page.stored(PRESETS[n]).metrics["train_seconds"])
           for n in ("shakespeare-2min", "tang-2min")]
    page.fact("two_min.same_seconds", two[0] == two[1])
    page.both("two_min_time", {  # the home page's sentence: "each" when the times are equal
        "en": ("The two-minute presets of the [last page](scale.md#bigger-runs), on Tiny "
               "Shakespeare and the Tang poems (downloaded once), "
               + (f"take {two[0]} seconds each" if two[0] == two[1] else
                  f"take {two[0]} and {two[1]} seconds") + " on both cores."),
        "zh": ("[最后一页](scale.md#bigger-runs)的两分钟预设在 Tiny Shakespeare 和唐诗上"
               "（第一次运行时下载）用两个核，"
               + (f"各用了 {two[0]} 秒。" if two[0] == two[1] else
                  f"分别用了 {two[0]} 秒和 {two[1]} 秒。"))})
    short = page.stored(PRESETS["shakespeare-2min"]).metrics
    ratio = (LECTURE["params"] * LECTURE["tokens"]  # compute ~ 6 x parameters x tokens
             / (short["params"] * short["batch_size"] * short["block_size"] * short["steps"]))
    page.fact("lecture.ratio", ratio)
    page.fact("lecture.hours", ratio * short["train_seconds"] / 3600)  # at the 2-minute pace
    page.fact("lecture.params", LECTURE["params"])
    page.fact("lecture.params_here", lecture_params_here())
    for name in ("shakespeare-2min", "tang-2min"):
        page.write(f"sample_{name}.txt", page.stored(SAMPLES[name]).stdout)
    for key, value in PUBLISHED.items():
        page.fact(f"published.{key}", value)
        page.fact(f"published.{key}_ppl", math.exp(value))
    for lang in ("en", "zh"):
        transformer_figure(page, lang)


JOBS = [Job("scale", write, runs=(*PRESETS.values(), SAMPLES["shakespeare-2min"],
                                  SAMPLES["tang-2min"]),
            files=("stage5_gpt/model.py",), timed=tuple(PRESETS.values()))]
