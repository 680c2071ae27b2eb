"""gen_docs jobs for the stage-3 page: from "average the past" to self-attention.

The page builds self-attention in four steps before it shows the model's head.
The four steps are the functions below (the page includes them, between the
``--8<--`` markers); each mixes the vectors of a sequence ``x`` (B, T, C) so that
position t gets a weighted average of positions 0..t:

1. ``average_loop``: a Python loop over batch and time;
2. ``average_matmul``: the same averages as one product with a lower-triangular matrix;
3. ``average_softmax``: the same weights from a softmax of zeros with -inf above the diagonal;
4. ``self_attention``: the weights from the data, q . k, instead of zeros.

Job ``stage3_buildup`` runs them on a small example, checks that 1-3 agree exactly
and that 4 becomes 3 when every score is equal, and writes the printed tensors, the
pictures (the weight matrices, the causal mask, the sinusoidal position table), the
shape and parameter tables. Job ``stage3_trained_head`` trains stage 3 at its
defaults again (the run is deterministic: it must end at the val loss of job
stage3_en, or the job stops) and writes what the page reads off its attention
figure and its loss, with the numbers. Neither job is part of the stage: stage3_attention/
only changes what it teaches.

    python tools/gen_docs.py --only stage3_buildup stage3_trained_head
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch is imported only when a job runs: gen_docs --list stays fast
    import torch

HERE = "tools/docs_course_stage3.py"
SEED = 1337
T_EXAMPLE, C_EXAMPLE = 4, 2  # the printed example: 4 positions, vectors of 2 numbers
SHAPES = {"B": 4, "T": 8}  # the shape table: sizes that differ from C (32) and V (60)
PE_COLUMNS = (0, 1, 8, 9, 24, 25)  # the curves of the sinusoidal figure
PE_DISTANCES = (1, 2, 4, 8, 16, 31)


# ----------------------------------------------------------------------------- the build-up
# Each function takes x (B, T, C) and returns (B, T, C): row t mixes rows 0..t of x.

# --8<-- [start:loop]
def average_loop(x: torch.Tensor) -> torch.Tensor:
    """xbow[b, t] = mean of x[b, 0], ..., x[b, t]: a "bag of words" of the past."""
    B, T, C = x.shape
    xbow = x.new_zeros(B, T, C)
    for b in range(B):
        for t in range(T):
            xprev = x[b, : t + 1]  # (t + 1, C): this position and the ones before it
            xbow[b, t] = xprev.mean(dim=0)  # (C,)
    return xbow
# --8<-- [end:loop]


# --8<-- [start:matmul]
def average_matmul(x: torch.Tensor) -> torch.Tensor:
    """The same averages as one matrix product: row t of wei is 1/(t+1) on 0..t, 0 after."""
    T = x.shape[1]
    wei = x.new_ones(T, T).tril()  # (T, T) lower-triangular ones
    wei = wei / wei.sum(dim=1, keepdim=True)  # each row sums to 1
    return wei @ x  # (T, T) @ (B, T, C) -> (B, T, C): broadcast over B
# --8<-- [end:matmul]


# --8<-- [start:softmax]
def average_softmax(x: torch.Tensor) -> torch.Tensor:
    """The same weights again, from a softmax: equal scores where allowed, -inf elsewhere."""
    T = x.shape[1]
    tril = x.new_ones(T, T).tril()
    wei = x.new_zeros(T, T)  # every score equal: no position is preferred yet
    wei = wei.masked_fill(tril == 0, float("-inf"))  # the future: e^-inf = 0
    wei = wei.softmax(dim=-1)  # row t: 1/(t+1) on 0..t
    return wei @ x  # (B, T, C)
# --8<-- [end:softmax]


# --8<-- [start:attention]
def self_attention(x: torch.Tensor, W_q: torch.Tensor, W_k: torch.Tensor,
                   W_v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The scores come from the data: q_i . k_j instead of zeros. Returns (out, wei)."""
    T = x.shape[1]
    q = x @ W_q  # (B, T, hs): what each position looks for
    k = x @ W_k  # (B, T, hs): what each position contains
    v = x @ W_v  # (B, T, hs): what each position passes on
    wei = q @ k.transpose(-2, -1) / math.sqrt(k.shape[-1])  # (B, T, T) scores
    tril = x.new_ones(T, T).tril()
    wei = wei.masked_fill(tril == 0, float("-inf"))  # still no peeking ahead
    wei = wei.softmax(dim=-1)  # (B, T, T), each row sums to 1
    return wei @ v, wei  # (B, T, hs), (B, T, T)
# --8<-- [end:attention]


def weights_of(form, T: int) -> torch.Tensor:
    """The (T, T) weight matrix a mixing function applies, read off by feeding it the
    identity: row t of ``form(I)`` is how much position t takes from each position."""
    import torch

    return form(torch.eye(T)[None])[0]


# ----------------------------------------------------------------------------- printing


def fmt(m: torch.Tensor, digits: int = 2) -> str:
    """A matrix as aligned text, as a reader would see it printed (-inf kept)."""
    rows = [[("-inf" if math.isinf(float(v)) else f"{float(v):.{digits}f}") for v in row]
            for row in m.reshape(-1, m.shape[-1])]
    width = max(len(c) for row in rows for c in row)
    return "\n".join("  ".join(c.rjust(width) for c in row) for row in rows)


def named(**tensors: torch.Tensor) -> str:
    return "\n\n".join(f"{name} {tuple(t.shape)}:\n{fmt(t)}" for name, t in tensors.items())


