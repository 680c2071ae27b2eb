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


# Words of the Transformer figure, per edition.
FIGURE_WORDS = {
    "en": {"titles": ("encoder", "decoder", "GPT (decoder only)"),
           "source": "source: “the cat sat”", "target": "target so far", "text": "text so far",
           "embed": "token embedding\n+ position",
           "sees_all": "self-attention\n(sees all)", "masked": "masked self-attention",
           "cross": "cross-attention\n(queries: decoder,\nkeys, values: encoder)",
           "mlp": "MLP", "h": "H: one vector\nper source token", "next": "next token",
           "none": "no cross-attention", "layers": "× N layers",
           "key": "⊕  residual addition: x + Sublayer(x)"},
    "zh": {"titles": ("编码器", "解码器", "GPT（只有解码器）"),
           "source": "源句子：“the cat sat”", "target": "已写出的目标", "text": "已有的文本",
           "embed": "词元嵌入\n+ 位置",
           "sees_all": "自注意力\n（看得到全部）", "masked": "带掩码的自注意力",
           "cross": "交叉注意力\n（查询来自解码器，\n键和值来自编码器）",
           "mlp": "MLP", "h": "H：每个源词元\n一个向量", "next": "下一个词元",
           "none": "没有交叉注意力", "layers": "× N 层",
           "key": "⊕  残差相加：x + 子层(x)"},
}


