"""Stage 5 page: the GPT trained on both built-in corpora and, with its presets, on the
classic ones; what it learned (attention, position embeddings, the logit lens), one head's
computation, a sample, and the learning-rate schedule."""

from __future__ import annotations

import math
import re
from collections import Counter

from .. import Draw, Job, Page, Run, table
from ..verse import verse_form
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
UNTIED = {d: train(STAGE, d, "--no-tie-weights") for d in ("en", "zh")}  # an output head of its own
STAGE4 = {d: classic("stage4_block", d) for d in ("en", "zh", *CLASSIC)}  # stage 4's runs, for
# the perplexities the page sets beside stage 5's (the same runs as the stage 4 page's)
LENS_ZH = {"i": "位置 i", "j": "位置 j", "cos": "cos(wpe[i], wpe[j])；颜色截在 ±{lim:.2f}",
           "cosine": "余弦相似度", "distance": "距离 |i - j|", "mean": "平均余弦相似度",
           "by_distance": "按距离平均的相似度", "positions": "{stage}：学到的位置嵌入（block_size={T}）",
           "x0": "x₀ 嵌入", "after": "x{n} 第 {layer} 层之后", "output": "（输出）",
           "input": "输入的字符", "next": "实际的下一个字符", "p": "p(实际的下一个字符)",
           "lens": "{stage}：预测如何一层层变得清楚\n（格中：最可能的猜测，猜对为粗体）"}


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
    text = load_text(data)
    prompt = default_prompt(text, min(model.config.block_size, 24))
    page.fact(f"{data}.prompt", prompt)
    shown = lens_prompt(model, tok, text, LENS_LINES)  # the logit lens's example, by a rule
    page.fact(f"{data}.lens_prompt", shown)
    for tag, labels, lens_labels in (("", LABELS, lens.LABELS), ("_zh", ZH_LABELS, LENS_ZH)):
        attention_figure(model, tok, prompt, page.dir / f"attention_{data}{tag}.png", labels)
        for path in attention_layer_figures(model, tok, prompt, page.dir / "tmp", labels):
            path.rename(page.dir / f"{data}_{path.stem}{tag}.png")
        lens.position_similarity_figure(model, page.dir / f"positions_{data}{tag}.png",
                                        lens_labels)
        lens.layer_predictions_figure(model, tok, shown, page.dir / f"lens_{data}{tag}.png",
                                      lens_labels)
    (page.dir / "tmp").rmdir()
    near = lens.similarity_by_distance(lens.position_similarity(model))
    for d in range(1, 9):
        page.fact(f"{data}.position_sim_{d}", near[d - 1])
    page.fact(f"{data}.position_peak", 1 + max(range(len(near)), key=near.__getitem__))
    page.fact(f"{data}.position_negative", sum(v < 0 for v in near))
    right = lens.logit_lens(model, tok, shown)["right"]
    page.fact(f"{data}.lens_right", right.sum(dim=1).tolist())
    for row, n in enumerate(right.sum(dim=1).tolist()):  # one by one: each edition's prose
        page.fact(f"{data}.lens_right_{row}", n)  # lists them with its own separator
    page.fact(f"{data}.lens_of", len(shown) - 1)
    page.fact(f"{data}.lens_lines", LENS_LINES)
    page.fact(f"{data}.lens_wrong", " ".join(
        f"`{token_label(shown[c])}→{token_label(shown[c + 1])}`"
        for c in range(len(shown) - 1) if not right[-1, c]))
    page.fact(f"{data}.attention_layers", model.config.n_layer)


LENS_LINES = 30  # held-out lines the logit lens's example is chosen from


def lens_prompt(model, tok, text: str, lines: int) -> str:
    """The logit lens's example, chosen by a rule: of the first ``lines`` lines of the
    held-out text (each cut to 24 characters, as the figures' prompt is), the one on which
    the finished model guesses the next character right most often more than the model
    cut after its first block does (the earliest, of equals)."""
    from stage5_gpt import lens
    from stage5_gpt.prompts import default_prompt

    held_out = default_prompt(text, len(text))  # from the first held-out line to the end
    candidates = [line[:24] for line in held_out.split("\n") if len(line) >= 2][:lines]

    def gain(line: str) -> int:
        right = lens.logit_lens(model, tok, line)["right"].sum(dim=1)  # per layer
        return int(right[-1] - right[1])

    return max(candidates, key=gain)  # max keeps the first of equals


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


