"""Print one attention head's whole computation: python -m <stage>.inspect

For a short prompt, every number one head computes, in order: the tokens, the
LayerNorm'd input x, the queries, keys and values, the raw scores q k^T, the
scaled scores, the causal mask, the softmax weights and the weighted sum of
the values. The numbers are the ones the model itself computed (its explicit
attention path), so they agree with the figures and with what it predicts.

Keep the prompt short (8 characters or fewer): each matrix is T x T.
"""

from __future__ import annotations

import argparse
import math
import sys
import unicodedata
from pathlib import Path

import torch
from torch.nn import functional as F

from .cli import HelpFormatter, pick_device, positive_int, run_cli
from .errors import UserError
from .gpt2 import add_init_from, load_for_tool
from .model import GPT
from .plots import token_label
from .prompts import Tokenizer, encode_prompt, pieces, prompt_from_checkpoint, unit

MAX_PROMPT = 16  # wider T x T matrices do not fit a terminal
SHOW_DIMS = 8  # columns shown of x, q, k, v and the output


def offset_name(d: int) -> str:
    """How a key position j relates to the query i: "i", "i-1", "i-2", ..."""
    return "i" if d == 0 else f"i-{d}"


def plural(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def valid(n: int) -> str:
    """The valid indices 0..n-1, as a user would type them."""
    return "0" if n == 1 else f"0..{n - 1}"


@torch.no_grad()
def explain_head(model: GPT, tokenizer: Tokenizer, prompt: str, layer: int,
                 head: int) -> dict:
    """Run ``prompt`` and return one head's intermediates for batch item 0, on the CPU.

    Keys: ``tokens`` (the characters), ``ids`` (T,), ``x`` (T, C) the LayerNorm'd
    input of the attention layer, ``q``/``k``/``v`` (T, hs), ``scores`` = q k^T,
    ``scaled`` = scores / sqrt(hs), ``masked`` (-inf above the diagonal),
    ``weights`` = softmax(masked) (all T x T), ``heads_out`` = weights @ v (T, hs),
    plus ``layer``, ``head``, ``head_size``, ``n_layer``, ``n_head``, ``n_embd``.
    """
    cfg = model.config
    if not 0 <= layer < cfg.n_layer:
        raise UserError(f"--layer {layer} does not exist: this model has "
                        f"{plural(cfg.n_layer, 'layer')}; use --layer {valid(cfg.n_layer)}")
    if not 0 <= head < cfg.n_head:
        raise UserError(f"--head {head} does not exist: each layer has "
                        f"{plural(cfg.n_head, 'head')}; use --head {valid(cfg.n_head)}")
    idx = encode_prompt(model, tokenizer, prompt)  # (1, T); checks empty, block_size, vocabulary
    T, what = idx.shape[1], unit(tokenizer)
    if T > MAX_PROMPT:
        raise UserError(
            f"the prompt has {T} {what}s; inspect prints {T} x {T} matrices, which stop "
            f"fitting a terminal beyond {MAX_PROMPT}. Use 8 {what}s or fewer (python -m "
            f"{__package__}.visualize draws long prompts)."
        )
    model.eval()
    trace: list[dict] = []
    model(idx, trace=trace)
    step = trace[layer]  # step["x"]: what the attention read, ln_1 of the residual stream
    pick = {name: step[name][0, head].float().cpu()  # (T, hs) or (T, T)
            for name in ("q", "k", "v", "scores", "scaled", "masked", "weights", "heads_out")}
    return {
        "prompt": prompt,
        "tokens": pieces(tokenizer, idx[0]),
        "unit": what,
        "ids": idx[0].cpu(),
        "x": step["x"][0].float().cpu(),
        **pick,
        "layer": layer,
        "head": head,
        "head_size": cfg.n_embd // cfg.n_head,
        "n_layer": cfg.n_layer,
        "n_head": cfg.n_head,
        "n_embd": cfg.n_embd,
    }


# --- printing ----------------------------------------------------------------------------


def display_width(s: str) -> int:
    """Terminal columns: Chinese characters are two columns wide."""
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in s)


