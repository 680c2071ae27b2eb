"""Stage 3 page: from averaging the past to one head of attention, the causal mask,
positions, the shapes of one forward pass, and what the trained head looks at."""

from __future__ import annotations

import math

from .. import Draw, Job, Page, Run, table
from ..verse import verse_form
from . import ZH_LABELS, classic, train
from .stage2 import training

CORPORA = ("en", "zh", "shakespeare", "tang")
RUNS = {d: classic("stage3_attention", d) for d in CORPORA}  # the defaults on every corpus
BIGRAM = {d: classic("stage2_bigram", d) for d in CORPORA}  # stage 2's, to compare with
NAMES = {"en": ("English (built-in)", "英文（内置）"), "zh": ("Chinese (built-in)", "中文（内置）"),
         "shakespeare": ("Tiny Shakespeare", "Tiny Shakespeare"), "tang": ("Tang poems", "唐诗")}
POS = {p: train("stage3_attention", "en", "--pos", p) for p in ("sinusoidal", "none")}
BUILDUP = Run("stage3_attention", module="buildup")
FORMS = {"en": ("1. loop", "2. tril matrix product", "3. masked softmax", "4. self-attention (q · k)"),
         "zh": ("1. 循环", "2. tril 矩阵乘法", "3. 带掩码的 softmax", "4. 自注意力（q · k）")}
WORDS = {  # the other words of this page's figures
    "en": {"weight_of": "weight of position j in row i", "weight": "weight",
           "weights": "Row i: how much position i takes from position j.\n"
                      "The same averages three ways, then weights from the data",
           "allowed": "allowed", "blocked": "blocked", "mask": "mask: j ≤ i allowed",
           "scores": "scores q·k/√hs", "masked": "scores after masking",
           "softmax": "weights: softmax per row",
           "mask_title": "The causal mask: scores above the diagonal become −∞,\n"
                         "so their weight after the softmax is exactly 0",
           "column": "column c of the vector (even: sin, odd: cos)", "position": "position p",
           "pe": "PE[p, c], block_size={T}, n_embd={C}", "curves": "a few columns against p"},
    "zh": {"weight_of": "第 i 行中位置 j 的权重", "weight": "权重",
           "weights": "第 i 行：位置 i 从位置 j 取多少。\n前三种写法算出同样的平均，第四种的权重来自数据",
           "allowed": "允许", "blocked": "屏蔽", "mask": "掩码：允许 j ≤ i",
           "scores": "分数 q·k/√hs", "masked": "掩码之后的分数", "softmax": "权重：逐行 softmax",
           "mask_title": "因果掩码：对角线以上的分数变成 −∞，\n所以经过 softmax 后它们的权重恰好为 0",
           "column": "向量的第 c 列（偶数列 sin，奇数列 cos）", "position": "位置 p",
           "pe": "PE[p, c]，block_size={T}，n_embd={C}", "curves": "几列随位置 p 的变化"},
}


def heat(ax, m, title: str, vmin=0.0, vmax=1.0, cmap="viridis", text=None):
    """One annotated T x T heat map; -inf shows grey, as "−∞"."""
    import numpy as np

    data = np.array(m, dtype=float)
    im = ax.imshow(np.ma.masked_invalid(np.where(np.isinf(data), np.nan, data)), cmap=cmap,
                   vmin=vmin, vmax=vmax)
    im.cmap.set_bad("#d0d0d0")
    T = data.shape[0]
    for i in range(T):
        for j in range(T):
            v = data[i, j]
            label = text[i][j] if text else ("−∞" if np.isinf(v) else f"{v:.2f}")
            r, g, b, _ = im.cmap(im.norm(v)) if not text and not np.isinf(v) else (1, 1, 1, 1)
            dark = 0.299 * r + 0.587 * g + 0.114 * b < 0.5  # the cell's brightness
            ax.text(j, i, label, ha="center", va="center", fontsize=9,
                    color="white" if dark else "black")
    ax.set_xticks(range(T), [f"j={j}" for j in range(T)], fontsize=8)
    ax.set_yticks(range(T), [f"i={i}" for i in range(T)], fontsize=8)
    ax.tick_params(length=0)
    ax.set_title(title, fontsize=10)
    return im