def moved(page: Page, data: str) -> None:
    """How far each character's embedding moved from where training started, tied (the
    default) and untied, by how often the character occurs: why, untied, rare characters
    show up as the neighbours of common ones. The starting wte is the run's own: the
    trainer seeds torch with --seed right before it builds the model."""
    import statistics

    import torch

    from stage5_gpt.checkpoint import load_model
    from stage5_gpt.data import load_text
    from stage5_gpt.model import GPT
    from stage5_gpt.plots import token_label

    count = Counter(load_text(data))
    for name, run in ((data, RUNS[data]), (f"untied_{data}", UNTIED[data])):
        model, tok, _ = load_model(page.folder(run) / "best.pt")
        torch.manual_seed(1337)  # the runs' --seed
        start = GPT(model.config).transformer.wte.weight.detach()
        wte = model.transformer.wte.weight.detach()
        far = (wte - start).norm(dim=-1) / start.norm(dim=-1)  # in lengths of the start
        cos = torch.nn.functional.cosine_similarity(wte, start, dim=-1)
        groups = {"once": [i for i in range(len(wte)) if count[tok.itos[i]] == 1],
                  "frequent": [i for i in range(len(wte)) if count[tok.itos[i]] > 1000]}
        for group, ids in groups.items():
            page.fact(f"{name}.{group}_chars", len(ids))
            page.fact(f"{name}.moved_{group}", statistics.median(far[i].item() for i in ids))
            page.fact(f"{name}.cos_start_{group}", statistics.median(cos[i].item() for i in ids))
        if name.startswith("untied"):  # the neighbours, with how often each occurs
            unit = torch.nn.functional.normalize(wte, dim=-1)
            for k, (c, _) in enumerate(count.most_common(6)):
                near = [tok.itos[int(i)] for i in (unit @ unit[tok.stoi[c]]).argsort(
                    descending=True)[1:4]]
                page.fact(f"{name}.neighbours_{k}", f"`{token_label(c)}`: " + " ".join(
                    f"`{token_label(n)}` ({count[n]:,})" for n in near))
    # the start is the run's own: other starts would be unrelated (cosine about 0)
    assert page.facts[f"untied_{data}.cos_start_once"] > 0.2, "not the runs' starting wte"


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


def in_gpt2(name: str) -> tuple[str, str]:
    """Where GPT-2 keeps our weight ``name``, in English and in Chinese: under the same name,
    or transposed (its Conv1D stores (in, out))."""
    from stage5_gpt.gpt2 import TRANSPOSED

    if name.endswith(TRANSPOSED):
        return "the same name, transposed", "同名，转置"
    return "the same name", "同名"


def gpt2(page: Page) -> None:
    """GPT-2 small in stage 5's GPT: its sizes and parameter count from its config, and
    where each of our weights is in GPT-2's file (no weights: shapes on the meta device)."""
    import torch

    from stage5_gpt.gpt2 import SMALL, mapping
    from stage5_gpt.model import GPT, GPTConfig

    with torch.device("meta"):
        config = GPTConfig(**SMALL)
        rows = mapping(config)
        page.fact("gpt2.params", sum(p.numel() for p in GPT(config).parameters()))
    for key, value in SMALL.items():
        page.fact(f"gpt2.{key}", value)
    cells = [in_gpt2(n) for n, _, _ in rows]
    assert all(t == n or t.endswith("transposed") for n, _, t in rows), "gpt2.mapping() changed"
    page.both("gpt2", table({"en": ["stage 5's name", "shape (GPT-2 small)", "in GPT-2's file"],
                             "zh": ["第五步里的名字", "形状（GPT-2 small）", "在 GPT-2 的文件里"]},
                            [(f"`{n}`", f"`{s}`", c) for (n, s, _), c in zip(rows, cells, strict=True)]))


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
    for d, run in INSPECT.items():  # the offset most rows of the head look at: i-1, i-2, ...
        page.fact(f"{d}.inspect_offset",
                  re.search(r"; most often (i(?:-\d+)?)", page.stored(run).stdout)[1])
    schedule(page)
    gpt2(page)
    for data, run in UNTIED.items():  # what tying does: the same run with its own head
        numbers(page, f"untied_{data}", page.stored(run))
        tied, untied = (page.stored(r).metrics["params"] for r in (RUNS[data], run))
        page.fact(f"untied_{data}.extra", untied - tied)  # the output layer's own (V, C) matrix
        page.fact(f"untied_{data}.extra_share", (untied - tied) / untied)  # of the untied model
    for name, run in {**RUNS, **CLASSIC_RUNS, **{f"untied_{d}": r for d, r in UNTIED.items()},
                      **{f"stage4_{d}": r for d, r in STAGE4.items()}}.items():
        page.fact(f"{name}.ppl", math.exp(page.stored(run).metrics["best_val_loss"]))
    page.draw(moved, "zh")
    tang = page.stored(CLASSIC_RUNS["tang"]).stdout  # the sample after training
    tang = tang.split("sample after training:\n", 1)[1].split("\ncheckpoint:", 1)[0]
    for name, text in (("tang", tang), ("tang_2min", page.stored(SAMPLES["tang-2min"]).stdout)):
        form = verse_form(text)  # counted as on every page (verse.py)
        for key in ("clauses", "five", "seven", "titles"):
            page.fact(f"{name}.sample_{key}", form[key])


JOBS = [Job("stage5", write, runs=(*RUNS.values(), *CLASSIC_RUNS.values(), *PRESETS.values(),
                                   *SAMPLES.values(), *INSPECT.values(), *UNTIED.values(),
                                   *STAGE4.values()),
            files=(STAGE,),
            draws=(*(Draw(f, d, reads=run) for d, run in RUNS.items()
                     for f in (figures, embeddings)),
                   Draw(moved, "zh", reads=(RUNS["zh"], UNTIED["zh"]))),
            timed=(*RUNS.values(), *CLASSIC_RUNS.values(), *PRESETS.values()))]