def pad(s: str, width: int, left: bool = False) -> str:
    fill = " " * max(0, width - display_width(s))
    return s + fill if left else fill + s


def number(v: float) -> str:
    if math.isinf(v):
        return "-inf" if v < 0 else "inf"
    v = round(v, 2)
    return f"{v + 0.0:.2f}"  # + 0.0 turns -0.0 into 0.0


def table(m: torch.Tensor, tokens: list[str], col_head: list[str], col_sub: list[str],
          extra: tuple[str, list[str]] | None = None) -> list[str]:
    """Rows are positions i with their character; columns are labelled by two header lines."""
    cell = max(7, *(display_width(s) + 1 for s in col_head + col_sub))
    row_labels = [f"i={i} {token_label(c)}" for i, c in enumerate(tokens)]
    lw = max(display_width(s) for s in row_labels) + 2
    head_1 = pad("", lw) + "".join(pad(s, cell) for s in col_head)
    head_2 = pad("", lw) + "".join(pad(s, cell) for s in col_sub)
    if extra:
        head_1 += pad(extra[0], 10)
        head_2 += pad("", 10)
    lines = ["  " + head_1.rstrip(), "  " + head_2.rstrip()] if any(col_sub) else ["  " + head_1]
    for i, row in enumerate(m.tolist()):
        line = pad(row_labels[i], lw, left=True) + "".join(pad(number(v), cell) for v in row)
        if extra:
            line += pad(extra[1][i], 10)
        lines.append("  " + line)
    return lines


