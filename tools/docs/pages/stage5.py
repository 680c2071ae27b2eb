"""Stage 5 page: the GPT trained on both built-in corpora and, with its presets, on the
classic ones; what it learned (attention, position embeddings, the logit lens), one head's
computation, a sample, and the learning-rate schedule."""

from __future__ import annotations

from collections import Counter

from .. import Draw, Job, Page, Run, table
from . import CLASSIC, ZH_LABELS, classic, preset, train
from .stage2 import numbers, training

STAGE = "stage5_gpt"
RUNS = {d: train(STAGE, d) for d in ("en", "zh")}
CLASSIC_RUNS = {d: classic(STAGE, d) for d in CLASSIC}  # the defaults on the classic corpora
PRESETS = {name: preset(name) for name in ("shakespeare-2min", "tang-2min", "nanogpt-cpu")}
PROMPTS = {"en": ("TEACHER:", "Pip the"), "zh": ("老师：", "小狐狸")}  # sample, inspect
SAMPLES = {d: Run(STAGE, "--prompt", p[0], "--tokens", "300", "--temperature", "0.8",
                  module="sample", after=RUNS[d]) for d, p in PROMPTS.items()}
SAMPLES.update({name: Run(STAGE, "--prompt", p, "--tokens", "300", "--temperature", "0.8",
                          module="sample", after=PRESETS[name])
                for name, p in (("shakespeare-2min", "ROMEO:"), ("tang-2min", "春"))})
INSPECT = {d: Run(STAGE, "--prompt", p[1], module="inspect", after=RUNS[d])
           for d, p in PROMPTS.items()}
TIED = train(STAGE, "zh", "--tie-weights")  # exercise 3's run
LENS_ZH = {"i": "位置 i", "j": "位置 j", "cos": "cos(wpe[i], wpe[j])；颜色截在 ±{lim:.2f}",
           "cosine": "余弦相似度", "distance": "距离 |i - j|", "mean": "平均余弦相似度",
           "by_distance": "按距离平均的相似度", "positions": "学到的位置嵌入（block_size={T}）",
           "x0": "x₀ 嵌入", "after": "x{n} 第 {layer} 层之后", "output": "（输出）",
           "input": "输入的字符", "next": "实际的下一个字符", "p": "p(实际的下一个字符)",
           "lens": "预测如何一层层变得清楚\n（格中：最可能的猜测，猜对为粗体）"}


def figures(page: Page, data: str) -> None:
    """Attention (every layer), position similarity and the logit lens, in both languages,
    with the numbers the page reads off them."""
    from stage5_gpt import lens
    from stage5_gpt.checkpoint import load_model
    from stage5_gpt.data import load_text
    from stage5_gpt.plots import token_label
    from stage5_gpt.prompts import default_prompt
    from stage5_gpt.visualize import LABELS, attention_figure, attention_layer_figures

    model, tok, _ = load_model(page.folder(RUNS[data]) / "best.pt")
    prompt = default_prompt(load_text(data), min(model.config.block_size, 24))
    page.fact(f"{data}.prompt", prompt)
    for tag, labels, lens_labels in (("", LABELS, lens.LABELS), ("_zh", ZH_LABELS, LENS_ZH)):
        attention_figure(model, tok, prompt, page.dir / f"attention_{data}{tag}.png", labels)
        for path in attention_layer_figures(model, tok, prompt, page.dir / "tmp", labels):
            path.rename(page.dir / f"{data}_{path.stem}{tag}.png")
        lens.position_similarity_figure(model, page.dir / f"positions_{data}{tag}.png", lens_labels)
        lens.layer_predictions_figure(model, tok, prompt, page.dir / f"lens_{data}{tag}.png",
                                      lens_labels)
    (page.dir / "tmp").rmdir()
    near = lens.similarity_by_distance(lens.position_similarity(model))
    for d in range(1, 9):
        page.fact(f"{data}.position_sim_{d}", near[d - 1])
    page.fact(f"{data}.position_peak", 1 + max(range(len(near)), key=near.__getitem__))
    page.fact(f"{data}.position_negative", sum(v < 0 for v in near))
    right = lens.logit_lens(model, tok, prompt)["right"]
    page.fact(f"{data}.lens_right", right.sum(dim=1).tolist())
    page.fact(f"{data}.lens_of", len(prompt) - 1)
    page.fact(f"{data}.lens_wrong", " ".join(
        f"`{token_label(prompt[c])}→{token_label(prompt[c + 1])}`"
        for c in range(len(prompt) - 1) if not right[-1, c]))
    page.fact(f"{data}.attention_layers", model.config.n_layer)


