"""Generate text from a trained checkpoint: python -m <stage>.sample

Example: python -m <stage>.sample --prompt "The " --tokens 100 --temperature 0.8
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TextIO

import torch

from .checkpoint import default_checkpoint, load_model
from .cli import HelpFormatter, non_negative_int, pick_device, positive_int, run_cli, temperature
from .errors import UserError


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=f"python -m {__package__}.sample",
        description=__doc__.splitlines()[0].split(": ")[0] + ".",
        formatter_class=HelpFormatter,
    )
    p.add_argument("--ckpt", type=Path, default=Path("out") / __package__ / "best.pt", help="checkpoint to load (best.pt: lowest val loss, or ckpt.pt beside it when there is none)")
    p.add_argument("--prompt", default="\n", help="text to continue (every character must be in the vocabulary)")
    p.add_argument("--tokens", type=non_negative_int, default=300, help="characters to generate")
    p.add_argument("--temperature", type=temperature, default=1.0, help="0 = greedy; <1 sharper, >1 more random")
    p.add_argument("--top-k", type=positive_int, default=None, help="sample only among the k most likely (default: all of them)")
    p.add_argument("--seed", type=int, default=1337, help="random seed")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda", "mps"], help="where to run")
    return p


def generate_text(args: argparse.Namespace, out: TextIO | None = None) -> str:
    """Sample and stream each character to ``out`` (stdout) as soon as it exists."""
    out = out or sys.stdout
    if not args.prompt:
        raise UserError("--prompt is empty; give at least one character (the default is a newline)")
    device = pick_device(args.device)
    model, tokenizer, _ = load_model(default_checkpoint(args.ckpt), device)
    idx = torch.tensor([tokenizer.encode(args.prompt)], device=device)  # (1, T)
    pieces = [args.prompt]
    out.write(args.prompt)
    out.flush()
    for idx_next in model.stream(idx, args.tokens, args.temperature, args.top_k,
                                 generator=torch.Generator(device).manual_seed(args.seed)):
        pieces.append(tokenizer.decode(idx_next[0].tolist()))
        out.write(pieces[-1])
        out.flush()
    out.write("\n")
    return "".join(pieces)


def main(argv: list[str] | None = None) -> None:
    run_cli(build_parser(), generate_text, argv)


if __name__ == "__main__":
    sys.exit(main())