def buildup_figures(page: Page, lang: str) -> None:
    """The weights of the four steps, and the causal mask step by step."""
    import torch

    from stage3_attention import buildup
    from stage3_attention.plots import plt

    w, T = WORDS[lang], buildup.T_EXAMPLE
    ex = buildup.example()
    mats = [buildup.weights_of(f, T) for f in (buildup.average_loop, buildup.average_matmul,
                                                  buildup.average_softmax)] + [ex["wei"][0]]
    # 6.4 inches wide, as the stages' figures (plots.WIDTH), with text that stays readable
    # where the figure is smallest, 600 px wide on a phone (1 pt = 1.3 px there): numbers at
    # 11 pt, tick labels at 10 pt, on the outer panels only. No colour bar: every cell
    # carries its number.
    fig, axes = plt.subplots(2, 2, figsize=(6.4, 6.9), dpi=160, sharex=True, sharey=True,
                             constrained_layout=True)
    for ax, title, m in zip(axes.flat, FORMS[lang], mats, strict=True):
        heat(ax, m, title)
        for number in ax.texts:
            number.set_fontsize(11)
        ax.tick_params(labelsize=10)
        ax.set_title(title, fontsize=12)
        ax.label_outer()
    fig.suptitle(w["weights"], fontsize=12)
    fig.savefig(page.dir / f"buildup_weights{'' if lang == 'en' else '_zh'}.png")
    plt.close(fig)

    x, (W_q, W_k, _) = ex["x"], ex["W"]
    scores = ((x @ W_q) @ (x @ W_k).transpose(-2, -1) / math.sqrt(x.shape[-1]))[0]
    tril = torch.ones(T, T).tril()
    lim = float(scores.abs().max())
    fig, axes = plt.subplots(2, 2, figsize=(8, 7.6), dpi=120, constrained_layout=True)
    a = axes.flat
    heat(a[0], tril, w["mask"], cmap="Greens", vmin=-0.3, vmax=1.3,
         text=[[w["allowed"] if tril[i, j] else w["blocked"] for j in range(T)] for i in range(T)])
    heat(a[1], scores, w["scores"], -lim, lim, "coolwarm")
    heat(a[2], scores.masked_fill(tril == 0, float("-inf")), w["masked"], -lim, lim, "coolwarm")
    im = heat(a[3], ex["wei"][0], w["softmax"])
    fig.colorbar(im, ax=a[3], shrink=0.8, label=w["weight"])
    fig.suptitle(w["mask_title"])
    fig.savefig(page.dir / f"causal_mask{'' if lang == 'en' else '_zh'}.png")
    plt.close(fig)