def embeddings(page: Page, data: str, chars: int = 60) -> None:
    """The token embeddings wte, projected on their two main directions (PCA), with the
    nearest neighbours of a few characters: what the model made of each character."""
    import torch

    from stage5_gpt.checkpoint import load_model
    from stage5_gpt.data import load_text
    from stage5_gpt.plots import plt, token_label, use_cjk_font

    model, tok, _ = load_model(page.folder(RUNS[data]) / "best.pt")
    wte = model.transformer.wte.weight.detach()
    common = [c for c, _ in Counter(load_text(data)).most_common(chars)]  # of the corpus
    ids = torch.tensor([tok.stoi[c] for c in common])
    w = wte[ids] - wte[ids].mean(0)
    xy = w @ torch.linalg.svd(w, full_matrices=False).Vh[:2].T  # (chars, 2)
    use_cjk_font()
    spots = places(xy)
    for lang, title in (("en", "token embeddings, first two principal directions"),
                        ("zh", "词元嵌入在前两个主方向上的投影")):
        fig, ax = plt.subplots(figsize=(6.4, 5.2), dpi=130, constrained_layout=True)
        for (x, y), (lx, ly), c in zip(xy.tolist(), spots, common, strict=True):
            box = None if c.isalnum() else {"boxstyle": "round,pad=0.15", "lw": 0.5,
                                            "fc": "#fff8e1", "ec": "#ffb300"}
            moved = (lx, ly) != (x, y)  # then a dot where the character is, a line to it
            ax.annotate(token_label(c), (x, y), (lx, ly), fontsize=10, ha="center",
                        va="center", bbox=box, arrowprops=None if not moved else
                        {"arrowstyle": "-", "color": "#7986cb", "lw": 0.6, "shrinkA": 6,
                         "shrinkB": 0})
            if moved:
                ax.plot(x, y, "o", color="#7986cb", markersize=2.5)
        ax.update_datalim([*xy.tolist(), *spots])  # texts alone do not widen the axes
        ax.autoscale_view()
        ax.margins(0.04)
        ax.set_title(title, fontsize=11)
        ax.set_xticks([])
        ax.set_yticks([])
        fig.savefig(page.dir / f"embeddings_{data}{'' if lang == 'en' else '_zh'}.png")
        plt.close(fig)
    unit = torch.nn.functional.normalize(wte, dim=-1)
    for c in common[:6]:
        sims = unit @ unit[tok.stoi[c]]
        near = [tok.itos[int(i)] for i in sims.argsort(descending=True)[1:4]]
        page.fact(f"{data}.neighbours_{common.index(c)}",
                  f"`{token_label(c)}`: " + " ".join(f"`{token_label(n)}`" for n in near))


def places(xy, width: float = 0.045, height: float = 0.05) -> list[tuple[float, float]]:
    """Where to write each point's label, in order: on the point, or if a label written
    before is there, the nearest spot around that covers neither a label nor another
    point (sizes as shares of the plot's width and height)."""
    w, h = ((xy.max(0).values - xy.min(0).values) * xy.new_tensor([width, height])).tolist()
    points = xy.tolist()
    steps = sorted(((i, j) for i in range(-4, 5) for j in range(-4, 5)),
                   key=lambda s: s[0] ** 2 + s[1] ** 2)  # nearest first

    def free(x: float, y: float, me: int, moved: bool) -> bool:
        return (all(abs(x - a) >= w or abs(y - b) >= h for a, b in taken)
                and not (moved and any(abs(x - a) < w / 2 and abs(y - b) < h / 2
                                       for k, (a, b) in enumerate(points) if k != me)))

    taken: list[tuple[float, float]] = []
    for me, (x, y) in enumerate(points):
        spots = ((x + i * w, y + j * h, (i, j) != (0, 0)) for i, j in steps)
        taken.append(next(((a, b) for a, b, moved in spots if free(a, b, me, moved)), (x, y)))
    return taken