def transformer_figure(page: Page, lang: str) -> None:
    """The encoder-decoder Transformer beside the decoder-only GPT: each column from its
    input up, arrows for the data flow, a ⊕ for each residual addition (its skip line
    going round the sublayer), a dashed frame round one layer, and the arrow that carries
    the encoder's output H into the decoder's cross-attention. LayerNorm is left out."""
    from stage5_gpt.plots import plt, use_cjk_font

    use_cjk_font()
    w = FIGURE_WORDS[lang]
    fig, ax = plt.subplots(figsize=(9, 7.6), dpi=120)
    ax.set_xlim(0, 12)
    ax.set_ylim(0, 11)
    ax.set_axis_off()
    ink, frame = "#37474f", "#9e9e9e"
    colour = {"in": "#fff3e0", "out": "#e8f5e9", "part": "#e8eaf6", "cross": "#fce4ec"}
    rows = {"in": 0.6, "embed": 1.8, "attn": 3.1, "plus1": 4.15, "mid": 5.4, "plus2": 6.65,
            "mlp": 7.75, "plus3": 8.75, "top": 9.75, "h": 8.2}
    # (x, skip side, [(row, words or "+", colour)] from the bottom up)
    columns = [(2.0, -1, [("in", w["source"], "in"), ("embed", w["embed"], "in"),
                          ("attn", w["sees_all"], "part"), ("plus1", "+", None),
                          ("mid", w["mlp"], "part"), ("plus2", "+", None),
                          ("h", w["h"], "out")]),
               (6.0, 1, [("in", w["target"], "in"), ("embed", w["embed"], "in"),
                         ("attn", w["masked"], "part"), ("plus1", "+", None),
                         ("mid", w["cross"], "cross"), ("plus2", "+", None),
                         ("mlp", w["mlp"], "part"), ("plus3", "+", None),
                         ("top", w["next"], "out")]),
               (10.0, 1, [("in", w["text"], "in"), ("embed", w["embed"], "in"),
                          ("attn", w["masked"], "part"), ("plus1", "+", None),
                          ("mlp", w["mlp"], "part"), ("plus3", "+", None),
                          ("top", w["next"], "out")])]
    for (x, _, _), title in zip(columns, w["titles"], strict=True):
        ax.text(x, 10.6, title, ha="center", va="center", fontsize=11, weight="bold")
    drawn = []  # per column: [(row, text artist)]
    for x, _, items in columns:
        drawn.append([])
        for row, words, fill in items:
            style = (dict(boxstyle="circle,pad=0.12", fc="white", ec=ink) if fill is None else
                     dict(boxstyle="round,pad=0.4", fc=colour[fill], ec="#3f51b5"))
            t = ax.text(x, rows[row], words, ha="center", va="center", zorder=3,
                        fontsize=10 if fill is None else 9, weight="bold" if fill is None else None,
                        bbox=style)
            drawn[-1].append((row, t))
    fig.canvas.draw()
    to_data = ax.transData.inverted()

    def extent(t):  # (left, bottom, right, top) of a text's box, in data coordinates
        (x0, y0), (x1, y1) = to_data.transform(t.get_bbox_patch().get_window_extent())
        return x0, y0, x1, y1

    def arrow(start, end):
        ax.annotate("", xy=end, xytext=start, zorder=2,
                    arrowprops=dict(arrowstyle="-|>", color=ink, lw=1.2, shrinkA=0, shrinkB=0,
                                    mutation_scale=10))

    for (x, side, _), items in zip(columns, drawn, strict=True):
        boxes = [extent(t) for _, t in items]
        half = max(max(b[2] - x, x - b[0]) for (row, _), b in zip(items, boxes, strict=True)
                   if row in ("attn", "mid", "mlp"))
        skip_x = x + side * (half + 0.3)
        for lower, upper in zip(boxes, boxes[1:], strict=False):
            arrow((x, lower[3]), (x, upper[1]))
        for i, (_, t) in enumerate(items):
            if t.get_text() != "+":
                continue
            below, part, plus = boxes[i - 2], boxes[i - 1], boxes[i]
            branch = (below[3] + part[1]) / 2  # the stream splits before the sublayer ...
            ax.plot([x, skip_x, skip_x], [branch, branch, (plus[1] + plus[3]) / 2],
                    color=ink, lw=1.2, zorder=1)
            ax.plot([x], [branch], "o", color=ink, ms=3, zorder=2)
            arrow((skip_x, (plus[1] + plus[3]) / 2),  # ... and is added back after it
                  (plus[2] if side > 0 else plus[0], (plus[1] + plus[3]) / 2))
        # one layer: from the first split to the last addition, repeated N times
        first_part, last_plus = boxes[2], [b for (r, _), b in zip(items, boxes, strict=True) if "plus" in r][-1]
        bottom = (boxes[1][3] + (boxes[1][3] + first_part[1]) / 2) / 2
        left, right = sorted((x - side * (half + 0.25), skip_x + side * 0.25))
        top = last_plus[3] + 0.25
        ax.add_patch(plt.Rectangle((left, bottom), right - left, top - bottom, fill=False,
                                   ls="--", lw=1, ec=frame, zorder=0))
        ax.text(right if side > 0 else left, top + 0.05, w["layers"], ha="right" if side > 0
                else "left", va="bottom", fontsize=8, color="#616161")
    ax.text(columns[2][0], rows["mid"], w["none"], ha="center", va="center", fontsize=8,
            color="#757575", style="italic", zorder=3,  # an empty slot the stream runs through
            bbox=dict(boxstyle="round,pad=0.4", fc="white", ec="#bdbdbd", ls="--"))
    h, cross = extent(drawn[0][-1][1]), extent(drawn[1][4][1])
    ax.annotate("", xy=(cross[0], (cross[1] + cross[3]) / 2), xytext=(h[2], (h[1] + h[3]) / 2),
                zorder=2, arrowprops=dict(arrowstyle="-|>", color="#c2185b", lw=2,
                                          shrinkA=0, shrinkB=0, mutation_scale=14))
    ax.text(0.1, 0.05, w["key"], ha="left", va="bottom", fontsize=8, color="#616161")
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
        "en": ("The two-minute presets of [Scale up and go further](scale.md#bigger-runs), on "
               "Tiny Shakespeare and the Tang poems (downloaded once), "
               + (f"take {two[0]} seconds each" if two[0] == two[1] else
                  f"take {two[0]} and {two[1]} seconds") + " on both cores."),
        "zh": ("[《扩大规模，继续深入》](scale.md#bigger-runs)一页的两分钟预设在 Tiny Shakespeare "
               "和唐诗上（第一次运行时下载）用两个核，"
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
