"""From averaging the past to self-attention, in four steps: python -m <stage>.buildup

Each step mixes the vectors of a sequence ``x`` (B, T, C) so that position t gets
a weighted average of positions 0..t, and each is a faster or more general way
of writing the one before:

1. ``average_loop``: a Python loop over batch and time;
2. ``average_matmul``: the same averages as one product with a lower-triangular matrix;
3. ``average_softmax``: the same weights from a softmax of zeros with -inf above the diagonal;
4. ``self_attention``: the scores come from the data, q . k, instead of zeros.

Run it to see each step on a small example, and that the first three agree.
"""

from __future__ import annotations

import argparse
import math
import sys

import torch

from .cli import run_cli

SEED = 1337
T_EXAMPLE, C_EXAMPLE = 4, 2  # the printed example: 4 positions, vectors of 2 numbers


def average_loop(x: torch.Tensor) -> torch.Tensor:
    """xbow[b, t] = mean of x[b, 0], ..., x[b, t]: a "bag of words" of the past."""
    B, T, C = x.shape
    xbow = x.new_zeros(B, T, C)
    for b in range(B):
        for t in range(T):
            xprev = x[b, : t + 1]  # (t + 1, C): this position and the ones before it
            xbow[b, t] = xprev.mean(dim=0)  # (C,)
    return xbow


def average_matmul(x: torch.Tensor) -> torch.Tensor:
    """The same averages as one matrix product: row t of wei is 1/(t+1) on 0..t, 0 after."""
    T = x.shape[1]
    wei = x.new_ones(T, T).tril()  # (T, T) lower-triangular ones
    wei = wei / wei.sum(dim=1, keepdim=True)  # each row sums to 1
    return wei @ x  # (T, T) @ (B, T, C) -> (B, T, C): broadcast over B


def average_softmax(x: torch.Tensor) -> torch.Tensor:
    """The same weights again, from a softmax: equal scores where allowed, -inf elsewhere."""
    T = x.shape[1]
    tril = x.new_ones(T, T).tril()
    wei = x.new_zeros(T, T)  # every score equal: no position is preferred yet
    wei = wei.masked_fill(tril == 0, float("-inf"))  # the future: e^-inf = 0
    wei = wei.softmax(dim=-1)  # row t: 1/(t+1) on 0..t
    return wei @ x  # (B, T, C)


def self_attention(x: torch.Tensor, W_q: torch.Tensor, W_k: torch.Tensor,
                   W_v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The scores come from the data: q_i . k_j instead of zeros. Returns (out, wei)."""
    T = x.shape[1]
    q = x @ W_q  # (B, T, hs): what each position looks for
    k = x @ W_k  # (B, T, hs): what each position contains
    v = x @ W_v  # (B, T, hs): what each position passes on
    wei = q @ k.transpose(-2, -1) / math.sqrt(k.shape[-1])  # (B, T, T) scores
    tril = x.new_ones(T, T).tril()
    wei = wei.masked_fill(tril == 0, float("-inf"))  # still no peeking ahead
    wei = wei.softmax(dim=-1)  # (B, T, T), each row sums to 1
    return wei @ v, wei  # (B, T, hs), (B, T, T)


def weights_of(form, T: int) -> torch.Tensor:
    """The (T, T) weight matrix a mixing function applies, read off by feeding it the
    identity: row t of ``form(I)`` is how much position t takes from each position."""
    return form(torch.eye(T)[None])[0]


def fmt(m: torch.Tensor) -> str:
    """A matrix as aligned text, two decimals, -inf kept."""
    rows = [["-inf" if math.isinf(float(v)) else f"{float(v):.2f}" for v in row]
            for row in m.reshape(-1, m.shape[-1])]
    width = max(len(c) for row in rows for c in row)
    return "\n".join("  ".join(c.rjust(width) for c in row) for row in rows)


def example(seed: int = SEED) -> dict:
    """The small example: x, the weights W_q, W_k, W_v, and every step's result."""
    torch.manual_seed(seed)
    x = torch.randint(0, 10, (1, T_EXAMPLE, C_EXAMPLE)).float()  # small whole numbers
    # Small weights: scores of order 1 (x holds numbers up to 9), so the softmax stays soft.
    W_q, W_k, W_v = (0.3 * torch.randn(C_EXAMPLE, C_EXAMPLE) for _ in range(3))
    out, wei = self_attention(x, W_q, W_k, W_v)
    return {"x": x, "W": (W_q, W_k, W_v), "loop": average_loop(x),
            "matmul": average_matmul(x), "softmax": average_softmax(x), "out": out, "wei": wei}


def agreement(seed: int = SEED) -> dict[str, float]:
    """The largest difference between steps that should compute the same thing, on a
    random batch bigger than the example."""
    xb = torch.randn(3, 8, 5, generator=torch.Generator().manual_seed(seed))
    zeros, eye = torch.zeros(5, 5), torch.eye(5)
    return {
        "loop vs matmul": (average_loop(xb) - average_matmul(xb)).abs().max().item(),
        "loop vs softmax": (average_loop(xb) - average_softmax(xb)).abs().max().item(),
        # q = k = 0 makes every score 0: self-attention is then the average of the values.
        "softmax vs self-attention with W_q = W_k = 0":
            (average_softmax(xb) - self_attention(xb, zeros, zeros, eye)[0]).abs().max().item(),
    }


def show(args: argparse.Namespace) -> dict:
    ex = example(args.seed)
    x, (W_q, W_k, W_v), T = ex["x"], ex["W"], T_EXAMPLE
    tril = torch.ones(T, T).tril()
    zeros = torch.zeros(T, T).masked_fill(tril == 0, float("-inf"))
    q, k, v = x @ W_q, x @ W_k, x @ W_v
    scores = q @ k.transpose(-2, -1) / math.sqrt(C_EXAMPLE)
    steps = {
        "1. loop": {"x": x[0], "xbow": ex["loop"][0]},
        "2. matrix product": {"tril": tril, "wei = tril / row sums": tril / tril.sum(1, keepdim=True),
                              "wei @ x": ex["matmul"][0]},
        "3. masked softmax": {"zeros, masked": zeros, "softmax(dim=-1)": zeros.softmax(-1),
                              "wei @ x": ex["softmax"][0]},
        "4. self-attention": {"q = x @ W_q": q[0], "k = x @ W_k": k[0], "v = x @ W_v": v[0],
                              "scores q @ k^T / sqrt(hs)": scores[0],
                              "masked": scores[0].masked_fill(tril == 0, float("-inf")),
                              "wei = softmax": ex["wei"][0], "out = wei @ v": ex["out"][0]},
    }
    for title, tensors in steps.items():
        print(f"== {title}\n")
        print("\n\n".join(f"{name} {tuple(t.shape)}:\n{fmt(t)}" for name, t in tensors.items()))
        print()
    print("== do the steps agree?\n")
    diffs = agreement(args.seed)
    for name, d in diffs.items():
        print(f"largest difference, {name}: {d:.1e}")
    return diffs


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog=f"python -m {__package__}.buildup",
                                description=__doc__.splitlines()[0].split(": ")[0] + ".")
    p.add_argument("--seed", type=int, default=SEED, help="seeds the example")
    run_cli(p, show, argv)


if __name__ == "__main__":
    sys.exit(main())