def schedule(page: Page) -> None:
    """The learning rate of the defaults and of nanogpt-cpu, step by step (no training)."""
    from stage5_gpt.plots import plt
    from stage5_gpt.presets import PRESETS as SETTINGS
    from stage5_gpt.train import build_parser, get_lr

    parser = build_parser()
    runs = {"defaults": parser.parse_args([]),
            "nanogpt-cpu": parser.parse_args([f"--{k.replace('_', '-')}={v}" for k, v in
                                              SETTINGS["nanogpt-cpu"].items()
                                              if k not in ("bias", "data")])}
    rows, curves = [], {}
    for name, args in runs.items():
        lrs = curves[name] = [get_lr(s, args) for s in range(args.max_iters)]
        half = args.warmup_iters + (args.max_iters - args.warmup_iters) // 2
        label = ("defaults", "默认设置") if name == "defaults" else name
        rows.append((label, f"{args.lr:g}", args.warmup_iters, f"{lrs[half]:.2e}",
                     f"{lrs[-1]:.2e}", f"{args.max_iters:,}"))
        page.fact(f"lr.{name}.warmup", args.warmup_iters)
        page.fact(f"lr.{name}.steps", args.max_iters)
    for tag, (x, y, default) in {"": ("step", "learning rate", "defaults"),
                                 "_zh": ("步数", "学习率", "默认设置")}.items():
        fig, ax = plt.subplots(figsize=(7, 3.6), dpi=120, constrained_layout=True)
        for name, lrs in curves.items():
            ax.plot(range(len(lrs)), lrs, label=default if name == "defaults" else name)
        ax.set(xlabel=x, ylabel=y)
        ax.grid(alpha=0.3)
        ax.legend()
        fig.savefig(page.dir / f"lr_schedule{tag}.png")
        plt.close(fig)
    page.both("lr_schedule", table(
        {"en": ["settings", "peak --lr", "warmup steps", "lr halfway through the decay", "last lr",
                "steps"],
         "zh": ["设置", "峰值 --lr", "预热步数", "衰减过半时的学习率", "最后的学习率", "总步数"]},
        rows, right={1, 2, 3, 4, 5}))


def write(page: Page) -> None:
    training(page, STAGE, {**RUNS, **CLASSIC_RUNS})
    for name, run in PRESETS.items():  # their runs are on the scale page; here, their size
        page.fact(f"{name}.params", page.stored(run).metrics["params"])
    for data in RUNS:
        page.draw(figures, data)
        page.draw(embeddings, data)
    for name, run in {**{d: SAMPLES[d] for d in RUNS},
                      **{f"inspect_{d}": r for d, r in INSPECT.items()}}.items():
        page.write(f"{'sample_' if not name.startswith('inspect') else ''}{name}.txt",
                   f"$ {run.command}\n{page.stored(run).stdout}")
    schedule(page)
    numbers(page, "tied", page.stored(TIED))


JOBS = [Job("stage5", write, runs=(*RUNS.values(), *CLASSIC_RUNS.values(), *PRESETS.values(),
                                   *SAMPLES.values(), *INSPECT.values(), TIED), files=(STAGE,),
            draws=tuple(Draw(f, d, reads=run) for d, run in RUNS.items()
                        for f in (figures, embeddings)),
            timed=(*RUNS.values(), *CLASSIC_RUNS.values(), *PRESETS.values()))]
