"""Small helpers shared by this stage's command-line tools."""

from __future__ import annotations

import argparse
import math

import torch


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
    if name != "auto":
        return name
    if torch.cuda.is_available():
        return "cuda"
    if torch.backends.mps.is_available():
        return "mps"
    return "cpu"