def example() -> dict:
    """The small example of the page and the check that the four forms agree."""
    import torch

    torch.manual_seed(SEED)
    x = torch.randint(0, 10, (1, T_EXAMPLE, C_EXAMPLE)).float()  # small whole numbers
    hs = C_EXAMPLE
    # Small weights: scores of order 1 (x holds numbers up to 9), so the softmax stays soft.
    W_q, W_k, W_v = (0.3 * torch.randn(C_EXAMPLE, hs) for _ in range(3))
    loop, matmul, soft = average_loop(x), average_matmul(x), average_softmax(x)
    out, wei = self_attention(x, W_q, W_k, W_v)
    # The same check on a bigger random batch: the forms must agree, not just here.
    xb = torch.randn(3, 8, 5)
    diffs = {
        "loop vs matmul": (average_loop(xb) - average_matmul(xb)).abs().max().item(),
        "loop vs softmax": (average_loop(xb) - average_softmax(xb)).abs().max().item(),
        # q = k = 0 makes every score 0: self-attention is then the average of the past values.
        "softmax vs self-attention with W_q = W_k = 0": (
            average_softmax(xb @ torch.eye(5))
            - self_attention(xb, torch.zeros(5, 5), torch.zeros(5, 5), torch.eye(5))[0]
        ).abs().max().item(),
    }
    for name, d in diffs.items():
        assert d < 1e-6, f"{name}: the forms disagree by {d}"
    assert torch.equal(weights_of(average_loop, T_EXAMPLE), weights_of(average_matmul, T_EXAMPLE))
    T = T_EXAMPLE
    tril = torch.ones(T, T).tril()
    scores = (x @ W_q) @ (x @ W_k).transpose(-2, -1) / math.sqrt(hs)
    masked = scores.masked_fill(tril == 0, float("-inf"))
    assert torch.allclose(masked.softmax(-1), wei)
    assert torch.allclose(wei.sum(-1), torch.ones(1, T)) and (wei[0].triu(1) == 0).all()
    return {"x": x, "loop": loop, "matmul": matmul, "softmax": soft, "out": out, "wei": wei,
            "tril": tril, "scores": scores[0], "masked": masked[0], "diffs": diffs,
            "W": (W_q, W_k, W_v)}


def write_example(gen_docs, ex: dict) -> None:
    import torch

    T = T_EXAMPLE
    tril = ex["tril"]
    wei2 = tril / tril.sum(1, keepdim=True)
    zeros = torch.zeros(T, T).masked_fill(tril == 0, float("-inf"))
    gen_docs.write("stage3_buildup_loop.txt", named(x=ex["x"][0], xbow=ex["loop"][0]))
    gen_docs.write("stage3_buildup_matmul.txt",
                   named(**{"tril": tril, "wei = tril / row sums": wei2, "wei @ x": ex["matmul"][0]}))
    gen_docs.write("stage3_buildup_softmax.txt",
                   named(**{"zeros, masked": zeros, "softmax(dim=-1)": zeros.softmax(-1),
                            "wei @ x": ex["softmax"][0]}))
    W_q, W_k, W_v = ex["W"]
    gen_docs.write("stage3_buildup_attention.txt",
                   named(**{"q = x @ W_q": (ex["x"] @ W_q)[0], "k = x @ W_k": (ex["x"] @ W_k)[0],
                            "scores q @ k^T / sqrt(hs)": ex["scores"], "masked": ex["masked"],
                            "wei = softmax": ex["wei"][0], "out = wei @ v": ex["out"][0]}))
    gen_docs.write("stage3_buildup_agree.txt", "\n".join(
        f"largest difference, {name}: {d:.1e}" for name, d in ex["diffs"].items()))


# ----------------------------------------------------------------------------- figures


def grid(ax, m, title: str, blocked=None, vmin=0.0, vmax=1.0, cmap="viridis"):
    """One annotated T x T heat map; ``blocked`` cells are drawn grey with "-inf"."""
    import numpy as np

    T = m.shape[0]
    data = np.array(m, dtype=float)
    shown = np.where(np.isinf(data), np.nan, data)
    im = ax.imshow(np.ma.masked_invalid(shown), cmap=cmap, vmin=vmin, vmax=vmax)
    im.cmap.set_bad("#d0d0d0")
    for i in range(T):
        for j in range(T):
            v = data[i, j]
            text = "−∞" if np.isinf(v) else f"{v:.2f}"
            if blocked is not None and blocked[i, j]:
                text = "blocked"
            dark = not np.isinf(v) and (v - vmin) / (vmax - vmin or 1) < 0.55
            ax.text(j, i, text, ha="center", va="center", fontsize=9,
                    color="white" if dark and blocked is None else "black")
    ax.set_xticks(range(T), [f"j={j}" for j in range(T)], fontsize=8)
    ax.set_yticks(range(T), [f"i={i}" for i in range(T)], fontsize=8)
    ax.tick_params(length=0)
    ax.set_title(title, fontsize=10)
    return im


def save(fig, gen_docs, name: str) -> None:
    path = gen_docs.GEN / name
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    print(f"  {path.relative_to(gen_docs.ROOT)}")