def sinusoidal(page: Page) -> None:
    """The fixed table of --pos sinusoidal at the defaults: a figure and its numbers."""
    import torch

    from stage3_attention.model import ModelConfig, sinusoidal_positions
    from stage3_attention.plots import plt

    cfg = ModelConfig(vocab_size=1)
    T, C = cfg.block_size, cfg.n_embd
    pe = sinusoidal_positions(T, C)
    for lang in ("en", "zh"):
        w = WORDS[lang]
        fig, (a, b) = plt.subplots(2, 1, figsize=(7.5, 9), dpi=120, constrained_layout=True)
        im = a.imshow(pe.numpy(), cmap="RdBu_r", vmin=-1, vmax=1, aspect="auto")
        a.set(xlabel=w["column"], ylabel=w["position"], title=w["pe"].format(T=T, C=C))
        fig.colorbar(im, ax=a, shrink=0.9)
        for col in (0, 1, 8, 9, 24, 25):
            b.plot(range(T), pe[:, col], marker="o", markersize=2.5, label=f"c = {col}")
        b.set(xlabel=w["position"], ylabel="PE[p, c]", title=w["curves"])
        b.grid(alpha=0.3)
        b.legend(fontsize=8, ncols=6, loc="lower center", bbox_to_anchor=(0.5, 1.06))  # above the curves
        fig.savefig(page.dir / f"sinusoidal{'' if lang == 'en' else '_zh'}.png")
        plt.close(fig)
    unit = pe / pe.norm(dim=1, keepdim=True)
    sim = unit @ unit.T
    slow = pe[:, C // 2:] / pe[:, C // 2:].norm(dim=1, keepdim=True)
    for d in (1, 2, 4, 8, 16, T - 1):
        page.fact(f"pe.sim_{d}", sim.diagonal(d).mean().item())
    page.fact("pe.slow_far", (slow @ slow.T).diagonal(T - 1).mean().item())
    for col in (0, 8, 24, C - 2):
        page.fact(f"pe.wavelength_{col}", 2 * math.pi * 10000 ** (col / C))
    page.fact("pe.last_first", pe[0, C - 1].item())
    page.fact("pe.last_last", pe[T - 1, C - 1].item())
    assert torch.allclose(pe[:, 0], torch.sin(torch.arange(T).float()))


def shapes(page: Page) -> None:
    """Every tensor of one forward pass at the defaults, read off the real model, and the
    parameter count by part, checked against its formula."""
    import torch

    from stage3_attention.model import LanguageModel, ModelConfig
    from stage3_attention.tokenizer import CharTokenizer

    V = len(CharTokenizer.load(page.folder(RUNS["en"]) / "vocab.json").chars)  # the run's
    cfg = ModelConfig(vocab_size=V)
    torch.manual_seed(1337)
    model, (B, T), seen = LanguageModel(cfg), (4, 8), {}
    head = model.sa_head
    for name in ("query", "key", "value"):
        getattr(head, name).register_forward_hook(
            lambda m, i, o, name=name: seen.__setitem__(name, tuple(o.shape)))
    idx = torch.randint(0, cfg.vocab_size, (B, T))
    logits, loss = model(idx, idx)
    V, C = cfg.vocab_size, cfg.n_embd
    rows = [("`idx`", "$(B, T)$", tuple(idx.shape)), ("`q`, `k`, `v`", "$(B, T, C)$", seen["query"]),
            ("`wei`", "$(B, T, T)$", tuple(head.last_attention.shape)),
            ("`logits`", "$(B, T, V)$", tuple(logits.shape))]
    assert rows[1][2] == (B, T, C) and rows[3][2] == (B, T, V)
    page.both("shapes", table({"en": ["tensor", "shape", "here"], "zh": ["张量", "形状", "本例"]},
                              [(t, s, f"`{here}`") for t, s, here in rows]))
    counts = {n: p.numel() for n, p in model.named_parameters()}
    Tm = cfg.block_size
    parts = [("token_embedding_table", "$V C$", V * C), ("position_embedding_table", "$T_{\\max} C$", Tm * C),
             ("sa_head", "$3 C^2$", 3 * C * C), ("lm_head", "$C V + V$", C * V + V)]
    for name, _, n in parts:
        assert sum(c for k, c in counts.items() if k.startswith(name)) == n, name
    page.both("params", table({"en": ["part", "formula", "count"], "zh": ["部分", "公式", "个数"]},
                              [(f"`{n}`", f, f"{c:,}") for n, f, c in parts], right={2}))
    page.fact("params", sum(counts.values()))


def trained_head(page: Page, data: str) -> None:
    """What the trained head looks at on the default prompt: weight by distance."""
    import torch

    from stage3_attention.checkpoint import load_model
    from stage3_attention.prompts import default_prompt
    from stage3_attention.visualize import LABELS, attention_figure

    model, tok, ckpt = load_model(page.folder(RUNS[data]) / "best.pt")
    from stage3_attention.data import load_text

    prompt = default_prompt(load_text(data), min(model.config.block_size, 24))
    maps = model.attention_maps(torch.tensor([tok.encode(prompt)]))[0, 0, 0]  # (T, T)
    for tag, labels in (("", LABELS), ("_zh", ZH_LABELS)):
        attention_figure(model, tok, prompt, page.dir / f"attention_{data}{tag}.png", labels)
    rows = maps[3:]  # the rows from 3 on, where each distance 0 .. 3 exists: one set of rows
    at = [rows.diagonal(3 - d).mean().item() for d in range(4)]  # row i, column i - d
    page.fact(f"{data}.head.prompt", prompt)
    for d, weight in enumerate(at):
        page.fact(f"{data}.head.at_{d}", weight)
    page.fact(f"{data}.head.near3", sum(at[:3]))  # the current character and the two before


def score_scale(page: Page, data: str) -> None:
    """Why divide by sqrt(d_k), measured on stage 3's own head: the variance of the entries
    of q and k and of the scores q . k (raw and divided by sqrt(d_k)) on 64 windows of the
    training text, for the untrained model (seed 1337, as train.py builds it) and the
    trained one."""
    import torch

    from stage3_attention.checkpoint import load_model
    from stage3_attention.data import Corpus, get_batch
    from stage3_attention.model import LanguageModel

    trained, tok, ckpt = load_model(page.folder(RUNS[data]) / "best.pt")
    torch.manual_seed(1337)
    fresh = LanguageModel(trained.config).eval()
    corpus = Corpus.load(data, ckpt["args"]["val_fraction"], tok)
    T = trained.config.block_size
    x, _ = get_batch(corpus.train, 64, T, torch.Generator().manual_seed(0))
    mask = torch.ones(T, T, dtype=torch.bool).tril()  # the scores a row actually weighs
    average = mask / mask.sum(-1, keepdim=True)  # step 3's weights: 1 / (i + 1) left of i
    for name, model in (("init", fresh), ("trained", trained)):
        with torch.no_grad():
            h = model.token_embedding_table(x) + model.positions(T, x.device)
            q, k = model.sa_head.query(h), model.sa_head.key(h)  # (B, T, d_k)
            scores = q @ k.transpose(-2, -1)  # (B, T, T), not yet divided by sqrt(d_k)
            raw = scores[:, mask]  # (B, T (T + 1) / 2)
        d_k = q.shape[-1]
        for key, value in (("var_q", q.var()), ("var_k", k.var()), ("var_raw", raw.var()),
                           ("var_scaled", (raw / math.sqrt(d_k)).var())):
            page.fact(f"{data}.scale.{name}.{key}", value.item())
        for key, given in (("scaled", scores / math.sqrt(d_k)), ("unscaled", scores)):
            weights = given.masked_fill(~mask, float("-inf")).softmax(-1)  # (B, T, T)
            # how far from the plain average, and the largest weight of a row (rows 1 on:
            # row 0 has one position only), averaged over the rows
            page.fact(f"{data}.scale.{name}.{key}.off_average", (weights - average).abs().max().item())
            page.fact(f"{data}.scale.{name}.{key}.top_weight", weights[:, 1:].amax(-1).mean().item())
    page.fact(f"{data}.scale.d_k", d_k)


QK_PROMPT = {"en": "Pip the", "zh": "小狐狸皮皮"}  # short: its T x T scores fit the page


def scores_on_a_prompt(page: Page, data: str) -> None:
    """One head on real characters: q . k / sqrt(d_k) and the weights, as printed matrices."""
    import torch

    from stage3_attention.checkpoint import load_model
    from stage3_attention.plots import token_label

    model, tok, _ = load_model(page.folder(RUNS[data]) / "best.pt")
    prompt = QK_PROMPT[data]
    head = model.sa_head
    with torch.no_grad():
        x = model.token_embedding_table(torch.tensor([tok.encode(prompt)]))
        x = x + model.positions(len(prompt), x.device)
        q, k = head.query(x)[0], head.key(x)[0]
        scores = q @ k.T / math.sqrt(k.shape[-1])
        weights = model.attention_maps(torch.tensor([tok.encode(prompt)]))[0, 0, 0]
    labels = [token_label(c) for c in prompt]
    T = len(prompt)

    def matrix(m, masked: bool) -> str:
        rows = ["      " + "".join(f"{c:>7}" for c in labels)]
        for i in range(T):
            cells = ["      ·" if masked and j > i else f"{m[i, j].item():7.2f}" for j in range(T)]
            rows.append(f"{labels[i]:>5} " + "".join(cells))
        return "\n".join(rows)
    page.write(f"qk_{data}.txt", f"q · k / √d_k, row i (query) against column j (key):\n"
               f"{matrix(scores, False)}\n\nweights = softmax of row i over j ≤ i:\n"
               f"{matrix(weights, True)}")
    last = weights[-1, :].tolist()
    page.fact(f"{data}.qk.prompt", prompt)
    page.fact(f"{data}.qk.last_top", labels[max(range(T), key=last.__getitem__)])
    page.fact(f"{data}.qk.last_top_weight", max(last))
    page.fact(f"{data}.qk.last_top_pos", max(range(T), key=last.__getitem__))
    page.fact(f"{data}.qk.last_pos", T - 1)


def context_curve(page: Page, data: str) -> None:
    """How much it helps to see further back: the mean loss on held-out text of the
    trained model given only the last k characters, k = 1 .. block_size, and one prompt where
    the far part of the window changes the prediction most."""
    import torch
    from torch.nn import functional as F

    from stage3_attention.checkpoint import load_model
    from stage3_attention.data import Corpus
    from stage3_attention.plots import plt, token_label

    model, tok, _ = load_model(page.folder(RUNS[data]) / "best.pt")
    T = model.config.block_size
    val = Corpus.load(data, tokenizer=tok).val.long()
    starts = torch.arange(0, min(len(val) - T - 1, 4000 * 8), 8)  # 4,000 windows
    x = torch.stack([val[s : s + T] for s in starts])
    y = torch.stack([val[s + T] for s in starts])
    losses, probs = {}, {}
    with torch.no_grad():
        for kk in (1, 2, 4, 8, 16, T):
            logits = model(x[:, -kk:])[0][:, -1]  # the prediction after the last character
            losses[kk] = F.cross_entropy(logits, y).item()
            probs[kk] = logits.softmax(-1).gather(1, y[:, None])[:, 0]
    gain = probs[T] - probs[8]  # what the characters beyond the last 8 add
    best = int(gain.argmax())
    window = tok.decode(x[best].tolist())
    page.fact(f"{data}.context.window", "".join(token_label(c) for c in window))
    page.fact(f"{data}.context.next", token_label(tok.itos[int(y[best])]))
    page.fact(f"{data}.context.p_last8", probs[8][best].item())
    page.fact(f"{data}.context.p_all", probs[T][best].item())
    for kk, value in losses.items():
        page.fact(f"{data}.context.loss_{kk}", value)
    for lang, (xl, yl) in {"en": ("characters the model sees (k)", "mean loss, held-out text"),
                           "zh": ("模型看到的字符数 k", "平均损失（验证文本）")}.items():
        fig, ax = plt.subplots(figsize=(6, 3.6), dpi=120, constrained_layout=True)
        ax.plot(list(losses), list(losses.values()), marker="o")
        ax.set(xscale="log", xlabel=xl, ylabel=yl)
        ax.set_xticks(list(losses), [str(k) for k in losses])
        ax.grid(alpha=0.3)
        fig.savefig(page.dir / f"context_{data}{'' if lang == 'en' else '_zh'}.png")
        plt.close(fig)


def worked(page: Page) -> None:
    """The 3 x 3 example of the page, computed, as TeX: Q, K, V, the scores, the mask, the
    weights and the output."""
    import torch

    q = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    k = torch.tensor([[1.0, 0.0], [1.0, 1.0], [0.0, 2.0]])
    v = torch.tensor([[1.0, 0.0], [0.0, 1.0], [2.0, 2.0]])
    scaled = q @ k.T / math.sqrt(2)
    mask = torch.zeros(3, 3).masked_fill(torch.ones(3, 3).tril() == 0, float("-inf"))
    weights = torch.softmax(scaled + mask, dim=-1)

    def tex(m: torch.Tensor) -> str:
        rows = [" & ".join(r"-\infty" if math.isinf(x) else f"{x:.2f}".rstrip("0").rstrip(".")
                           for x in row.tolist()) for row in m]
        return r"\begin{bmatrix}" + r" \\ ".join(rows) + r"\end{bmatrix}"

    for name, m in {"Q": q, "K": k, "V": v, "QK": q @ k.T, "scaled": scaled, "M": mask,
                    "weights": weights, "out": weights @ v, "out2": (weights @ v)[2:]}.items():
        page.fact(f"worked.{name}", tex(m))
    page.fact("worked.terms", " + ".join(f"{weights[2, j]:.2f}" + r"\," + tex(v[j:j + 1])
                                         for j in range(3)))


def runs_table(page: Page) -> None:
    """The four corpora in one table, beside the bigram of stage 2: the best validation loss
    and its perplexity exp(loss), the number of characters the model is as unsure between
    as if it chose uniformly among them."""
    rows = []
    for data, run in RUNS.items():
        m, bigram = page.stored(run).metrics, page.stored(BIGRAM[data]).metrics
        for name, loss in ((data, m["best_val_loss"]), (f"bigram.{data}", bigram["best_val_loss"])):
            page.fact(f"{name}.best_val_ppl", math.exp(loss))
        was = f"{bigram['best_val_loss']:.3f} ({math.exp(bigram['best_val_loss']):,.1f})"
        flags = BIGRAM[data].flags  # the Tang poems' bigram is trained for 300 steps only
        steps = flags[flags.index("--max-iters") + 1] if "--max-iters" in flags else None
        rows.append((NAMES[data], f"{m['params']:,}",
                     f"{m['best_val_loss']:.3f} ({math.exp(m['best_val_loss']):,.1f})",
                     f"{m['best_val_step']:,}",
                     (f"{was}, {steps} steps", f"{was}，仅 {steps} 步") if steps else was,
                     f"{m['val_loss'] - m['train_loss']:.3f}", f"{m['train_seconds']:,.0f}"))
    page.both("runs", table(
        {"en": ["corpus", "parameters", "best val loss (perplexity)", "at step",
                "bigram's best (perplexity)", "val − train at the end", "seconds"],
         "zh": ["语料", "参数量", "最低验证损失（困惑度）", "在第几步", "二元模型的最低值（困惑度）",
                "结束时验证减训练", "秒"]}, rows, right={1, 2, 3, 4, 5, 6}))


def verse(page: Page) -> None:
    """What the Tang poems' run learned of the form: the marks in its samples before and
    after training, and the clauses after it (counted as on every page: verse.py)."""
    out = page.stored(RUNS["tang"]).stdout
    before = out.split("sample before training:\n")[1].split("\nstep ")[0]
    after = verse_form(out.split("sample after training:\n")[1].split("\ncheckpoint:")[0])
    page.fact("tang.sample.marks_before", verse_form(before)["marks"])
    page.fact("tang.sample.marks_after", after["marks"])
    for key in ("clauses", "mean_clause", "five_or_seven", "five_to_seven"):
        page.fact(f"tang.sample.{key}", after[key])


def write(page: Page) -> None:
    training(page, "stage3_attention", RUNS)
    runs_table(page)
    verse(page)
    for data in ("en", "zh"):
        page.draw(trained_head, data)
        page.draw(scores_on_a_prompt, data)
        page.draw(context_curve, data)
    k = [int(name.rsplit("_", 1)[1]) for name in page.facts if name.startswith("en.context.loss_")]
    page.both("context", table(  # the two curves' numbers, the bigram's best below them
        {"en": ["characters seen (k)", "English (built-in)", "Chinese (built-in)"],
         "zh": ["看到的字符数 k", "英文（内置）", "中文（内置）"]},
        [(str(n), *(page.facts[f"{d}.context.loss_{n}"] for d in ("en", "zh"))) for n in sorted(k)]
        + [(("stage 2's bigram, best", "第二步的二元模型，最低值"),
            *(page.stored(BIGRAM[d]).metrics["best_val_loss"] for d in ("en", "zh")))],
        right={1, 2}))
    page.draw(score_scale, "en")
    out = page.stored(BUILDUP).stdout
    for i, part in enumerate(out.split("== ")[1:], start=1):
        page.write(f"buildup_{i}.txt", part.split("\n", 1)[1].strip("\n"))
    for lang in ("en", "zh"):
        buildup_figures(page, lang)
    sinusoidal(page)
    page.draw(shapes)
    worked(page)
    rows = [("learned", page.stored(RUNS["en"]))] + [(p, page.stored(r)) for p, r in POS.items()]
    page.both("positions", table(
        {"en": ["flags", "parameters", "train loss", "val loss", "val perplexity"],
         "zh": ["命令行参数", "参数量", "训练损失", "验证损失", "验证困惑度"]},
        [(f"`--pos {p}`", f"{s.metrics['params']:,}", s.metrics["train_loss"],
          s.metrics["val_loss"], f"{math.exp(s.metrics['val_loss']):.2f}") for p, s in rows],
        right={1, 2, 3, 4}))
    for p, s in rows:
        page.fact(f"pos_{p}.val_loss", s.metrics["val_loss"])
        page.fact(f"pos_{p}.val_ppl", math.exp(s.metrics["val_loss"]))


JOBS = [Job("stage3", write, runs=(*RUNS.values(), *POS.values(), BUILDUP, *BIGRAM.values()),
            draws=(*(Draw(f, d, reads=RUNS[d]) for d in ("en", "zh")
                     for f in (trained_head, scores_on_a_prompt, context_curve)),
                   Draw(shapes, reads=RUNS["en"]), Draw(score_scale, "en", reads=RUNS["en"])),
            timed=tuple(RUNS.values()),
            files=("stage3_attention",))]
