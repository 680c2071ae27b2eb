"""Look inside a trained model with figures: python -m <stage>.visualize

Writes, into a ``figures/`` folder beside the checkpoint:

- attention_grid.png: every layer x head attending over one prompt, one shared
  0..1 colour scale (row i: how much the prediction after character i draws on
  each earlier character j; above the diagonal is 0, the causal mask);
- attention_layer{i}.png: the same attention, one file per layer, with the
  prompt's characters on the axes;
- loss.png: train and val loss from log.jsonl.

Every figure is a function that returns the PNG's path, so the docs can call
them too.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

import torch

from .cli import HelpFormatter, pick_device, run_cli
from .errors import UserError
from .gpt2 import add_init_from, load_for_tool
from .plots import LABELS, plot_attention, plot_losses, quoted
from .prompts import Tokenizer, encode_prompt, pieces, prompt_from_checkpoint

# --- attention ---------------------------------------------------------------------------


@torch.no_grad()
def attention_maps(model: torch.nn.Module, tokenizer: Tokenizer, prompt: str) -> torch.Tensor:
    """Forward ``prompt`` once: its attention weights, (n_layer, n_head, T, T)."""
    idx = encode_prompt(model, tokenizer, prompt)
    model.eval()
    return model.attention_maps(idx)[0]


def attention_figure(model: torch.nn.Module, tokenizer: Tokenizer, prompt: str,
                     path: str | Path, labels: dict[str, str] = LABELS) -> Path:
    """Every head of every layer in one grid: the characters on the axes for a single
    panel, position numbers for an overview of many."""
    maps = attention_maps(model, tokenizer, prompt)
    L, H = maps.shape[:2]
    tokens = pieces(tokenizer, tokenizer.encode(prompt))
    names = [[labels["panel"].format(i=i, j=j) if L * H > 1 else "" for j in range(H)]
             for i in range(L)]
    title = labels["grid"].format(stage=__package__, prompt=quoted(prompt))
    return plot_attention(maps, path, title, names, tokens if L * H == 1 else None, labels)


def attention_layer_figures(model: torch.nn.Module, tokenizer: Tokenizer, prompt: str,
                            out_dir: str | Path, labels: dict[str, str] = LABELS) -> list[Path]:
    """One PNG per layer, its heads two to a row: ``out_dir/attention_layer{i}.png``."""
    maps = attention_maps(model, tokenizer, prompt)
    L, H, T, _ = maps.shape
    tokens = pieces(tokenizer, tokenizer.encode(prompt))
    Cn = min(H, 2)
    R = -(-H // Cn)
    paths = []
    for i in range(L):
        grid = torch.zeros(R * Cn, T, T)  # an odd head count leaves one panel empty
        grid[:H] = maps[i]
        names = [labels["head"].format(j=j) if j < H else "" for j in range(R * Cn)]
        title = labels["layer"].format(i=i, last=L - 1, prompt=quoted(prompt))
        paths.append(plot_attention(grid.view(R, Cn, T, T), Path(out_dir) / f"attention_layer{i}.png",
                                    title, [names[r * Cn : (r + 1) * Cn] for r in range(R)],
                                    tokens, labels))
    return paths


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


def write_figures(model: torch.nn.Module, tokenizer: Tokenizer, prompt: str,
                  out_dir: str | Path, log_path: str | Path | None = None) -> list[Path]:
    """Write every figure into ``out_dir``; loss.png only when ``log_path`` is given."""
    out_dir = Path(out_dir)
    encode_prompt(model, tokenizer, prompt)  # fail on a bad prompt or log before drawing
    if log_path is not None:
        read_log(log_path)
    paths = [attention_figure(model, tokenizer, prompt, out_dir / "attention_grid.png")]
    paths += attention_layer_figures(model, tokenizer, prompt, out_dir)
    if log_path is not None:
        paths.append(loss_figure(log_path, out_dir / "loss.png"))
    return paths


def build_parser(prog: str = "visualize", about: str = __doc__) -> argparse.ArgumentParser:
    """The command line of a figure tool of this stage: ``python -m <stage>.<prog>``."""
    p = argparse.ArgumentParser(
        prog=f"python -m {__package__}.{prog}",
        description=about.splitlines()[0].split(": ")[0] + ".",
        formatter_class=HelpFormatter,
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
    add_init_from(p)
    return p


def visualize(args: argparse.Namespace, draw: Callable[..., list[Path]] | None = None
              ) -> list[Path]:
    """Load the checkpoint (or GPT-2), pick the prompt, draw the figures (``write_figures``,
    or ``draw``) into the output folder and print their paths."""
    model, tokenizer, ckpt, source = load_for_tool(args, pick_device(args.device))
    prompt = args.prompt
    if prompt is None:
        prompt = prompt_from_checkpoint(ckpt, min(model.config.block_size, 24))
    folder = source.parent if ckpt else Path("out") / "gpt2"  # GPT-2's go beside ours
    out_dir = args.out_dir or folder / "figures"
    log = folder / "log.jsonl"
    paths = (draw or write_figures)(model, tokenizer, prompt, out_dir,
                                    log if ckpt and log.is_file() else None)
    print(f"{'checkpoint' if ckpt else 'GPT-2     '}: {source}\nprompt:     {prompt!r}\n"
          f"figures in {out_dir}:")
    for path in paths:
        print(f"  {path}")
    return paths


def main(argv: list[str] | None = None) -> None:
    run_cli(build_parser(), visualize, argv)


if __name__ == "__main__":
    sys.exit(main())
