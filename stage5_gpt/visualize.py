"""Look inside a trained model with figures: python -m <stage>.visualize

Writes, into a ``figures/`` folder beside the checkpoint:

- attention_grid.png: every layer x head attending over one prompt, one shared
  0..1 colour scale (row i: how much the prediction after character i draws on
  each earlier character j; above the diagonal is 0, the causal mask);
- loss.png: train and val loss from log.jsonl;
- attention_layer{i}.png: the same attention, one file per layer;
- position_similarity.png: how alike the learned position embeddings are;
- layer_predictions.png: the "logit lens": what the model would predict if it
  stopped after each block, so we see the prediction sharpen layer by layer;
- position_similarity.md, layer_predictions.md: what those two figures show, in numbers.

Every figure is a function that returns the PNG's path, so the docs can call
them too.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from .checkpoint import default_checkpoint, load_model
from .cli import pick_device, run_cli
from .data import load_text, split
from .errors import UserError
from .model import LanguageModel
from .plots import plot_losses
from .tokenizer import CharTokenizer


def default_prompt(text: str, length: int) -> str:
    """The first whole line of held-out (validation) text, cut to ``length`` characters."""
    _, val = split(torch.arange(len(text)))
    held_out = text[int(val[0]) :] if len(val) else text
    start = held_out.find("\n") + 1
    line = held_out[start:].lstrip("\n")[:length] or held_out[:length]
    return line


def encode_prompt(model: LanguageModel, tokenizer: CharTokenizer, prompt: str) -> torch.Tensor:
    """Check ``prompt`` fits the model and turn it into a (1, T) batch on the model's device."""
    block_size = model.config.block_size
    if not prompt:
        raise UserError("the prompt is empty; give at least one character")
    if len(prompt) > block_size:
        raise UserError(
            f"the prompt has {len(prompt)} characters but the model sees at most "
            f"block_size={block_size}; use a shorter --prompt."
        )
    device = next(model.parameters()).device
    return torch.tensor([tokenizer.encode(prompt)], device=device)  # (1, T)


# --- attention ---------------------------------------------------------------------------


@torch.no_grad()
def attention_figure(model: LanguageModel, tokenizer: CharTokenizer, prompt: str,
                     path: str | Path) -> Path:
    """Every head of every layer in one grid, an overview: positions numbered, not spelled."""
    from .lens import attention_panels  # lens imports us

    idx = encode_prompt(model, tokenizer, prompt)
    model.eval()
    maps = model.attention_maps(idx)[0]  # (n_layer, n_head, T, T)
    L, H = maps.shape[:2]
    return attention_panels(maps, None, f"attention, layer L x head H, for\n{prompt!r}",
                            [[f"L{i} H{j}" for j in range(H)] for i in range(L)], path)


# --- training curves ---------------------------------------------------------------------


def read_log(log_path: str | Path) -> list[dict]:
    """Rows of log.jsonl (one JSON object per evaluation: step, train, val, lr, time)."""
    log_path = Path(log_path)
    if not log_path.is_file():
        raise UserError(
            f"no training log at {log_path}: loss.png is drawn from the log.jsonl that "
            f"python -m {__package__}.train writes beside its checkpoints."
        )
    rows = []
    for n, line in enumerate(log_path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            rows.append({"step": int(row["step"]), "train": float(row["train"]),
                         "val": float(row["val"])})
        except (json.JSONDecodeError, KeyError, TypeError, ValueError):
            raise UserError(f"{log_path} line {n} is not a log row with step/train/val: "
                            f"{line[:80]!r}") from None
    if not rows:
        raise UserError(f"{log_path} is empty: train for at least one evaluation first.")
    return rows


def loss_figure(log_path: str | Path, path: str | Path, title: str | None = None) -> Path:
    """Train and val loss curves from ``log_path`` (log.jsonl)."""
    return plot_losses(read_log(log_path), path,
                       title=title or f"{__package__}: loss during training")


# --- everything at once ------------------------------------------------------------------


def write_figures(model: LanguageModel, tokenizer: CharTokenizer, prompt: str,
                  out_dir: str | Path, log_path: str | Path | None = None) -> list[Path]:
    """Write every figure into ``out_dir``; loss.png only when ``log_path`` is given."""
    out_dir = Path(out_dir)
    encode_prompt(model, tokenizer, prompt)  # fail on a bad prompt or log before drawing
    if len(prompt) < 2:
        raise UserError("give a prompt of at least 2 characters: layer_predictions.png checks "
                        "each guess against the character that follows")
    if log_path is not None:
        read_log(log_path)
    paths = [attention_figure(model, tokenizer, prompt, out_dir / "attention_grid.png")]
    from .lens import attention_layer_figures, layer_predictions_figure, position_similarity_figure

    paths += attention_layer_figures(model, tokenizer, prompt, out_dir)
    if log_path is not None:
        paths.append(loss_figure(log_path, out_dir / "loss.png"))
    paths.append(position_similarity_figure(model, out_dir / "position_similarity.png"))
    paths.append(layer_predictions_figure(model, tokenizer, prompt,
                                          out_dir / "layer_predictions.png"))
    return paths + [p.with_suffix(".md") for p in paths[-2:]]  # written beside those two


def prompt_from_checkpoint(ckpt: dict, length: int) -> str:
    """A line of held-out text from the data the checkpoint was trained on."""
    data = ckpt.get("args", {}).get("data", "en")
    try:
        text = load_text(data)
    except UserError as e:
        raise UserError(f"cannot read the training text to pick a prompt ({e}); "
                        "pass one with --prompt.") from None
    return default_prompt(text, length)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=f"python -m {__package__}.visualize",
        description=__doc__.splitlines()[0].split(": ")[0] + ".",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--ckpt", type=Path, default=Path("out") / __package__ / "best.pt",
                   help="checkpoint to load (best.pt: lowest val loss, or ckpt.pt beside it "
                        "when there is none)")
    p.add_argument("--prompt", default=None,
                   help="text to look at; if not given, a line of held-out training text "
                        "cut to min(block_size, 24) characters")
    p.add_argument("--out-dir", type=Path, default=None,
                   help="folder for the PNGs; if not given, figures/ beside the checkpoint")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda", "mps"],
                   help="where to run")
    return p


def visualize(args: argparse.Namespace) -> list[Path]:
    ckpt_path = default_checkpoint(args.ckpt)
    model, tokenizer, ckpt = load_model(ckpt_path, pick_device(args.device))
    prompt = args.prompt
    if prompt is None:
        prompt = prompt_from_checkpoint(ckpt, min(model.config.block_size, 24))
    out_dir = args.out_dir or ckpt_path.parent / "figures"
    log = ckpt_path.parent / "log.jsonl"
    paths = write_figures(model, tokenizer, prompt, out_dir, log if log.is_file() else None)
    print(f"checkpoint: {ckpt_path}\nprompt:     {prompt!r}\nfigures in {out_dir}:")
    for path in paths:
        print(f"  {path}")
    return paths


def main(argv: list[str] | None = None) -> None:
    run_cli(build_parser(), visualize, argv)


if __name__ == "__main__":
    sys.exit(main())