def format_explanation(result: dict, dims: int = SHOW_DIMS) -> str:
    """The dict from ``explain_head`` as text: each matrix with what it means."""
    tokens = result["tokens"]
    T, hs, C = len(tokens), result["head_size"], result["n_embd"]
    keys = [token_label(c) for c in tokens]
    out = [
        f"layer {result['layer']}, head {result['head']} of a GPT with "
        f"{plural(result['n_layer'], 'layer')} x {plural(result['n_head'], 'head')}; "
        f"n_embd C={C}, head size hs={hs}",
        "",
        f"tokens: the prompt {result['prompt']!r}, one {result['unit']} per position (T={T})",
        "  " + pad("position i", 12, left=True)
        + pad("char" if result["unit"] == "character" else "token", 6, left=True) + "id",
    ]
    out += [f"  {pad(str(i), 12, left=True)}{pad(token_label(c), 6, left=True)}{int(t)}"
            for i, (c, t) in enumerate(zip(tokens, result["ids"], strict=True))]

    def vectors(name: str, formula: str, meaning: str, m: torch.Tensor) -> None:
        n = m.shape[1]
        shown = f", first {dims} of {n} dims shown" if n > dims else ""
        out.extend(["", f"{name} = {formula}   ({T} x {n}{shown})", f"  {meaning}",
                    "  rows: position i and its character; columns: dimension d"])
        cols = list(range(min(n, dims)))
        out.extend(table(m[:, cols], tokens, [f"d{d}" for d in cols], [""] * len(cols)))

    def square(name: str, formula: str, meaning: str, m: torch.Tensor,
               extra: tuple[str, list[str]] | None = None) -> None:
        out.extend(["", f"{name} = {formula}   ({T} x {T})", f"  {meaning}",
                    "  rows: query position i (the prediction made after that character); "
                    "columns: key position j"])
        out.extend(table(m, tokens, [f"j={j}" for j in range(T)], keys, extra))

    vectors("x", "ln_1(residual stream)",
            f"the LayerNorm'd input of attention layer {result['layer']}: one C-vector per "
            "position, shared by all heads", result["x"])
    vectors("q", "x @ W_q", "query: what position i is looking for", result["q"])
    vectors("k", "x @ W_k", "key: what position j offers to be found by", result["k"])
    vectors("v", "x @ W_v", "value: what position j passes on when it is attended to",
            result["v"])
    square("scores", "q @ k^T", "dot product of query i and key j: large when they match",
           result["scores"])
    square("scaled", f"scores / sqrt(hs) = scores / {math.sqrt(hs):.2f}",
           "keeps the spread of the scores near 1 whatever hs is, so softmax does not "
           "saturate", result["scaled"])
    square("masked", "scaled, with -inf where j > i",
           "the causal mask: position i may not look at later characters; "
           "exp(-inf) = 0 in the softmax", result["masked"])
    sums = [f"{s:.4f}" for s in result["weights"].sum(dim=-1).tolist()]
    square("weights", "softmax(masked, over j)",
           "how much position i takes from each position j; each row sums to 1",
           result["weights"], extra=("row sum", sums))
    vectors("output", "weights @ v",
            "each position's weighted average of the values; the n_head outputs are put\n"
            "  side by side (T x C), and c_proj maps them into the residual stream",
            result["heads_out"])

    w = result["weights"]
    if T >= 2:  # where each row (query i >= 1) puts its largest weight: j = i - d
        offsets = [i - j for i, j in enumerate(w.argmax(dim=-1).tolist())][1:]
        counts = sorted(((offsets.count(d), d) for d in set(offsets)), key=lambda c: (-c[0], c[1]))
        d = counts[0][1]  # the offset most rows share
        named = {0: "itself", 1: "the previous " + result["unit"]}
        out += ["", f"where each row looks: the largest weight of row i (i = 1..{T - 1}) is on "
                    + ", ".join(f"j = {offset_name(o)} in {n} row{'s' * (n > 1)}" for n, o in counts)
                    + f"; most often {offset_name(d)}"
                    + (f" ({named[d]})" if d in named else ""),
                f"  weights on j = {offset_name(d)}: "
                + " ".join(number(w[i, i - d].item()) if i >= d else "-" for i in range(1, T))]
    soft = (F.softmax(result["masked"], dim=-1) - result["weights"]).abs().max().item()
    mixed = (result["weights"] @ result["v"] - result["heads_out"]).abs().max().item()
    out += ["", f"checks: softmax(masked) == weights (max |diff| {soft:.1e}); "
                f"weights @ v == the model's head output (max |diff| {mixed:.1e})"]
    return "\n".join(out)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=f"python -m {__package__}.inspect",
        description=__doc__.splitlines()[0].split(": ")[0] + ".",
        formatter_class=HelpFormatter,
    )
    p.add_argument("--ckpt", type=Path, default=Path("out") / __package__ / "best.pt",
                   help="checkpoint to load (best.pt: lowest val loss, or ckpt.pt beside it "
                        "when there is none)")
    p.add_argument("--prompt", default=None,
                   help=f"a few characters, at most {MAX_PROMPT}; if not given, the first 8 "
                        "characters of a line of held-out training text")
    p.add_argument("--layer", type=int, default=0, help="which block, counting from 0")
    p.add_argument("--head", type=int, default=0, help="which head in that block, from 0")
    p.add_argument("--dims", type=positive_int, default=SHOW_DIMS,
                   help="columns shown of x, q, k, v and the output")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda", "mps"],
                   help="where to run")
    add_init_from(p)
    return p


def inspect(args: argparse.Namespace) -> dict:
    model, tokenizer, ckpt, source = load_for_tool(args, pick_device(args.device))
    prompt = args.prompt
    if prompt is None:
        prompt = prompt_from_checkpoint(ckpt, min(model.config.block_size, 8))
    result = explain_head(model, tokenizer, prompt, args.layer, args.head)
    print(f"checkpoint: {source}" if ckpt else f"GPT-2: {source}")
    print(format_explanation(result, args.dims))
    return result


def main(argv: list[str] | None = None) -> None:
    run_cli(build_parser(), inspect, argv)


if __name__ == "__main__":
    sys.exit(main())
