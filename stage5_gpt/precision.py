"""Precision: the forward pass in 16-bit floats where that is fast (``--dtype``).

``torch.autocast`` runs the matrix products in a 16-bit type and keeps the rest
(softmax, LayerNorm, the loss, the weights and their updates) in float32:

- bfloat16 keeps float32's range (8 exponent bits) with fewer fraction bits (7 of 23):
  nothing overflows or underflows that would not in float32, so it needs nothing else.
  Recent GPUs (compute capability 8.0 and up) and CPUs with AVX512-BF16 or AMX compute
  it several times faster than float32; elsewhere it is emulated, and slower.
- float16 has 10 fraction bits but only 5 exponent bits: small gradients underflow to
  0. A gradient scaler multiplies the loss by a large factor before ``backward()`` and
  divides the gradients by it before the step (and skips a step whose gradients
  overflowed). Older GPUs such as the T4 compute float16, not bfloat16, fast.
- float32 on a GPU of compute capability 8.0 and up can multiply in TF32 (float32's
  range, 10 fraction bits): ``--dtype tf32``.

``--dtype auto`` takes bfloat16 where it is fast, float16 on a GPU without fast
bfloat16, and float32 elsewhere (an Apple GPU, a CPU without fast bfloat16). The
harness picks the precision once, as a run starts, and keeps it in ckpt.pt for --resume.
"""

from __future__ import annotations

import contextlib
import functools
import time

import torch

from .errors import UserError

DTYPES = ("auto", "float32", "bfloat16", "float16", "tf32")


@functools.cache
def bfloat16_is_fast(device: str) -> bool:
    """Does this GPU or CPU multiply bfloat16 fast? A GPU says whether it computes it
    natively (not by emulation); on a CPU we time it: at least twice float32's speed."""
    if device.startswith("cuda"):
        return torch.cuda.is_bf16_supported(including_emulation=False)
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


def autocast(dtype: str, device: str) -> tuple[contextlib.AbstractContextManager, str,
                                                torch.amp.GradScaler]:
    """For --dtype ``dtype`` on ``device``: the context to run the forward pass in, the
    precision's name, and the gradient scaler (enabled for float16 only; otherwise its
    methods pass the loss and the step through unchanged)."""
    kind = device.split(":")[0]
    if dtype == "auto":
        dtype = ("bfloat16" if bfloat16_is_fast(device)
                 else "float16" if kind == "cuda" else "float32")
    needs = {"bfloat16": ("cpu", "cuda"), "float16": ("cuda",), "tf32": ("cuda",)}
    if kind not in needs.get(dtype, (kind,)):
        where = " or ".join("a CPU" if k == "cpu" else "a CUDA GPU" for k in needs[dtype])
        raise UserError(f"--dtype {dtype} is for {where}, not {device}; use --dtype float32 "
                        "(or auto).")
    scaler = torch.amp.GradScaler(kind if kind in ("cpu", "cuda") else "cpu",
                                  enabled=dtype == "float16")
    if dtype in ("bfloat16", "float16"):
        return torch.autocast(kind, dtype=getattr(torch, dtype)), dtype, scaler
    if dtype == "tf32":  # float32 weights and activations, matrix products in TF32
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    return contextlib.nullcontext(), dtype, scaler
