"""python -m stage1_data: look at the data the way the model will see it.

Prints the corpus statistics, the vocabulary, an encode/decode round trip and one
batch shown as text, input next to target, one character apart.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections import Counter

import torch

from .data import DATA_HELP, Corpus, check_length, get_batch
from .errors import UserError, utf8_output


def show(text: str) -> str:
    """Make newlines visible in one-line displays."""
    return text.replace("\n", "⏎")


def main(argv: list[str] | None = None) -> None:
    utf8_output()
    parser = argparse.ArgumentParser(
        prog=f"python -m {__package__}",
        description=" ".join(__doc__.split("\n\n")[1].split()),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--data", default="en", help=DATA_HELP)
    parser.add_argument("--val-fraction", type=float, default=0.1, help="share held out for validation")
    parser.add_argument("--batch-size", type=int, default=4, help="B: windows per batch")
    parser.add_argument("--block-size", type=int, default=8, help="T: characters per window")
    parser.add_argument("--seed", type=int, default=1337, help="random seed for the batch")
    args = parser.parse_args(argv)
    try:
        corpus = Corpus.load(args.data, args.val_fraction)
        check_length(corpus.train, args.block_size, "train")  # the error names the split
        x, y = get_batch(
            corpus.train, args.batch_size, args.block_size,
            generator=torch.Generator().manual_seed(args.seed),
        )
    except UserError as e:
        parser.exit(2, f"error: {e}\n")
    text, tok = corpus.text, corpus.tokenizer

    print(f"corpus: {args.data}")
    print(f"  {len(text):,} characters, {text.count(chr(10)):,} lines, {tok.vocab_size} distinct")
    print(f"  train {len(corpus.train):,} tokens, val {len(corpus.val):,} tokens")
    common = ", ".join(f"{show(c)!r}:{n}" for c, n in Counter(text).most_common(10))
    print(f"  most common: {common}")
    print(f"\nvocabulary ({tok.vocab_size}): {show(''.join(tok.chars))}")

    sample = text[:40]
    ids = tok.encode(sample)
    print("\nround trip:")
    print(f"  text    {show(sample)!r}")
    print(f"  encode  {ids}")
    print(f"  decode  {show(tok.decode(ids))!r}  (equal: {tok.decode(ids) == sample})")

    print(f"\none batch: x and y have shape {tuple(x.shape)} = (B, T); y is x moved by one")
    for b in range(x.shape[0]):
        print(f"  x[{b}] {show(tok.decode(x[b].tolist()))!r:<{args.block_size + 4}}"
              f"  y[{b}] {show(tok.decode(y[b].tolist()))!r}")
    ctx, target = x[0], y[0]
    print("\nthe T training examples inside x[0] (context -> next character):")
    for t in range(args.block_size):
        print(f"  {show(tok.decode(ctx[: t + 1].tolist()))!r:>{args.block_size + 4}} -> "
              f"{show(tok.itos[int(target[t])])!r}")


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:  # the reader went away (... | head): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(0)
