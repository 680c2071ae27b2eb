"""Small helpers shared by this stage's command-line tools."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import torch

from .errors import UserError


def positive_int(s: str) -> int:
    v = int(s)
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1, got {s}")
    return v


def non_negative_int(s: str) -> int:
    v = int(s)
    if v < 0:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 0, got {s}")
    return v


def positive_float(s: str) -> float:
    v = float(s)
    if not v > 0 or math.isinf(v):
        raise argparse.ArgumentTypeError(f"must be a number > 0, got {s}")
    return v


def pick_device(name: str) -> str:
    """'auto' -> cuda if present, else mps (Apple silicon), else cpu."""
    available = {"cpu": True, "cuda": torch.cuda.is_available(),
                 "mps": torch.backends.mps.is_available()}
    if name == "auto":
        return "cuda" if available["cuda"] else "mps" if available["mps"] else "cpu"
    if not available.get(name, False):
        raise UserError(f"--device {name} is not available on this machine; "
                        "use --device auto (or cpu).")
    return name


def check_out_dir(path: Path) -> Path:
    """Fail before training, not after it, if the output folder cannot be made."""
    if path.exists() and not path.is_dir():
        raise UserError(f"--out-dir {path} exists and is not a folder; pick another path.")
    return path
