"""What the trained GPT has learned, in numbers and pictures: how alike its
position embeddings are, and the "logit lens" (what it would predict if it
stopped after each block). ``python -m <stage>.visualize`` draws both.
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


def position_similarity_figure(model: GPT, path: str | Path) -> Path:
    """Heatmap of ``position_similarity`` plus its average by distance |i - j|."""
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
    ax2.set_title("nearby positions: similar embeddings?", fontsize=10)
    ax2.grid(alpha=0.3)
    fig.suptitle(f"{__package__}: learned position embeddings (block_size={T})")
    return _save(fig, path)


# --- logit lens: the prediction after each block -----------------------------------------


@torch.no_grad()
def logit_lens(model: GPT, tokenizer: CharTokenizer, prompt: str) -> dict:
    """Read the residual stream out through ln_f and lm_head after every block.

    Returns ``probs`` (n_layer + 1, T, V): row 0 reads the embeddings (no block
    yet), row i + 1 the stream after block i; the last row is exactly the
    model's own prediction. ``target_probs`` (n_layer + 1, T - 1) is the
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
        "row_names": ["embeddings"] + [f"layer {i}" for i in range(L)],
    }


def layer_predictions_figure(model: GPT, tokenizer: CharTokenizer, prompt: str,
                             path: str | Path) -> Path:
    """Heatmap: probability of the true next character, per position and per layer.

    Each cell also shows the layer's top-1 guess (bold when it is right).
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
    fig, ax = plt.subplots(figsize=(2.2 + 0.42 * cols, 1.6 + 0.42 * rows), dpi=110,
                           constrained_layout=True)
    im = ax.imshow(target_probs.numpy(), cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto")
    for r in range(rows):
        for c in range(cols):
            guess = int(top1[r, c])
            ax.text(c, r, token_label(tokenizer.itos[guess]), ha="center", va="center",
                    fontsize=9, color="black" if target_probs[r, c] > 0.6 else "white",
                    fontweight="bold" if guess == int(lens["ids"][c + 1]) else "normal")
    ax.set_xticks(range(cols), labels[:-1])
    ax.set_xlabel("input character at each position")
    top = ax.secondary_xaxis("top")
    top.set_xticks(range(cols), labels[1:])
    top.set_xlabel("actual next character")
    ax.set_yticks(range(rows), lens["row_names"][:-1] + [f"{lens['row_names'][-1]} (output)"])
    ax.tick_params(length=0)
    fig.colorbar(im, ax=ax, shrink=0.9, label="p(actual next character)")
    fig.suptitle(f"{__package__}: how the prediction sharpens layer by layer\n"
                 "(cell text: top-1 guess, bold when right)", fontsize=10)
    return _save(fig, path)
