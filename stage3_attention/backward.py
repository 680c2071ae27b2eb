"""What loss.backward() computes, worked out by hand: python -m <stage>.backward

The loss of a batch is the mean cross-entropy over its N examples,
L = -(1/N) sum_n log softmax(z_n)[y_n], where z_n are the logits of example n and
y_n its true next character. Its gradient with respect to one example's logits is

    dL/dz_n = (softmax(z_n) - onehot(y_n)) / N

the predicted probabilities, minus 1 at the true character. In the bigram, z_n is
the row W[x_n] of the table, so row a collects the gradients of the m_a examples
whose input is a. If c_a[j] of them are followed by j,

    dL/dW[a] = (m_a / N) * (softmax(W[a]) - c_a / m_a)

zero exactly when the row's probabilities are the frequencies c_a / m_a: every step
pulls each row towards the counts of what follows that character in the batch, and
over many batches towards the counts of the whole text.

This command takes a real batch of the checkpoint's data, computes dL/dz by the
formula and by autograd (``loss.backward()``), and shows that the rest of backward()
is the chain rule from there on: started from the formula's dL/dz, it gives every
weight the same gradient. For the bigram it also sums the table's gradient by row and
sets one row of the trained table beside the counts of the training text. It runs in
every later stage too, on that stage's model.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from torch.nn import functional as F

from .checkpoint import default_checkpoint, load_model
from .cli import HelpFormatter, positive_int, run_cli
from .data import Corpus, get_batch


def logits_grad(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """dL/dlogits of the mean cross-entropy, by the formula: (softmax - onehot) / N.
    ``logits`` (N, V), ``targets`` (N,) -> (N, V)."""
    N = logits.shape[0]
    grad = F.softmax(logits, dim=-1)  # the predicted probabilities, (N, V)
    grad[torch.arange(N), targets] -= 1  # minus 1 at each example's true character
    return grad / N  # the loss is a mean over N examples


def table_grad(inputs: torch.Tensor, grad: torch.Tensor, V: int) -> torch.Tensor:
    """dL/dW of the bigram's (V, V) table: row a sums the logits' gradients of the
    examples whose input is a (the other rows were not read, so their gradient is 0)."""
    return torch.zeros(V, V).index_add_(0, inputs, grad)


def show(c: str) -> str:
    return {"\n": "⏎", " ": "␣"}.get(c, c)


def backward(args: argparse.Namespace) -> dict:
    path = default_checkpoint(args.ckpt)
    model, tokenizer, ckpt = load_model(path)  # in eval mode: no dropout, the same each time
    corpus = Corpus.load(ckpt["args"]["data"], ckpt["args"]["val_fraction"], tokenizer)
    V = tokenizer.vocab_size
    T = min(args.block_size, getattr(model.config, "block_size", args.block_size))
    x, y = get_batch(corpus.train, args.batch_size, T,
                     torch.Generator().manual_seed(args.seed))  # (B, T) each
    inputs, targets = x.view(-1), y.view(-1)  # N = B * T examples
    N = len(targets)

    logits = model(x)[0]  # (B, T, V)
    logits.retain_grad()  # keep dL/dlogits, which backward() passes on and forgets
    F.cross_entropy(logits.view(N, V), targets).backward()  # autograd, through the model
    autograd = {name: p.grad.clone() for name, p in model.named_parameters()}
    by_hand = logits_grad(logits.detach().view(N, V), targets)
    d_logits = (by_hand - logits.grad.view(N, V)).abs().max().item()
    # The rest of backward() is the chain rule from the logits on: started from our
    # dL/dlogits, it gives every weight the gradient loss.backward() gave it.
    model.zero_grad()
    model(x)[0].backward(by_hand.view(x.shape + (V,)))
    d_weights = max((p.grad - autograd[name]).abs().max().item()
                    for name, p in model.named_parameters())
    print(f"checkpoint: {path} (step {ckpt['step']})\n"
          f"a batch of B = {args.batch_size} windows of T = {T} characters: "
          f"N = {N} examples, V = {V}\n"
          f"dL/dlogits = (softmax - onehot) / N:  max |by hand - autograd| = {d_logits:.1e}\n"
          f"every weight's gradient, from the logits back with dL/dlogits by hand:  max |by "
          f"hand - autograd| = {d_weights:.1e}")
    found = {"logits": d_logits, "weights": d_weights}

    n, t = 0, int(targets[0])  # the first example, its gradient on the true character
    p = F.softmax(logits.detach().view(N, V)[n], dim=-1)
    print(f"\nexample 0: input {show(tokenizer.itos[int(inputs[n])])!r}, next character "
          f"{show(tokenizer.itos[t])!r}, to which the model gives p = {p[t]:.4f}.\n"
          f"  its gradient there: (p - 1) / N = {by_hand[n, t]:.6f} (autograd: "
          f"{logits.grad.view(N, V)[n, t]:.6f}); at every other character j: p_j / N > 0.\n"
          "  A step against the gradient raises the true character's logit, lowers the others.")
    if hasattr(model, "token_embedding_table"):  # the bigram: a table of counts to learn
        found |= bigram(model, tokenizer, corpus, inputs, by_hand,
                        autograd["token_embedding_table.weight"], args.top)
    return found


def bigram(model, tokenizer, corpus: Corpus, inputs: torch.Tensor, by_hand: torch.Tensor,
           autograd: torch.Tensor, top: int) -> dict:
    """The bigram's table: its gradient by row (``autograd``: loss.backward()'s), and one
    row beside the text's counts."""
    table, V = model.token_embedding_table.weight, tokenizer.vocab_size
    d_table = (table_grad(inputs, by_hand, V) - autograd).abs().max().item()
    print(f"\nthe bigram's dL/dW: the examples' dL/dlogits summed by row:  max |by hand - "
          f"autograd| = {d_table:.1e}")
    # Over the whole training text: row a's gradient is zero where softmax(W[a]) = c_a / m_a.
    data = corpus.train.long()
    counts = torch.zeros(V, V).index_put_((data[:-1], data[1:]), torch.ones(len(data) - 1),
                                          accumulate=True)  # counts[a, j]: j follows a
    a = int(counts.sum(1).argmax())  # the character read most often
    freq = counts[a] / counts[a].sum()
    probs = F.softmax(table[a].detach(), dim=-1)
    print(f"\nthe row of {show(tokenizer.itos[a])!r} (read {int(counts[a].sum()):,} times in the "
          "training text): what the trained table predicts after it, beside how often each "
          "character follows it there")
    print(f"  {'next':>6} {'softmax(W[a])':>14} {'c_a / m_a':>10}")
    for j in freq.argsort(descending=True)[:top].tolist():
        print(f"  {show(tokenizer.itos[j])!r:>6} {probs[j]:14.4f} {freq[j]:10.4f}")
    total = (probs - freq).abs().sum().item() / 2  # total variation: 0 = the same distribution
    print(f"  the two distributions differ by {total:.3f} in total (0: equal, 1: disjoint)")
    return {"table": d_table, "row": tokenizer.itos[a], "differ": total}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"python -m {__package__}.backward",
                                description=__doc__.splitlines()[0].split(": ")[0] + ".",
                                formatter_class=HelpFormatter)
    p.add_argument("--ckpt", type=Path, default=Path("out") / __package__ / "best.pt",
                   help="checkpoint to read (best.pt: lowest val loss, or ckpt.pt beside it "
                        "when there is none)")
    p.add_argument("--batch-size", type=positive_int, default=32, help="B: windows in the batch")
    p.add_argument("--block-size", type=positive_int, default=8, help="T: characters per window")
    p.add_argument("--top", type=positive_int, default=6, help="next characters shown of the row")
    p.add_argument("--seed", type=int, default=1337, help="draws the batch")
    return p


def main(argv: list[str] | None = None) -> None:
    run_cli(build_parser(), backward, argv)


if __name__ == "__main__":
    sys.exit(main())
