"""What the trained GPT has learned, in numbers and pictures: its attention, one
figure per layer, how alike its position embeddings are, and the "logit lens"
(what it would predict if it stopped after each block). ``python -m
<stage>.visualize`` draws them, and writes beside the last two what they show,
in numbers (a .md file per figure).
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch.nn import functional as F

from .errors import UserError
from .model import GPT
from .plots import plt, token_label, use_cjk_font  # plt: Agg
from .tokenizer import CharTokenizer
from .visualize import encode_prompt


def _save(fig, path: str | Path, reading: list[str]) -> Path:
    """Save the figure, and beside it (same name, .md) the lines that read it out."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    path.with_suffix(".md").write_text("\n".join(reading) + "\n", encoding="utf-8")
    return path


def code(s: str) -> str:
    """``s`` as Markdown inline code, even when it holds a backtick."""
    return f"`` {s} ``" if "`" in s else f"`{s}`"


# --- attention, legible at a page's width -------------------------------------------------

# Figures 6.4 inches wide shown in a ~690 px column: 1 pt of font is about 1.5 px on screen.
WIDTH = 6.4


def attention_panels(maps: torch.Tensor, labels: list[str] | None, title: str, names: list[list[str]],
            path: str | Path) -> Path:
    """A grid of attention heatmaps (rows, cols, T, T), one 0..1 colour scale, ticks outside.

    ``labels``: one tick per character; None: a few position numbers (an overview).
    """
    use_cjk_font()
    R, Cn, T, _ = maps.shape
    fig, axes = plt.subplots(R, Cn, figsize=(WIDTH, WIDTH / Cn * R * 0.9 + 0.9), dpi=160,
                             squeeze=False, sharex=True, sharey=True, constrained_layout=True)
    ticks = range(T) if labels else range(0, T, max(1, -(-T // 3)))
    for r in range(R):
        for c in range(Cn):
            ax = axes[r][c]
            im = ax.imshow(maps[r, c].float().cpu().numpy(), cmap="viridis", vmin=0.0, vmax=1.0)
            ax.set_title(names[r][c], fontsize=12 if labels else 10)
            ax.set_xticks(ticks, [token_label(labels[j]) for j in ticks] if labels else None)
            ax.set_yticks(ticks, [token_label(labels[j]) for j in ticks] if labels else None)
            ax.tick_params(length=0, labelsize=9.5 if labels else 9)
    if labels:
        for ax in axes[-1]:
            ax.set_xlabel("key j (attended to)", fontsize=10)
        for row in axes:
            row[0].set_ylabel("query i (predicting after)", fontsize=10)
    else:  # small panels: one label for the whole grid
        fig.supxlabel("key position j (attended to)", fontsize=10)
        fig.supylabel("query position i", fontsize=10)
    fig.colorbar(im, ax=axes, shrink=0.8).set_label("attention weight", fontsize=10)
    fig.suptitle(title, fontsize=12)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


@torch.no_grad()
def attention_layer_figures(model: GPT, tokenizer: CharTokenizer, prompt: str,
                            out_dir: str | Path) -> list[Path]:
    """One PNG per layer, its heads two to a row: ``out_dir/attention_layer{i}.png``."""
    idx = encode_prompt(model, tokenizer, prompt)
    model.eval()
    maps = model.attention_maps(idx)[0]  # (n_layer, n_head, T, T)
    L, H = maps.shape[:2]
    Cn = min(H, 2)
    R = -(-H // Cn)
    paths = []
    for i in range(L):
        grid = torch.zeros(R * Cn, *maps.shape[2:])  # an odd head count leaves one panel empty
        grid[:H] = maps[i]
        names = [f"head {j}" if j < H else "" for j in range(R * Cn)]
        paths.append(attention_panels(grid.view(R, Cn, *maps.shape[2:]), list(prompt),
                             f"layer {i} (h[{i}]) of 0..{L - 1}: attention for\n{prompt!r}",
                             [names[r * Cn : (r + 1) * Cn] for r in range(R)],
                             Path(out_dir) / f"attention_layer{i}.png"))
    return paths


# --- position embeddings -----------------------------------------------------------------


@torch.no_grad()
def position_similarity(model: GPT) -> torch.Tensor:
    """Cosine similarity of every pair of learned position embeddings: (block_size, block_size)."""
    wpe = model.transformer.wpe.weight.detach().float().cpu()  # (block_size, C)
    unit = F.normalize(wpe, dim=-1)
    return unit @ unit.T


def position_similarity_figure(model: GPT, path: str | Path) -> Path:
    """Heatmap of ``position_similarity`` plus its average by distance |i - j|.

    The .md beside it reads the average out: its value at each distance up to 8,
    where it is largest, and whether it falls steadily with distance.
    """
    use_cjk_font()
    sim = position_similarity(model)
    T = sim.shape[0]
    # The diagonal is always 1; scale the colours to the rest, where the pattern is.
    off = sim[~torch.eye(T, dtype=torch.bool)]
    lim = max(0.05, off.abs().max().item()) if T > 1 else 1.0
    # Mean similarity of positions d apart: the d-th diagonal of the matrix.
    by_distance = [sim.diagonal(d).mean().item() for d in range(1, T)]
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(10, 4.6), dpi=110,
                                  gridspec_kw={"width_ratios": [1.15, 1]},
                                  constrained_layout=True)
    im = ax.imshow(sim.numpy(), cmap="RdBu_r", vmin=-lim, vmax=lim)
    step = max(1, T // 8)
    ax.set_xticks(range(0, T, step))
    ax.set_yticks(range(0, T, step))
    ax.set_xlabel("position j")
    ax.set_ylabel("position i")
    ax.set_title(f"cos(wpe[i], wpe[j]); colours cut at ±{lim:.2f}", fontsize=10)
    fig.colorbar(im, ax=ax, shrink=0.85, label="cosine similarity")
    ax2.plot(range(1, T), by_distance, marker="o", markersize=3)
    ax2.axhline(0.0, color="grey", linewidth=0.8)
    ax2.set_xlabel("distance |i - j| (fewer pairs to average further right)")
    ax2.set_ylabel("mean cosine similarity")
    ax2.set_title("mean similarity by distance", fontsize=10)
    ax2.grid(alpha=0.3)
    fig.suptitle(f"{__package__}: learned position embeddings (block_size={T})")
    near = by_distance[:8]  # distances 1..8
    peak = max(range(len(by_distance)), key=by_distance.__getitem__)
    steady = all(a >= b for a, b in zip(near, near[1:], strict=False))
    reading = [
        "Mean cosine similarity of two positions $d$ apart (the right-hand plot), read out:",
        "",
        "| $d$ | " + " | ".join(str(d) for d in range(1, len(near) + 1)) + " |",
        "|---|" + "---:|" * len(near),
        "| mean | " + " | ".join(f"{v:.2f}" for v in near) + " |",
        "",
        f"It is largest at $d = {peak + 1}$ ({by_distance[peak]:.2f}); "
        f"{sum(v < 0 for v in by_distance)} of the {T - 1} distances have a negative mean. "
        f"Over $d = 1..{len(near)}$ it " + ("falls steadily with distance." if steady else
                                             "does not fall steadily: it goes up and down."),
    ]
    return _save(fig, path, reading)


# --- logit lens: the prediction after each block -----------------------------------------

SUB = str.maketrans("0123456789", "₀₁₂₃₄₅₆₇₈₉")  # x₀, x₁, ...


@torch.no_grad()
def logit_lens(model: GPT, tokenizer: CharTokenizer, prompt: str) -> dict:
    """Read the residual stream out through ln_f and lm_head after every block.

    Returns ``probs`` (n_layer + 1, T, V): row l reads x_l, the stream after l
    blocks: row 0 the embeddings x_0, row l the stream after layer l - 1 (``h[l-1]``);
    the last row is exactly the model's own prediction. ``target_probs`` (n_layer + 1, T - 1) is the
    probability given to the character that really comes next in ``prompt``,
    ``top1`` (n_layer + 1, T) the most likely id, ``row_names`` labels the rows.
    """
    idx = encode_prompt(model, tokenizer, prompt)  # (1, T)
    model.eval()
    trace: list[dict] = []
    model(idx, trace=trace)
    streams = [model.embed(idx)] + [layer["resid"] for layer in trace]  # each (1, T, C)
    resid = torch.cat(streams, dim=0)  # (n_layer + 1, T, C)
    probs = F.softmax(model.readout(resid), dim=-1).float().cpu()  # (L + 1, T, V)
    ids = idx[0].cpu()
    targets = ids[1:]  # (T - 1,) the next character at each position but the last
    target_probs = probs[:, :-1, :].gather(
        -1, targets.expand(probs.shape[0], -1).unsqueeze(-1)).squeeze(-1)  # (L + 1, T - 1)
    L = len(trace)
    return {
        "probs": probs,
        "target_probs": target_probs,
        "top1": probs.argmax(dim=-1),  # (L + 1, T)
        "ids": ids,
        "row_names": [f"x{str(n).translate(SUB)} " + (f"after layer {n - 1}" if n else "embeddings")
                      for n in range(L + 1)],
    }


def layer_predictions_figure(model: GPT, tokenizer: CharTokenizer, prompt: str,
                             path: str | Path) -> Path:
    """Heatmap: probability of the true next character, per position and per layer.

    Each cell also shows the layer's top-1 guess (bold when it is right). The .md
    beside it reads the figure out: per row, how many guesses are right, and which.
    """
    if len(prompt) < 2:
        raise UserError("layer predictions need a prompt of at least 2 characters: the "
                        "first one to predict from, the next one to check the guess against")
    use_cjk_font()
    lens = logit_lens(model, tokenizer, prompt)
    target_probs = lens["target_probs"]  # (L + 1, T - 1)
    rows, cols = target_probs.shape
    top1 = lens["top1"][:, :-1]
    labels = [token_label(c) for c in prompt]
    fig, ax = plt.subplots(figsize=(2.6 + 0.3 * cols, 1.7 + 0.4 * rows), dpi=150,
                           constrained_layout=True)
    im = ax.imshow(target_probs.numpy(), cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto")
    for r in range(rows):
        for c in range(cols):
            guess = int(top1[r, c])
            ax.text(c, r, token_label(tokenizer.itos[guess]), ha="center", va="center",
                    fontsize=10, color="black" if target_probs[r, c] > 0.6 else "white",
                    fontweight="bold" if guess == int(lens["ids"][c + 1]) else "normal")
    ax.set_xticks(range(cols), labels[:-1])
    ax.set_xlabel("input character at each position")
    top = ax.secondary_xaxis("top")
    top.set_xticks(range(cols), labels[1:])
    top.set_xlabel("actual next character")
    names = lens["row_names"][:-1] + [f"{lens['row_names'][-1]} (output)"]
    ax.set_yticks(range(rows), names)
    ax.tick_params(length=0, labelsize=10)
    top.tick_params(length=0, labelsize=10)
    fig.colorbar(im, ax=ax, shrink=0.9, label="p(actual next character)")
    fig.suptitle(f"{__package__}: how the prediction sharpens layer by layer\n"
                 "(cell text: top-1 guess, bold when right)", fontsize=10)
    reading = [f"Right guesses (bold cells) out of {cols}, row by row, the mean probability given "
               "to the actual next character, and where the guess is right (input → next):", ""]
    right = top1 == lens["ids"][1:]  # (L + 1, T - 1)
    for r in range(rows):
        pairs = " ".join(code(f"{labels[c]}→{labels[c + 1]}") for c in range(cols) if right[r, c])
        reading.append(f"- **{names[r]}**: {int(right[r].sum())} of {cols}, mean "
                       f"p {target_probs[r].mean():.2f}" + (f": {pairs}" if pairs else ""))
    gains = ", ".join(f"layer {r - 1} {int(right[r].sum() - right[r - 1].sum()):+d}"
                      for r in range(1, rows))
    wrong = " ".join(code(f"{labels[c]}→{labels[c + 1]}") for c in range(cols) if not right[-1, c])
    reading += ["", f"Change in right guesses made by each layer: {gains}. "
                    f"Still wrong at the output: {wrong or 'none'}."]
    return _save(fig, path, reading)
