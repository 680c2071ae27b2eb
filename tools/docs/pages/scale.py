"""The last page, "Scale up and go further": the two-minute presets next to published
runs, how GPT-2's weights map onto stage 5, a first look at BPE, and the encoder-decoder
Transformer in one figure."""

from __future__ import annotations

from collections import Counter

from .. import Job, Page, table
from .stage5 import PRESETS, SAMPLES

# Published validation losses on Tiny Shakespeare, character level (the sources the page cites).
PUBLISHED = {"nanogpt_cpu": 1.88, "lecture_gpu": 1.48}
LECTURE = {"params": 10_788_929, "tokens": 64 * 256 * 5000}  # as its script prints; B * T * steps


def bpe(text: str, merges: int) -> tuple[list[tuple[str, str, int]], int, int]:
    """The first ``merges`` merges of byte-pair encoding on ``text`` (characters as the
    starting symbols, inside words): (left, right, count) per merge, and the number of
    tokens before and after."""
    words = Counter(text.split())
    seqs = {w: list(w) for w in words}
    before = sum(len(w) * n for w, n in words.items())
    done = []
    for _ in range(merges):
        pairs: Counter = Counter()
        for w, n in words.items():
            s = seqs[w]
            for a, b in zip(s, s[1:], strict=False):
                pairs[a, b] += n
        if not pairs:
            break
        (a, b), count = pairs.most_common(1)[0]
        done.append((a, b, count))
        for w in words:
            s, out, i = seqs[w], [], 0
            while i < len(s):
                if i + 1 < len(s) and (s[i], s[i + 1]) == (a, b):
                    out.append(a + b)
                    i += 2
                else:
                    out.append(s[i])
                    i += 1
            seqs[w] = out
    return done, before, sum(len(seqs[w]) * n for w, n in words.items())


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


def in_gpt2(name: str) -> tuple[str, str]:
    """Where GPT-2 keeps our weight ``name``, in English and in Chinese: under the same name,
    transposed (its Conv1D stores (in, out)), or nowhere (our head's bias, set to 0)."""
    from stage5_gpt.gpt2 import TRANSPOSED

    if name == "lm_head.bias":
        return "none: set to 0", "没有：设为 0"
    if name.endswith(TRANSPOSED):
        return f"{name} (transposed)", f"{name}（转置）"
    return name, name


def write(page: Page) -> None:
    for name, run in PRESETS.items():
        m = page.stored(run).metrics
        page.fact(f"{name}.best", m["best_val_loss"])
        page.fact(f"{name}.seconds", m["train_seconds"])
    short = page.stored(PRESETS["shakespeare-2min"]).metrics
    ratio = (LECTURE["params"] * LECTURE["tokens"]  # compute ~ 6 x parameters x tokens
             / (short["params"] * short["batch_size"] * short["block_size"] * short["steps"]))
    page.fact("lecture.ratio", ratio)
    page.fact("lecture.hours", ratio * short["train_seconds"] / 3600)  # at the 2-minute pace
    for name in ("shakespeare-2min", "tang-2min"):
        page.write(f"sample_{name}.txt", page.stored(SAMPLES[name]).stdout)
    for key, value in PUBLISHED.items():
        page.fact(f"published.{key}", value)
    import torch

    from stage5_gpt.gpt2 import SMALL, mapping
    from stage5_gpt.model import GPTConfig

    with torch.device("meta"):
        rows = mapping(GPTConfig(**SMALL, bias=True, tie_weights=True))
    cells = [in_gpt2(n) for n, _, _ in rows]
    assert [c[0] for c in cells] == [t for _, _, t in rows], "gpt2.mapping() changed its words"
    page.both("gpt2", table({"en": ["stage 5's name", "shape (GPT-2 small)", "in GPT-2"],
                             "zh": ["第五步里的名字", "形状（GPT-2 small）", "在 GPT-2 里"]},
                            [(f"`{n}`", f"`{s}`", c) for (n, s, _), c in zip(rows, cells, strict=True)]))
    from stage5_gpt.data import load_text

    merges, before, after = bpe(load_text("en"), 12)
    page.both("bpe", table({"en": ["merge", "pair", "new token", "times seen"],
                            "zh": ["合并", "字符对", "新的词元", "出现次数"]},
                           [(i, f"`{a}` + `{b}`", f"`{a + b}`", f"{n:,}")
                            for i, (a, b, n) in enumerate(merges, 1)], right={3}))
    page.fact("bpe.before", before)
    page.fact("bpe.after", after)
    for lang in ("en", "zh"):
        transformer_figure(page, lang)


JOBS = [Job("scale", write, runs=(*PRESETS.values(), SAMPLES["shakespeare-2min"],
                                  SAMPLES["tang-2min"]),
            files=("stage5_gpt/gpt2.py", "stage5_gpt/model.py", "stage5_gpt/corpus/en.txt"),
            timed=tuple(PRESETS.values()))]
