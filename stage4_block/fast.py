"""Speed-ups that change no idea: the same computations, faster on a CPU.

Skip this file on a first reading. ``model.py`` is written to be read, and
``train.py`` calls what is here once, with a comment saying what it buys; the
tests check that each fast path computes what the plain one does.

- ``FastDropout``: dropout with a cheaper random mask. PyTorch's CPU dropout
  draws one random number per element, which took a quarter of a small model's
  training step here; ``python tools/bench.py`` measures what this saves.
"""

from __future__ import annotations

import torch
from torch import nn


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
