"""Save and load training checkpoints safely.

A checkpoint is a plain dict of tensors, numbers, strings and lists, so it loads
with ``torch.load(weights_only=True)``: no pickled code runs when you open a file
somebody sent you. It records which stage wrote it, so a stage-2 checkpoint fed
to stage 3 gets a clear message instead of a wall of missing-key errors.
"""

from __future__ import annotations

import os
from dataclasses import asdict
from pathlib import Path

import torch

from .errors import UserError
from .model import GPT, GPTConfig
from .tokenizer import CharTokenizer

FORMAT = "gpt-stages-checkpoint"
STAGE = __package__  # e.g. "stage2_bigram"


# --8<-- [start:save]
def save_checkpoint(path: str | Path, model: torch.nn.Module, tokenizer: CharTokenizer,
                    step: int, **extra: object) -> Path:
    """Write atomically: a crash mid-write leaves the previous checkpoint intact."""
    path = Path(path)
    payload = {
        "format": FORMAT,
        "version": 1,
        "stage": STAGE,
        "config": asdict(model.config),
        "vocab": tokenizer.chars,
        "model": model.state_dict(),
        "step": step,
        **extra,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    # A name of our own (not tempfile.mkstemp, which makes the file private to us):
    # the checkpoint gets the usual permissions.
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        torch.save(payload, tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path
# --8<-- [end:save]


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict:
    """Read and validate a checkpoint written by this stage."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"no checkpoint at {path}. Train first: python -m {STAGE}.train")
    try:
        ckpt = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as e:  # torch raises many types for a damaged zip or pickle
        raise UserError(
            f"{path} is not a readable checkpoint (corrupted or truncated?): "
            f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}. "
            f"Delete it and train again with python -m {STAGE}.train."
        ) from None
    if not isinstance(ckpt, dict) or ckpt.get("format") != FORMAT:
        raise UserError(f"{path} is not a checkpoint of this tutorial (no '{FORMAT}' header).")
    if ckpt.get("stage") != STAGE:
        raise UserError(
            f"{path} was written by {ckpt.get('stage')}, but this is {STAGE}: each stage has "
            f"its own model. Use python -m {ckpt.get('stage')}.sample for it, or train this "
            f"stage with python -m {STAGE}.train."
        )
    return ckpt


def load_model(path: str | Path, device: str | torch.device = "cpu"
               ) -> tuple[GPT, CharTokenizer, dict]:
    """Checkpoint file -> (model in eval mode, its tokenizer, the raw checkpoint)."""
    ckpt = load_checkpoint(path, map_location=device)
    try:
        tokenizer = CharTokenizer(ckpt["vocab"])
        config = GPTConfig(**ckpt["config"])
        if config.vocab_size != tokenizer.vocab_size:
            raise ValueError(f"config vocab_size {config.vocab_size} != {tokenizer.vocab_size}")
        model = GPT(config)
        model.load_state_dict(ckpt["model"])
    except (TypeError, ValueError, RuntimeError, KeyError) as e:
        raise UserError(f"{path} does not match this stage's model: {str(e)[:300]}") from None
    return model.to(device).eval(), tokenizer, ckpt


def check_vocab(ckpt: dict, tokenizer: CharTokenizer, path: str | Path = "checkpoint") -> None:
    """Refuse to mix a checkpoint with data whose characters map to other ids."""
    if ckpt["vocab"] != tokenizer.chars:
        ours, theirs = set(tokenizer.chars), set(ckpt["vocab"])
        raise UserError(
            f"{path} was trained on another vocabulary ({len(theirs)} characters; "
            f"{len(theirs - ours)} not in this data, {len(ours - theirs)} new in this data). "
            "Use the same --data as the checkpoint, or train a new one in another --out-dir."
        )


def default_checkpoint(path: Path | None = None) -> Path:
    """The checkpoint a tool reads when not told: best.pt (lowest val loss) in
    ``out/<stage>/``, or the latest ckpt.pt beside it when there is no best.pt."""
    path = path or Path("out") / STAGE / "best.pt"
    if path.name == "best.pt" and not path.exists() and (path.parent / "ckpt.pt").exists():
        return path.parent / "ckpt.pt"
    return path


def remove_stale_tmp(folder: Path) -> list[Path]:
    """Delete half-written ``*.pt.<pid>.tmp`` files whose writer is no longer running."""
    removed = []
    for tmp in folder.glob("*.pt.*.tmp"):
        pid = tmp.suffixes[-2].lstrip(".")
        if pid.isdigit() and not _running(int(pid)):
            tmp.unlink(missing_ok=True)
            removed.append(tmp)
    return removed


def _running(pid: int) -> bool:
    if pid == os.getpid():
        return False  # our own leftover from an earlier run in this process
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # alive, another user's
    return True