# The words of the figures, per edition: English, and Chinese for docs/zh/ (files ``..._zh``).
LABELS = {
    "en": {
        "forms": ("1. loop", "2. tril matrix product", "3. masked softmax",
                  "4. self-attention (q · k)"),
        "weight_of": "weight of position j in row i",
        "weights_title": "Row i: how much position i takes from position j.\n"
                         "The same averages three ways, then weights from the data",
        "allowed": "allowed", "blocked": "blocked", "mask": "mask: j ≤ i allowed",
        "scores": "scores q·k/√hs", "masked": "scores after masking",
        "softmax": "weights: softmax per row", "weight": "weight",
        "mask_title": "The causal mask: scores above the diagonal become −∞,\n"
                      "so their weight after the softmax is exactly 0",
        "pe_x": "column i of the vector (even: sin, odd: cos)", "position": "position p",
        "pe_title": "PE[p, i] for block_size={T}, n_embd={C}",
        "column": "column {col} ({fn})", "curves": "a few columns against the position",
        "pe_suptitle": "Sinusoidal position encodings:\n"
                       "fast columns on the left, slow ones on the right",
    },
    "zh": {
        "forms": ("1. 循环", "2. tril 矩阵乘法", "3. 带掩码的 softmax", "4. 自注意力（q · k）"),
        "weight_of": "第 i 行中位置 j 的权重",
        "weights_title": "第 i 行：位置 i 从位置 j 取多少。\n"
                         "前三种写法算出同样的平均，第四种的权重来自数据",
        "allowed": "允许", "blocked": "屏蔽", "mask": "掩码：允许 j ≤ i",
        "scores": "分数 q·k/√hs", "masked": "掩码之后的分数",
        "softmax": "权重：逐行 softmax", "weight": "权重",
        "mask_title": "因果掩码：对角线以上的分数变成 −∞，\n"
                      "所以经过 softmax 后它们的权重恰好为 0",
        "pe_x": "向量的第 i 列（偶数列：sin，奇数列：cos）", "position": "位置 p",
        "pe_title": "block_size={T}、n_embd={C} 时的 PE[p, i]",
        "column": "第 {col} 列（{fn}）", "curves": "几列随位置的变化",
        "pe_suptitle": "正弦位置编码：\n左边的列变化快，右边的列变化慢",
    },
}
LANGS = ("en", "zh")


def tag(lang: str) -> str:
    """The file-name marker of an edition: x.png (English), x_zh.png (Chinese)."""
    return "" if lang == "en" else f"_{lang}"


def fonts(lang: str):
    """A context to draw an edition's figure in: Chinese labels need a CJK font (the one the
    stage's own figures use); the settings end with the context, so English figures stay as
    they are."""
    import contextlib

    import matplotlib.pyplot as plt

    if lang == "en":
        return contextlib.nullcontext()
    from stage3_attention.plots import use_cjk_font

    with plt.rc_context():  # use_cjk_font sets matplotlib's settings once: keep them local
        family = use_cjk_font()
    if family is None:
        raise SystemExit("no font that can draw Chinese: install fonts-noto-cjk")
    return plt.rc_context({"font.family": ["DejaVu Sans", family], "axes.unicode_minus": False})


def figures(gen_docs, ex: dict, lang: str = "en") -> None:
    with fonts(lang):
        draw_figures(gen_docs, ex, lang)


