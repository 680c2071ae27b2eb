"""Precision: the forward pass in bfloat16 where that is fast (``--dtype auto``).

bfloat16 keeps float32's range (8 exponent bits) with fewer fraction bits (7 of 23),
so it needs no loss scaling; ``torch.autocast`` runs the matrix products in it and
keeps the rest (softmax, LayerNorm, the loss, the weights) in float32. The harness
picks the precision once, as a run starts, and keeps it in ckpt.pt for --resume.
"""

from __future__ import annotations

import contextlib
import functools
import time

import torch

from .errors import UserError


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


