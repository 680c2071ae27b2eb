"""What the trained GPT has learned, in numbers and pictures: python -m <stage>.lens

Writes, into a ``figures/`` folder beside the checkpoint (as ``visualize`` does), and
prints what each shows in numbers:

- position_similarity.png: how alike the learned position embeddings are;
- layer_predictions.png: the "logit lens": what the model would predict if it
  stopped after each block, so we see the prediction sharpen layer by layer.
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path

import torch
from torch.nn import functional as F

from .cli import run_cli
from .errors import UserError
from .model import GPT
from .plots import plt, token_label, use_cjk_font  # plt: Agg
from .prompts import Tokenizer, encode_prompt, pieces, unit
from .visualize import build_parser as figure_parser
from .visualize import visualize

# Every word the figures print: pass another dict (same keys) to label them in another language.
LABELS = {"i": "position i", "j": "position j", "cos": "cos(wpe[i], wpe[j]); colours cut at ±{lim:.2f}",
          "cosine": "cosine similarity", "distance": "distance |i - j|",
          "mean": "mean cosine similarity", "by_distance": "mean similarity by distance",
          "positions": "{stage}: learned position embeddings (block_size={T})",
          "x0": "x₀ embeddings", "after": "x{n} after layer {layer}", "output": " (output)",
          "input": "input character", "next": "actual next character",
          "p": "p(actual next character)",
          "lens": "{stage}: how the prediction sharpens layer by layer\n(cell: top-1 guess, bold "
                  "when right)"}
SUB = str.maketrans("0123456789", "₀₁₂₃₄₅₆₇₈₉")  # x₀, x₁, ...


def _save(fig, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


# --- position embeddings -----------------------------------------------------------------


@torch.no_grad()
def position_similarity(model: GPT) -> torch.Tensor:
    """Cosine similarity of every pair of learned position embeddings: (block_size, block_size)."""
    wpe = model.transformer.wpe.weight.detach().float().cpu()  # (block_size, C)
    unit = F.normalize(wpe, dim=-1)
    return unit @ unit.T


def similarity_by_distance(sim: torch.Tensor) -> list[float]:
    """The mean similarity of two positions d apart, for d = 1 .. T - 1 (the d-th diagonal)."""
    return [sim.diagonal(d).mean().item() for d in range(1, sim.shape[0])]


def position_similarity_figure(model: GPT, path: str | Path, labels: dict = LABELS) -> Path:
    """Heatmap of ``position_similarity``, and its mean by distance |i - j|."""
    use_cjk_font()
    sim = position_similarity(model)
    T = sim.shape[0]
    off = sim[~torch.eye(T, dtype=torch.bool)]  # the diagonal is 1: scale colours to the rest
    lim = max(0.05, off.abs().max().item()) if T > 1 else 1.0
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(10, 4.6), dpi=110, constrained_layout=True,
                                  gridspec_kw={"width_ratios": [1.15, 1]})
    im = ax.imshow(sim.numpy(), cmap="RdBu_r", vmin=-lim, vmax=lim)
    ax.set(xlabel=labels["j"], ylabel=labels["i"])
    ax.set_title(labels["cos"].format(lim=lim), fontsize=10)
    fig.colorbar(im, ax=ax, shrink=0.85, label=labels["cosine"])
    ax2.plot(range(1, T), similarity_by_distance(sim), marker="o", markersize=3)
    ax2.axhline(0.0, color="grey", linewidth=0.8)
    ax2.set(xlabel=labels["distance"], ylabel=labels["mean"])
    ax2.set_title(labels["by_distance"], fontsize=10)
    ax2.grid(alpha=0.3)
    fig.suptitle(labels["positions"].format(stage=__package__, T=T))
    return _save(fig, path)


# --- logit lens: the prediction after each block -----------------------------------------


@torch.no_grad()
def logit_lens(model: GPT, tokenizer: Tokenizer, prompt: str) -> dict:
    """Read the residual stream out through ln_f and lm_head after every block.

    Returns ``probs`` (n_layer + 1, T, V): row l reads x_l, the stream after l blocks
    (row 0: the embeddings x_0); the last row is exactly the model's own prediction.
    ``target_probs`` (n_layer + 1, T - 1) is the probability given to the character that
    really comes next in ``prompt``, ``top1`` (n_layer + 1, T) the most likely id, and
    ``right`` (n_layer + 1, T - 1) whether it is that next character.
    """
    idx = encode_prompt(model, tokenizer, prompt)  # (1, T)
    if idx.shape[1] < 2:
        raise UserError(f"layer predictions need a prompt of at least 2 {unit(tokenizer)}s: the "
                        "first one to predict from, the next one to check the guess against")
    model.eval()
    trace: list[dict] = []
    model(idx, trace=trace)
    t = model.transformer
    x0 = t.wte(idx) + t.wpe(torch.arange(idx.shape[1], device=idx.device))  # the embeddings
    resid = torch.cat([x0] + [layer["resid"] for layer in trace], dim=0)  # (L + 1, T, C)
    probs = F.softmax(model.lm_head(t.ln_f(resid)), dim=-1).float().cpu()  # (L + 1, T, V)
    ids = idx[0].cpu()
    targets = ids[1:]  # (T - 1,) the next character at each position but the last
    target_probs = probs[:, :-1, :].gather(
        -1, targets.expand(probs.shape[0], -1).unsqueeze(-1)).squeeze(-1)  # (L + 1, T - 1)
    top1 = probs.argmax(dim=-1)  # (L + 1, T)
    return {"probs": probs, "target_probs": target_probs, "top1": top1, "ids": ids,
            "right": top1[:, :-1] == targets}


def layer_predictions_figure(model: GPT, tokenizer: Tokenizer, prompt: str,
                             path: str | Path, labels: dict = LABELS) -> Path:
    """Heatmap: probability of the true next character, per position and per layer.
    Each cell shows the layer's top-1 guess, bold when it is right."""
    lens = logit_lens(model, tokenizer, prompt)
    use_cjk_font()
    target_probs, top1 = lens["target_probs"], lens["top1"]
    rows, cols = target_probs.shape
    chars = [token_label(p) for p in pieces(tokenizer, lens["ids"])]
    fig, ax = plt.subplots(figsize=(2.6 + 0.3 * cols, 1.7 + 0.4 * rows), dpi=150,
                           constrained_layout=True)
    im = ax.imshow(target_probs.numpy(), cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto")
    for r in range(rows):
        for c in range(cols):
            ax.text(c, r, token_label(tokenizer.decode([int(top1[r, c])])), ha="center",
                    va="center", fontsize=10, color="black" if target_probs[r, c] > 0.6 else "white",
                    fontweight="bold" if lens["right"][r, c] else "normal")
    ax.set_xticks(range(cols), chars[:-1])
    ax.set_xlabel(labels["input"])
    top = ax.secondary_xaxis("top")
    top.set_xticks(range(cols), chars[1:])
    top.set_xlabel(labels["next"])
    names = [labels["x0"]] + [labels["after"].format(n=str(n).translate(SUB), layer=n - 1)
                              for n in range(1, rows)]
    names[-1] += labels["output"]
    ax.set_yticks(range(rows), names)
    ax.tick_params(length=0, labelsize=10)
    top.tick_params(length=0, labelsize=10)
    fig.colorbar(im, ax=ax, shrink=0.9, label=labels["p"])
    fig.suptitle(labels["lens"].format(stage=__package__), fontsize=10)
    return _save(fig, path)


# --- the command line ---------------------------------------------------------------------


def write_figures(model: GPT, tokenizer: Tokenizer, prompt: str, out_dir: str | Path,
                  log_path: str | Path | None = None) -> list[Path]:
    """Both figures into ``out_dir``, and what they show, printed; ``log_path`` is not used."""
    paths = [layer_predictions_figure(model, tokenizer, prompt,
                                      Path(out_dir) / "layer_predictions.png"),
             position_similarity_figure(model, Path(out_dir) / "position_similarity.png")]
    right = logit_lens(model, tokenizer, prompt)["right"].sum(dim=1).tolist()
    n = len(tokenizer.encode(prompt))
    print(f"right guesses of the next {unit(tokenizer)}, after each block (x0 .. x{len(right) - 1}): "
          f"{right} of {n - 1}")
    near = similarity_by_distance(position_similarity(model))[:8]
    print("mean position similarity at distance 1..8: " + " ".join(f"{v:.2f}" for v in near))
    return paths


def main(argv: list[str] | None = None) -> None:
    run_cli(figure_parser("lens", __doc__), functools.partial(visualize, draw=write_figures), argv)


if __name__ == "__main__":
    sys.exit(main())
