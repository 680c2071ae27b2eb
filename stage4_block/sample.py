"""Generate text from a trained checkpoint: python -m <stage>.sample

Example: python -m <stage>.sample --prompt "The " --tokens 100 --temperature 0.8
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from .checkpoint import load_model
from .cli import non_negative_int, pick_device, positive_int
from .errors import UserError


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=f"python -m {__package__}.sample",
        description=__doc__.splitlines()[0].split(": ")[0] + ".",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--ckpt", type=Path, default=Path("out") / __package__ / "ckpt.pt", help="checkpoint to load")
    p.add_argument("--prompt", default="\n", help="text to continue (every character must be in the vocabulary)")
    p.add_argument("--tokens", type=non_negative_int, default=300, help="characters to generate")
    p.add_argument("--temperature", type=float, default=1.0, help="0 = greedy; <1 sharper, >1 more random")
    p.add_argument("--top-k", type=positive_int, default=None, help="sample only among the k most likely")
    p.add_argument("--seed", type=int, default=1337, help="random seed")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda", "mps"], help="where to run")
    return p


# --8<-- [start:generate_text]
def generate_text(args: argparse.Namespace) -> str:
    if not args.temperature >= 0:  # also catches nan
        raise UserError(f"--temperature must be >= 0 (0 means greedy), got {args.temperature}")
    if not args.prompt:
        raise UserError("--prompt is empty; give at least one character (the default is a newline)")
    device = pick_device(args.device)
    model, tokenizer, _ = load_model(args.ckpt, device)
    idx = torch.tensor([tokenizer.encode(args.prompt)], device=device)  # (1, T)
    out = model.generate(idx, args.tokens, args.temperature, args.top_k,
                         generator=torch.Generator(device).manual_seed(args.seed))
    return tokenizer.decode(out[0].tolist())
# --8<-- [end:generate_text]


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        print(generate_text(args))
    except UserError as e:
        parser.exit(2, f"error: {e}\n")


if __name__ == "__main__":
    sys.exit(main())