def draw_figures(gen_docs, ex: dict, lang: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    L = LABELS[lang]
    T = T_EXAMPLE
    # The weight matrix of each step, read off each function itself (weights_of).
    W_q, W_k, W_v = ex["W"]
    forms = list(zip(L["forms"], (weights_of(average_loop, T), weights_of(average_matmul, T),
                                  weights_of(average_softmax, T), ex["wei"][0]), strict=True))
    # 2 x 2 panels: at the page's width (about 690 px) the numbers in the cells stay legible.
    fig, axes = plt.subplots(2, 2, figsize=(8, 7.6), dpi=120, constrained_layout=True)
    for ax, (title, w) in zip(axes.flat, forms, strict=True):
        im = grid(ax, w.numpy(), title)
    fig.colorbar(im, ax=axes, shrink=0.6, label=L["weight_of"])
    fig.suptitle(L["weights_title"])
    save(fig, gen_docs, f"img/stage3_buildup_weights{tag(lang)}.png")
    plt.close(fig)

    # The causal mask: what is allowed, the scores before and after, the weights.
    allowed = ex["tril"].numpy()
    fig, axes = plt.subplots(2, 2, figsize=(8, 7.6), dpi=120, constrained_layout=True)
    axes = axes.flat
    ax = axes[0]
    ax.imshow(allowed, cmap="Greens", vmin=-0.3, vmax=1.3)
    for i in range(T):
        for j in range(T):
            ax.text(j, i, L["allowed"] if allowed[i, j] else L["blocked"], ha="center",
                    va="center", fontsize=8)
    ax.set_xticks(range(T), [f"j={j}" for j in range(T)], fontsize=8)
    ax.set_yticks(range(T), [f"i={i}" for i in range(T)], fontsize=8)
    ax.tick_params(length=0)
    ax.set_title(L["mask"], fontsize=10)
    s = ex["scores"].numpy()
    lim = float(np.abs(s).max())
    grid(axes[1], s, L["scores"], vmin=-lim, vmax=lim, cmap="coolwarm")
    grid(axes[2], ex["masked"].numpy(), L["masked"], vmin=-lim, vmax=lim, cmap="coolwarm")
    im = grid(axes[3], ex["wei"][0].numpy(), L["softmax"])
    fig.colorbar(im, ax=axes[3], shrink=0.8, label=L["weight"])
    fig.suptitle(L["mask_title"])
    save(fig, gen_docs, f"img/stage3_causal_mask{tag(lang)}.png")
    plt.close(fig)


def sinusoidal(gen_docs) -> None:
    """The fixed position table of ``--pos sinusoidal`` at the defaults, as pictures and numbers."""
    import matplotlib

    matplotlib.use("Agg")
    import torch

    from stage3_attention.model import ModelConfig, sinusoidal_positions

    cfg = ModelConfig(vocab_size=1)  # the defaults: block_size and n_embd
    T, C = cfg.block_size, cfg.n_embd
    pe = sinusoidal_positions(T, C)  # (T, C), the model's own function
    p = torch.arange(T)
    for lang in LANGS:
        with fonts(lang):
            sinusoidal_figure(gen_docs, pe, lang)

    # The numbers the page quotes: wavelengths, and how similar positions d apart are.
    def wavelength(col: int) -> float:
        return 2 * math.pi * 10000 ** ((col - col % 2) / C)

    def sim_of(table: torch.Tensor) -> torch.Tensor:
        unit = table / table.norm(dim=1, keepdim=True)
        return unit @ unit.T  # (T, T) cosine similarity of two positions' vectors

    sim = sim_of(pe)
    mean_at = {d: sim.diagonal(d).mean().item() for d in PE_DISTANCES}
    assert torch.allclose(pe[:, 0], torch.sin(p.float())), "column 0 is sin(p)"
    near, d_low = mean_at[1], min(mean_at, key=mean_at.get)
    assert near == max(mean_at.values()), "the page says neighbours are the most alike"
    slow = sim_of(pe[:, C // 2:]).diagonal(T - 1).mean().item()
    n = {"T": T, "C": C, "w0": wavelength(0), "w8": wavelength(8), "w24": wavelength(24),
         "wlast": wavelength(C - 2), "first": pe[0, C - 1].item(), "last": pe[T - 1, C - 1].item(),
         "near": near, "low": mean_at[d_low], "d_low": d_low, "slow": slow}
    table = [f"| {d} | {mean_at[d]:.2f} |" for d in PE_DISTANCES]
    gen_docs.write("stage3_sinusoidal.md", sinusoidal_text(n, table))
    gen_docs.write("stage3_sinusoidal_zh.md", sinusoidal_text_zh(n, table))


def sinusoidal_figure(gen_docs, pe, lang: str) -> None:
    """The table as a heat map, and a few of its columns as curves."""
    import matplotlib.pyplot as plt
    import torch

    T, C = pe.shape
    p = torch.arange(T)
    L = LABELS[lang]
    fig, (a, b) = plt.subplots(2, 1, figsize=(7.5, 9), dpi=120, constrained_layout=True,
                               gridspec_kw={"height_ratios": [1.1, 1]})
    im = a.imshow(pe.numpy(), cmap="RdBu_r", vmin=-1, vmax=1, aspect="auto")
    a.set_xlabel(L["pe_x"])
    a.set_ylabel(L["position"])
    a.set_title(L["pe_title"].format(T=T, C=C), fontsize=10)
    fig.colorbar(im, ax=a, shrink=0.9, label="PE[p, i]")
    for col in PE_COLUMNS:
        b.plot(p, pe[:, col], marker="o", markersize=2.5,
               label=L["column"].format(col=col, fn="sin" if col % 2 == 0 else "cos"))
    b.set_xlabel(L["position"])
    b.set_ylabel("PE[p, i]")
    b.set_title(L["curves"], fontsize=10)
    b.grid(alpha=0.3)
    b.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncols=3)
    fig.suptitle(L["pe_suptitle"])
    save(fig, gen_docs, f"img/stage3_sinusoidal{tag(lang)}.png")
    plt.close(fig)


def sinusoidal_text(n: dict, table: list[str]) -> str:
    """What the page reads off the sinusoidal table (English)."""
    T, C = n["T"], n["C"]
    lines = [
        f"With the defaults (`block_size` = {T}, `n_embd` = {C}) the table has {T} rows. "
        f"Column 0 is $\\sin p$: it repeats every $2\\pi \\approx {n['w0']:.2f}$ positions. "
        f"Columns 8 and 9 repeat every {n['w8']:.0f} positions, columns 24 and 25 "
        f"every {n['w24']:,.0f}, and the last pair, columns {C - 2} and {C - 1}, every "
        f"{n['wlast']:,.0f}: over {T} positions column {C - 1} only moves from "
        f"{n['first']:.5f} to {n['last']:.5f}.",
        "",
        "How alike are the vectors of two positions $d$ apart? The cosine similarity "
        "of $\\mathrm{PE}[p]$ and $\\mathrm{PE}[p+d]$, averaged over $p$:",
        "",
        "| distance $d$ | mean cosine similarity |", "|--:|--:|", *table,
    ]
    lines += ["", f"Neighbours are the most alike ({n['near']:.2f} at $d = 1$); the lowest value in "
              f"the table is {n['low']:.2f}, at $d = {n['d_low']}$. It never gets near 0: the right "
              f"half of the columns turns so slowly that, on their own, two positions {T - 1} apart "
              f"still have a cosine similarity of {n['slow']:.2f}."]
    return "\n".join(lines)


def sinusoidal_text_zh(n: dict, table: list[str]) -> str:
    """The same reading for the Chinese edition, with the same numbers."""
    T, C = n["T"], n["C"]
    return "\n".join([
        f"在默认设置下（`block_size` = {T}，`n_embd` = {C}），这张表有 {T} 行。"
        f"第 0 列就是 $\\sin p$：每隔 $2\\pi \\approx {n['w0']:.2f}$ 个位置重复一次。"
        f"第 8、9 列每 {n['w8']:.0f} 个位置重复一次，第 24、25 列每 {n['w24']:,.0f} 个位置一次，"
        f"最后一对（第 {C - 2}、{C - 1} 列）要每 {n['wlast']:,.0f} 个位置才重复一次："
        f"在 {T} 个位置上，第 {C - 1} 列只从 {n['first']:.5f} 变到 {n['last']:.5f}。",
        "",
        "相距 $d$ 的两个位置，它们的向量有多像？下表是 $\\mathrm{PE}[p]$ 与 "
        "$\\mathrm{PE}[p+d]$ 的余弦相似度（cosine similarity）对所有 $p$ 取的平均：",
        "",
        "| 距离 $d$ | 平均余弦相似度 |", "|--:|--:|", *table,
        "",
        f"相邻的位置最像（$d = 1$ 时为 {n['near']:.2f}）；表中最低的值是 {n['low']:.2f}，"
        f"出现在 $d = {n['d_low']}$。它始终离 0 很远：右半边的列转得太慢，单看这些列，"
        f"相距 {T - 1} 的两个位置的余弦相似度仍有 {n['slow']:.2f}。",
    ])


# ----------------------------------------------------------------------------- shapes


# The words of the two tables, per edition. The Chinese tables count the Chinese corpus's
# vocabulary: their total is the one the Chinese page's training output reports.
TABLE_WORDS = {
    "en": {
        "steps": ("input", "token embedding", "position embedding", "sum (broadcast over $B$)",
                  "query", "key", "value", "scores $QK^\\top/\\sqrt{d_k}$, mask, softmax",
                  "weighted sum of values", "output layer",
                  "loss (`F.cross_entropy` on $(B \\cdot T, V)$)"),
        "scalar": "scalar",
        "sizes": "Sizes: $B = {B}$ windows of $T = {T}$ characters (any $T$ up to `block_size` = "
                 "{Tm} works), $C = {C}$ and $V = {V}$ (the English corpus). Read off one forward "
                 "pass of the model at its default sizes:",
        "shape_head": "| step | tensor | shape | here |",
        "params": ("token embedding $E$", "position embedding $P$ (`--pos learned` only)",
                   "$W_Q$, $W_K$, $W_V$ (no bias)", "`lm_head` weight and bias"),
        "each": "$(C, d_k)$ each",
        "defaults": "At the defaults ($V = {V}$, $T_{{\\max}} = {Tm}$, $C = d_k = {C}$):",
        "param_head": "| parameter | shape | count | here |", "total": "total",
    },
    "zh": {
        "steps": ("输入", "词元嵌入", "位置嵌入", "相加（在 $B$ 上广播）", "查询", "键", "值",
                  "分数 $QK^\\top/\\sqrt{d_k}$、掩码、softmax", "值的加权和", "输出层",
                  "损失（在 $(B \\cdot T, V)$ 上做 `F.cross_entropy`）"),
        "scalar": "标量",
        "sizes": "尺寸：$B = {B}$ 个窗口，每个 $T = {T}$ 个字符（不超过 `block_size` = {Tm} 的任何 "
                 "$T$ 都可以），$C = {C}$，$V = {V}$（中文语料）。以下读自模型在默认尺寸下的一次前向传播：",
        "shape_head": "| 步骤 | 张量 | 形状 | 本例 |",
        "params": ("词元嵌入 $E$", "位置嵌入 $P$（仅 `--pos learned`）",
                   "$W_Q$、$W_K$、$W_V$（无偏置）", "`lm_head` 的权重和偏置"),
        "each": "各为 $(C, d_k)$",
        "defaults": "默认设置下（中文语料 $V = {V}$，$T_{{\\max}} = {Tm}$，$C = d_k = {C}$）：",
        "param_head": "| 参数 | 形状 | 个数 | 本例 |", "total": "合计",
    },
}


def shapes(gen_docs, lang: str = "en") -> None:
    """The shape table, read off one forward pass of the real model, and the parameters,
    with the vocabulary of the edition's corpus (``--data en`` or ``--data zh``)."""
    import torch

    from stage3_attention.data import load_text
    from stage3_attention.model import LanguageModel, ModelConfig
    from stage3_attention.tokenizer import CharTokenizer

    words = TABLE_WORDS[lang]
    V = CharTokenizer.from_text(load_text(lang)).vocab_size
    cfg = ModelConfig(vocab_size=V)  # the defaults of stage3_attention.train
    torch.manual_seed(SEED)
    model = LanguageModel(cfg)
    B, T = SHAPES["B"], SHAPES["T"]
    sizes = {"B": B, "T": T, "C": cfg.n_embd, "d_k": model.sa_head.key.out_features, "V": V}
    seen: dict[str, tuple[int, ...]] = {}
    head = model.sa_head
    hooks = [model.token_embedding_table.register_forward_hook(
                 lambda m, i, o: seen.__setitem__("tok_emb", tuple(o.shape))),
             head.register_forward_pre_hook(lambda m, i: seen.__setitem__("x", tuple(i[0].shape)))]
    hooks += [getattr(head, n).register_forward_hook(
                  lambda m, i, o, n=n: seen.__setitem__(n, tuple(o.shape)))
              for n in ("query", "key", "value")]
    hooks.append(head.register_forward_hook(lambda m, i, o: seen.__setitem__("out", tuple(o.shape))))
    idx = torch.randint(0, V, (B, T))
    logits, loss = model(idx, torch.randint(0, V, (B, T)))
    for h in hooks:
        h.remove()
    seen.update(idx=tuple(idx.shape), pos=tuple(model.positions(T, idx.device).shape),
                wei=tuple(head.last_attention.shape), logits=tuple(logits.shape),
                loss=tuple(loss.shape))
    rows = [  # (tensor, symbolic shape, key into seen), one per step of words["steps"]
        ("`idx`", ("B", "T"), "idx"),
        ("`tok_emb = E[idx]`", ("B", "T", "C"), "tok_emb"),
        ("`self.positions(T)`", ("T", "C"), "pos"),
        ("`x`", ("B", "T", "C"), "x"),
        ("`q`", ("B", "T", "d_k"), "query"),
        ("`k`", ("B", "T", "d_k"), "key"),
        ("`v`", ("B", "T", "d_k"), "value"),
        ("`wei`", ("B", "T", "T"), "wei"),
        ("`wei @ v`", ("B", "T", "d_k"), "out"),
        ("`logits`", ("B", "T", "V"), "logits"),
        ("`loss`", (), "loss"),
    ]
    lines = [words["sizes"].format(B=B, T=T, Tm=cfg.block_size, C=cfg.n_embd, V=V), "",
             words["shape_head"], "|---|---|---|---|"]
    for step, (tensor, sym, key) in zip(words["steps"], rows, strict=True):
        expect = tuple(sizes[s] for s in sym)
        assert seen[key] == expect, f"{key}: {seen[key]} is not {sym} = {expect}"
        shape = "$(" + ", ".join(sym) + ")$" if sym else words["scalar"]
        lines.append(f"| {step} | {tensor} | {shape} | `{seen[key]}` |")
    gen_docs.write(f"stage3_shapes{tag(lang)}.md", "\n".join(lines))

    counts = {name: p.numel() for name, p in model.named_parameters()}
    Tm, C, dk = cfg.block_size, cfg.n_embd, sizes["d_k"]
    prow = [("$(V, C)$", "$VC$", ["token_embedding_table.weight"], V * C),
            ("$(T_{\\max}, C)$", "$T_{\\max} C$", ["position_embedding_table.weight"], Tm * C),
            (words["each"], "$3 C d_k$",
             [f"sa_head.{n}.weight" for n in ("query", "key", "value")], 3 * C * dk),
            ("$(d_k, V)$, $(V,)$", "$d_k V + V$", ["lm_head.weight", "lm_head.bias"], dk * V + V)]
    lines = [words["defaults"].format(V=V, Tm=Tm, C=C), "", words["param_head"], "|---|---|---|--:|"]
    for what, (shape, formula, names, n) in zip(words["params"], prow, strict=True):
        assert sum(counts.pop(k) for k in names) == n, what
        lines.append(f"| {what} | {shape} | {formula} | {n:,} |")
    assert not counts, f"parameters the table misses: {sorted(counts)}"
    total = sum(p.numel() for p in model.parameters())
    lines.append(f"| **{words['total']}** | | | **{total:,}** |")
    gen_docs.write(f"stage3_params{tag(lang)}.md", "\n".join(lines))


def buildup_job(gen_docs):
    def stage3_buildup(work: Path, job) -> None:
        ex = example()
        write_example(gen_docs, ex)
        for lang in LANGS:  # English first: the Chinese font changes matplotlib's settings
            figures(gen_docs, ex, lang)
        sinusoidal(gen_docs)
        for lang in LANGS:
            shapes(gen_docs, lang)
    return stage3_buildup


# ----------------------------------------------------------------------------- the trained head


def attention_reading(maps: torch.Tensor, prompt: str) -> dict:
    """What the trained head does, in numbers: the mean weight at each distance i - j
    (over the rows that have one), and per row the distance it weighs most."""
    T = maps.shape[-1]
    by_distance = {d: maps.diagonal(-d).mean().item() for d in range(T)}
    top = [int(i - maps[i, : i + 1].argmax()) for i in range(T)]
    near = [maps[i, max(0, i - 2): i + 1].sum().item() for i in range(T)]  # last 3 characters
    flat = min(range(1, T), key=lambda i: maps[i, : i + 1].max().item())  # the most spread row
    from stage3_attention.plots import token_label  # a space shows as ␣, as in the figure

    return {"by_distance": by_distance, "top": top, "near3": near, "T": T, "prompt": prompt,
            "flat": flat, "flat_char": token_label(prompt[flat]),
            "flat_max": maps[flat, : flat + 1].max().item()}


def trained_head_job(gen_docs):
    def stage3_trained_head(work: Path, job) -> None:
        import torch

        from stage3_attention.checkpoint import load_model
        from stage3_attention.visualize import default_prompt

        out = "out/stage3_trained_head"
        # The same command as job stage3_en, on as many threads as it used: the last digits
        # of the losses depend on the thread count, which the trainer picks by timing.
        gen_docs.run(work, "stage3_attention.train", "--out-dir", out, "--data", "en",
                     "--threads", threads_of(gen_docs, "stage3_attention_train.txt"),
                     "--sample-tokens", "200")
        metrics = json.loads((work / out / "metrics.json").read_text(encoding="utf-8"))
        ref = gen_docs.load_run("stage3_en")
        if round(metrics["val_loss"], 4) != round(ref["val_loss"], 4):
            raise SystemExit(f"stage3_trained_head: this run ended at val {metrics['val_loss']:.4f}, "
                             f"job stage3_en at {ref['val_loss']:.4f}: the reading would not "
                             "describe the figure the page shows")
        model, tok, ckpt = load_model(work / out / "ckpt.pt", torch.device("cpu"))
        prompt = default_prompt(corpus_text("en"), min(model.config.block_size, 24))
        model.eval()
        maps = model.attention_maps(torch.tensor([tok.encode(prompt)]))[0, 0, 0]  # (T, T)
        r = attention_reading(maps, prompt)
        loss, head = reading_text(r, metrics, ref, load_log(work / out),
                                  gen_docs.load_run("stage2_en"), model.config.vocab_size)
        gen_docs.write("stage3_trained_loss.md", loss)
        gen_docs.write("stage3_trained_head.md", head)

        # The Chinese edition shows the figures of job stage3_zh (--data zh) and stage 2's
        # transcript of job stage2_zh: train both again, the same way, and read those.
        zh, bigram_zh = "out/stage3_trained_head_zh", "out/stage3_trained_head_bigram_zh"
        printed = gen_docs.run(work, "stage3_attention.train", "--out-dir", zh, "--data", "zh",
                               "--threads", threads_of(gen_docs, ZH_RUNS["stage3_zh"]),
                               "--sample-tokens", "200")
        same_run(gen_docs, printed, ZH_RUNS["stage3_zh"], "stage3_zh")
        printed = gen_docs.run(work, "stage2_bigram.train", "--out-dir", bigram_zh, "--data", "zh",
                               "--threads", threads_of(gen_docs, ZH_RUNS["stage2_zh"]),
                               "--sample-tokens", "200")
        same_run(gen_docs, printed, ZH_RUNS["stage2_zh"], "stage2_zh")
        metrics = json.loads((work / zh / "metrics.json").read_text(encoding="utf-8"))
        bigram = json.loads((work / bigram_zh / "metrics.json").read_text(encoding="utf-8"))
        model, tok, ckpt = load_model(work / zh / "ckpt.pt", torch.device("cpu"))
        prompt = default_prompt(corpus_text("zh"), min(model.config.block_size, 24))
        model.eval()
        maps = model.attention_maps(torch.tensor([tok.encode(prompt)]))[0, 0, 0]  # (T, T)
        loss, head = reading_text_zh(attention_reading(maps, prompt), metrics,
                                     load_log(work / zh), bigram, model.config.vocab_size,
                                     model.config.n_embd)
        gen_docs.write("stage3_trained_loss_zh.md", loss)
        gen_docs.write("stage3_trained_head_zh.md", head)
    return stage3_trained_head


# The transcripts of the Chinese runs the Chinese page shows (jobs of tools/docs_zh.py, which
# come after this module's jobs). They are inputs of job stage3_trained_head: when those jobs
# run again, it is stale and runs again after them, so the reading follows their figures.
ZH_RUNS = {"stage3_zh": "stage3_attention_train_zh.txt", "stage2_zh": "stage2_bigram_train_zh.txt"}


def threads_of(gen_docs, transcript: str) -> str:
    """How many threads the run of a transcript used ("threads: N" in what it printed)."""
    m = re.search(r"^threads: (\d+)", (gen_docs.GEN / transcript).read_text(encoding="utf-8"), re.M)
    return m.group(1) if m else "1"


STEP_LINE = re.compile(r"^step\s+(\d+): train loss ([\d.]+), val loss ([\d.]+)", re.M)


def same_run(gen_docs, printed: str, transcript: str, job: str) -> None:
    """Stop unless a training printed the losses of the transcript ``job`` keeps (the run
    whose figures the page shows), step by step. While ``job`` is stale (a full rerun
    reaches it later), its transcript is old and only a note is printed."""
    kept = (gen_docs.GEN / transcript).read_text(encoding="utf-8")
    if STEP_LINE.findall(printed) == STEP_LINE.findall(kept):
        return
    if job in gen_docs.stale_jobs(gen_docs.input_hashes(), gen_docs.read_manifest()):
        print(f"  (not compared with {transcript}: job {job} is stale; run it too)")
        return
    raise SystemExit(f"stage3_trained_head: this run's losses differ from {transcript} (job "
                     f"{job}): the reading would not describe the figures the page shows")


def corpus_text(data: str) -> str:
    from stage3_attention.data import load_text

    return load_text(data)


def load_log(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "log.jsonl").read_text(encoding="utf-8").splitlines()
            if line.strip()]


def check_head(r: dict) -> None:
    """What both editions of the page say, in words, below the trained head's figure."""
    by, T = r["by_distance"], r["T"]
    order = sorted(by, key=by.get, reverse=True)
    assert order[0] in (0, 1) and sum(r["near3"][2:]) / (T - 2) > 0.5, (
        "the page says the head mostly looks at the current character and the one or two before")


def reading_text(r: dict, metrics: dict, ref: dict, log: list[dict], bigram: dict,
                 V: int) -> tuple[str, str]:
    """The paragraphs that read the loss curve and the attention figure, with their numbers."""
    first, last = log[0], log[-1]
    by = r["by_distance"]
    order = sorted(by, key=by.get, reverse=True)
    counts = {d: r["top"].count(d) for d in sorted(set(r["top"]))}
    T = r["T"]
    far = [i for i in range(T) if r["top"][i] >= 3]
    loss = (
        f"At step 0 the loss is {first['train']:.4f} (train) and {first['val']:.4f} (val), "
        f"next to $\\ln V = \\ln {V} = {math.log(V):.4f}$: the first guesses are close to uniform. "
        f"After {metrics['steps']:,} steps the validation loss is {ref['val_loss']:.4f}; the "
        f"bigram of stage 2 ended at {bigram['val_loss']:.4f} after its {bigram['steps']:,} steps. "
        f"The attention model ends {bigram['val_loss'] - ref['val_loss']:.4f} lower: a prediction "
        f"can now draw on more than the last character. Its defaults also train longer "
        f"({metrics['steps']:,} steps against {bigram['steps']:,}); "
        "[Comparing the stages](compare.md) sets the stages side by side at one budget.")
    assert last["step"] == metrics["steps"]
    # What the page's own sentences say about these numbers; stop if training changed them.
    assert abs(first["val"] - math.log(V)) < 0.05, "the page says the first loss is near ln V"
    assert ref["val_loss"] < bigram["val_loss"], "the page says stage 3 ends below the bigram"
    check_head(r)
    head = (
        f"The figure's prompt, `{r['prompt']}`, has {T} characters. Averaged over the rows that have it, the "
        f"weight a row gives to the character $d$ places back is: "
        + ", ".join(f"{by[d]:.2f} at $d = {d}$" for d in range(min(T, 6)))
        + f". The largest is at $d = {order[0]}$, then $d = {order[1]}$. "
        f"Row by row, the single heaviest weight sits "
        + ", ".join(f"{n} time{'s' if n != 1 else ''} at $d = {d}$" for d, n in counts.items())
        + f" (of {T} rows). The last three characters ($d \\le 2$) get "
        f"{sum(r['near3'][2:]) / (T - 2):.2f} of a row's weight on average (rows 2 onward).")
    if far:
        head += (f" Rows {', '.join(str(i) for i in far)} put their heaviest weight three or "
                 "more characters back.")
    head += (f" The most spread-out row is row {r['flat']} (after "
             f"`{r['flat_char']}`), whose largest weight is only {r['flat_max']:.2f}.")
    return loss, head


def reading_text_zh(r: dict, metrics: dict, log: list[dict], bigram: dict,
                    V: int, C: int) -> tuple[str, str]:
    """The same readings for the Chinese edition, of the Chinese model (``--data zh``): its
    loss curve next to the Chinese bigram's, and its head on a line of Chinese text."""
    from stage3_attention.plots import token_label

    first, last = log[0], log[-1]
    assert last["step"] == metrics["steps"]
    assert abs(first["val"] - math.log(V)) < 0.05, "the page says the first loss is near ln V"
    check_head(r)
    best, at, end = metrics["best_val_loss"], metrics["best_val_step"], metrics["val_loss"]
    loss = (f"第 0 步的损失是 {first['train']:.4f}（训练集）和 {first['val']:.4f}（验证集），"
            f"与 $\\ln V = \\ln {V} = {math.log(V):.4f}$ 几乎相同：模型起初的猜测接近均匀分布。")
    if end - best > 0.02:  # the validation loss turns back up: say so
        loss += (f"中文语料很小，曲线和英文的不一样：验证损失在第 {at:,} 步降到最低的 {best:.4f}，"
                 f"此后训练损失继续下降（第 {metrics['steps']:,} 步时为 {metrics['train_loss']:.4f}），"
                 f"验证损失却回升到 {end:.4f}。模型开始记住训练文本本身，而不是学到对新文本也成立的"
                 "规律，这就是过拟合（overfitting）。")
    else:
        loss += f"{metrics['steps']:,} 步之后，验证损失为 {end:.4f}。"
    loss += (f"第二步的二元模型在同一份中文语料上训练 {bigram['steps']:,} 步，验证损失最低为 "
             f"{bigram['best_val_loss']:.4f}（第 {bigram['best_val_step']:,} 步），"
             f"最后为 {bigram['val_loss']:.4f}。")
    gap = best - bigram["best_val_loss"]
    if gap < 0:
        loss += (f"注意力模型的最低验证损失比它低 {-gap:.4f}：预测终于能用上不止最后一个字符。")
    else:
        loss += (f"注意力模型的最低验证损失反而比它高 {gap:.4f}：在这么小的语料上，能看到更多的字符"
                 "并没有换来更低的验证损失。两者的结构也不一样：二元模型给每个字符单独存一整行 "
                 f"{V} 个 logits（共 {bigram['params']:,} 个参数），注意力模型则要从 "
                 f"{C} 个数的向量算出这 {V} 个 logits（共 {metrics['params']:,} 个参数）。")
    loss += "[各阶段对比](compare.md) 在同样的训练预算下把各阶段放在一起比较。"

    by, T = r["by_distance"], r["T"]
    order = sorted(by, key=by.get, reverse=True)
    counts = {d: r["top"].count(d) for d in sorted(set(r["top"]))}
    far = [i for i in range(T) if r["top"][i] >= 3]
    shown = "".join(token_label(c) for c in r["prompt"])
    head = (f"图中的提示是 `{shown}`" + ("（⏎ 表示换行）" if "\n" in r["prompt"] else "")
            + f"，共 {T} 个字符。一行分给往前数第 $d$ 个字符（$d = 0$ 就是当前字符）的权重，"
            "在有这个字符的各行上平均为："
            + "，".join(f"{by[d]:.2f}（$d = {d}$）" for d in range(min(T, 6)))
            + f"。最大的在 $d = {order[0]}$，其次是 $d = {order[1]}$。逐行看，每行最重的那个权重有 "
            + "，".join(f"{n} 行落在 $d = {d}$" for d, n in counts.items())
            + f"（共 {T} 行）。最近的三个字符（$d \\le 2$）平均拿走一行权重的 "
            f"{sum(r['near3'][2:]) / (T - 2):.2f}（从第 2 行算起）。")
    if far:
        head += f"第 {'、'.join(str(i) for i in far)} 行把最重的权重放在三个或更多字符之前。"
    head += (f"最分散的是第 {r['flat']} 行（`{r['flat_char']}` 之后），它最大的权重只有 "
             f"{r['flat_max']:.2f}。")
    return loss, head


def jobs(Job, gen_docs) -> list:
    buildup_out = ("stage3_buildup_loop.txt", "stage3_buildup_matmul.txt",
                   "stage3_buildup_softmax.txt", "stage3_buildup_attention.txt",
                   "stage3_buildup_agree.txt",
                   *(f"{stem}{tag(lang)}.{ext}" for lang in LANGS for stem, ext in (
                       ("img/stage3_buildup_weights", "png"), ("img/stage3_causal_mask", "png"),
                       ("img/stage3_sinusoidal", "png"), ("stage3_sinusoidal", "md"),
                       ("stage3_shapes", "md"), ("stage3_params", "md"))))
    return [
        Job("stage3_buildup", "stage 3's page: average the past four ways, the causal mask, "
            "the sinusoidal table, the shape tables (no training)", buildup_job(gen_docs),
            stages=("stage3_attention",), files=(HERE,), code=("write",), outputs=buildup_out,
            seconds=10),
        Job("stage3_trained_head", "stage 3's page: what its loss curve and trained head show, "
            "in numbers (trains stage 3 at its defaults again)", trained_head_job(gen_docs),
            stages=("stage2_bigram", "stage3_attention"),
            files=(HERE, *(f"docs/generated/{t}" for t in ZH_RUNS.values())),
            code=("run", "write", "load_run", "stale_jobs", "input_hashes", "read_manifest"),
            needs=("stage2_en", "stage3_en"),
            outputs=tuple(f"{name}{tag(lang)}.md" for lang in LANGS
                          for name in ("stage3_trained_loss", "stage3_trained_head")),
            seconds=90),
    ]
