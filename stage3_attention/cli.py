"""Small helpers shared by this stage's command-line tools."""

from __future__ import annotations

import argparse
import math
import os
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import torch

from .errors import UserError, utf8_output


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """``--help`` shows each flag's default, unless its help says it already or it is None."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default is None or "(default:" in (action.help or ""):
            return action.help  # e.g. --threads: "(default: the fastest count, ...)"
        return super()._get_help_string(action)

    def _split_lines(self, text: str, width: int) -> list[str]:
        # argparse wraps after hyphens too, which cuts flag names (--eval-/interval)
        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False)


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


MAX_LR = 1e30  # Adam's first step is about lr / 0.1: near 1e38 it overflows float32 in torch


def learning_rate(s: str) -> float:
    """A learning rate: > 0 and at most MAX_LR (far beyond any useful value)."""
    v = positive_float(s)
    if v > MAX_LR:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_LR:g}, got {s}")
    return v


def non_negative_float(s: str) -> float:
    v = float(s)
    if not v >= 0 or math.isinf(v):
        raise argparse.ArgumentTypeError(f"must be a number >= 0, got {s}")
    return v


def unit_interval(s: str) -> float:
    """[0, 1): dropout probabilities, Adam's betas."""
    v = float(s)
    if not 0 <= v < 1:
        raise argparse.ArgumentTypeError(f"must be a number in [0, 1), got {s}")
    return v


def open_fraction(s: str) -> float:
    """(0, 1): the share of the text held out for validation."""
    v = float(s)
    if not 0 < v < 1:
        raise argparse.ArgumentTypeError(f"must be a number between 0 and 1 (exclusive), got {s}")
    return v


def temperature(s: str) -> float:
    """>= 0 and finite: 0 means greedy."""
    v = float(s)
    if not v >= 0 or math.isinf(v):
        raise argparse.ArgumentTypeError(f"must be a number >= 0 (0 means greedy), got {s}")
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
    existing = path
    while not existing.exists():  # the nearest folder that exists: we will create the rest
        existing = existing.parent
    if not existing.is_dir():
        raise UserError(f"--out-dir {path} cannot be made: {existing} is a file, not a folder. "
                        "Pick another path.")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise UserError(f"--out-dir {path} cannot be made: {existing} is not writable for you. "
                        "Pick a folder you can write to.")
    return path


def run_cli(parser: argparse.ArgumentParser, work: Callable[[argparse.Namespace], object],
            argv: list[str] | None = None) -> None:
    """Parse ``argv`` and run ``work(args)``: a ``UserError`` becomes one ``error:`` line
    and exit code 2; a run that Ctrl-C stopped (after saving) exits 130, the shell's code
    for Ctrl-C, as under torchrun; a closed pipe (``... | head``) ends it quietly."""
    utf8_output()
    args = parser.parse_args(argv)
    try:
        result = work(args)
        sys.stdout.flush()
        if isinstance(result, dict) and result.get("interrupted"):
            sys.exit(130)
    except UserError as e:
        parser.exit(2, f"error: {e}\n")
    except BrokenPipeError:
        # The reader went away. Point stdout at /dev/null so Python's own flush at exit
        # does not raise the same error again, then stop like other Unix tools do.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(0)
