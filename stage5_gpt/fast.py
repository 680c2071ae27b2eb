"""Speed-ups that change no idea: the same computations, faster on a CPU.

Skip this file on a first reading. ``model.py`` is written to be read, and
``train.py`` calls what is here once, with a comment saying what it buys; the
tests check that each fast path computes what the plain one does.

- ``FastDropout``: dropout with a cheaper random mask. PyTorch's CPU dropout
  draws one random number per element, which took a quarter of a small model's
  training step here; ``python tools/bench.py`` measures what this saves.
- ``attention``: model.py's attention by the fastest route (fused or batched kernels);
- ``autocast``: bfloat16 matrix products where they are fast (``--dtype auto``);
  ``forward_precision`` says which it chose and keeps the choice for ``--resume``.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import time
from collections.abc import Callable

import torch
from torch import nn
from torch.nn import functional as F

from .errors import UserError


# --8<-- [start:dropout]
def bit_dropout(x: torch.Tensor, p: float) -> torch.Tensor:
    """Dropout with 64 random bits drawn at a time, used as four 16-bit numbers r: an
    element is dropped when r < p * 65536. The same dropout, with p rounded to a multiple
    of 1/65536; the kept values are scaled by the exact 1 / (1 - p'), so the expectation
    is unchanged."""
    cut = round(p * 65536)  # drop when a 16-bit number falls below this
    n = x.numel()
    bits = torch.empty((n + 3) // 4, dtype=torch.int64).random_(-(2**63), 2**63 - 1)
    r = bits.view(torch.int16)[:n].view(x.shape)  # uniform on -32768 .. 32767
    return x * (r >= cut - 32768) * (65536 / (65536 - cut))


class FastDropout(nn.Dropout):
    """``nn.Dropout`` that uses ``bit_dropout`` while training on a CPU."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training and self.p > 0 and x.is_cpu:
            return bit_dropout(x, self.p)
        return super().forward(x)
# --8<-- [end:dropout]


def use_fast_dropout(model: nn.Module) -> nn.Module:
    """Swap every ``nn.Dropout`` inside ``model`` for a ``FastDropout`` of the same p."""
    for module in list(model.modules()):
        for name, child in module.named_children():
            if type(child) is nn.Dropout:
                setattr(module, name, FastDropout(child.p, child.inplace).train(child.training))
    return model


# --8<-- [start:attention]
def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dropout_p: float = 0.0,
              route: str | None = None) -> torch.Tensor:
    """The causal attention of model.py for q (B, nh, T, hs), k and v (B, nh, S, hs), whose
    T queries are the last T of S positions (S > T with a KV cache). ``route``: "fused"
    (``F.scaled_dot_product_attention``: leaner, faster on a GPU) or "batched" (three
    batched kernels, which measured faster on a CPU); None picks by device."""
    T, S = q.shape[2], k.shape[2]
    if S != T:  # query i sits at position S - T + i: it sees keys 0 .. S - T + i
        allowed = torch.ones(T, S, dtype=torch.bool, device=q.device).tril(S - T)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
    if (route or ("batched" if q.is_cpu else "fused")) == "fused":
        return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=True)
    B, nh, _, hs = q.shape
    bias = torch.full((T, T), float("-inf"), device=q.device).triu(1)  # -inf above the diagonal
    att = torch.baddbmm(bias.expand(B * nh, T, T), q.reshape(B * nh, T, hs),
                        k.reshape(B * nh, T, hs).transpose(1, 2), alpha=hs ** -0.5)
    att = F.softmax(att, dim=-1)  # (B * nh, T, T)
    if dropout_p > 0:
        att = bit_dropout(att, dropout_p) if att.is_cpu else F.dropout(att, dropout_p)
    return torch.bmm(att, v.reshape(B * nh, T, hs)).view(B, nh, T, hs)
# --8<-- [end:attention]


# --8<-- [start:precision]
@functools.cache
def bfloat16_is_fast(device: str) -> bool:
    """Is a bfloat16 matrix product at least twice as fast as a float32 one here? Recent
    GPUs, and CPUs with AVX512-BF16 or AMX, multiply bfloat16 (16-bit floats with float32's
    range) several times faster; elsewhere it is slower. On a CPU we time it."""
    if device.startswith("cuda"):
        return torch.cuda.is_bf16_supported()
    if device != "cpu":
        return False
    g = torch.Generator().manual_seed(0)  # not the global generator: training's RNG stays
    a, b = torch.randn(256, 512, generator=g), torch.randn(512, 512, generator=g)

    def seconds(x: torch.Tensor, y: torch.Tensor) -> float:
        x @ y  # warm up
        t0 = time.perf_counter()
        for _ in range(10):
            x @ y
        return time.perf_counter() - t0

    return 2 * seconds(a.bfloat16(), b.bfloat16()) < seconds(a, b)


def autocast(dtype: str, device: str) -> tuple[contextlib.AbstractContextManager, str]:
    """The context to run the forward pass in, and its precision's name, for --dtype
    ``dtype`` (auto, float32 or bfloat16) on ``device``."""
    kind = device.split(":")[0]
    if dtype == "bfloat16" and kind not in ("cpu", "cuda"):
        raise UserError(f"--dtype bfloat16 is for a CPU or a CUDA GPU, not {device}; "
                        "use --dtype float32 (or auto).")
    if dtype == "bfloat16" or (dtype == "auto" and bfloat16_is_fast(device)):
        return torch.autocast(kind, dtype=torch.bfloat16), "bfloat16"
    return contextlib.nullcontext(), "float32"


def forward_precision(args: argparse.Namespace, device: str,
                      say: Callable[[str], None]) -> contextlib.AbstractContextManager:
    """``autocast`` for --dtype, and the line that says what it chose and how to repeat it.
    What auto chose goes into ``args``: ckpt.pt keeps it, and --resume takes it."""
    context, dtype = autocast(args.dtype, device)
    chose = f"; --dtype {dtype} repeats this run" if args.dtype == "auto" else ""
    say(f"precision: {dtype} forward pass (--dtype {args.dtype}{chose})")
    args.dtype = dtype
    return context
# --8<-- [end:precision]
