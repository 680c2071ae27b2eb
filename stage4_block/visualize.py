"""Draw where the trained model attends: python -m <stage>.visualize

Runs a prompt through a checkpoint and writes a heatmap per attention head:
row i shows how much the prediction after character i draws on each earlier
character j. Everything above the diagonal is 0 (the causal mask).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from .checkpoint import load_model
from .cli import pick_device
from .data import load_text, split
from .errors import UserError
from .model import LanguageModel
from .plots import plot_attention
from .tokenizer import CharTokenizer


def default_prompt(text: str, length: int) -> str:
    """``length`` characters of held-out (validation) text, from the start of a line."""
    _, val = split(torch.arange(len(text)))
    held_out = text[int(val[0]) :] if len(val) else text
    start = held_out.find("\n") + 1
    line = held_out[start:].lstrip("\n")[:length] or held_out[:length]
    return line


@torch.no_grad()
def attention_figure(model: LanguageModel, tokenizer: CharTokenizer, prompt: str,
                     path: str | Path) -> Path:
    """Forward ``prompt`` once and plot every head's attention weights."""
    block_size = model.config.block_size
    if not prompt:
        raise UserError("the prompt is empty; give at least one character")
    if len(prompt) > block_size:
        raise UserError(
            f"the prompt has {len(prompt)} characters but the model sees at most "
            f"block_size={block_size}; use a shorter --prompt."
        )
    device = next(model.parameters()).device
    model.eval()
    model(torch.tensor([tokenizer.encode(prompt)], device=device))
    maps = model.attention_maps()[0]  # (n_layer, n_head, T, T)
    L, H = maps.shape[:2]
    return plot_attention(
        maps, list(prompt), path, title=f"{__package__}: attention for {prompt!r}",
        row_names=[f"layer {i}" for i in range(L)] if L > 1 else None,
        col_names=[f"head {j}" for j in range(H)] if H > 1 else None,
    )


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        prog=f"python -m {__package__}.visualize",
        description=__doc__.splitlines()[0].split(": ")[0] + ".",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--ckpt", type=Path, default=Path("out") / __package__ / "ckpt.pt", help="checkpoint to load")
    p.add_argument("--prompt", default=None, help="text to look at (default: a line of held-out text)")
    p.add_argument("--out", type=Path, default=None, help="PNG to write (default: attention.png beside the checkpoint)")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda", "mps"], help="where to run")
    args = p.parse_args(argv)
    try:
        model, tokenizer, ckpt = load_model(args.ckpt, pick_device(args.device))
        prompt = args.prompt
        if prompt is None:
            prompt = default_prompt(load_text(ckpt.get("args", {}).get("data", "en")),
                                    min(model.config.block_size, 24))
        png = attention_figure(model, tokenizer, prompt, args.out or args.ckpt.parent / "attention.png")
    except UserError as e:
        p.exit(2, f"error: {e}\n")
    print(f"attention heatmap: {png}")


if __name__ == "__main__":
    sys.exit(main())
