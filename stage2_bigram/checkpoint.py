"""Save and load training checkpoints safely.

A checkpoint is a plain dict of tensors, numbers, strings and lists, so it loads
with ``torch.load(weights_only=True)``: no pickled code runs when you open a file
somebody sent you. It records which stage wrote it, so a stage-2 checkpoint fed
to stage 3 gets a clear message instead of a wall of missing-key errors.
"""

from __future__ import annotations

import argparse
import ctypes
import os
from dataclasses import asdict
from pathlib import Path

import torch

from .download import replace
from .errors import UserError
from .model import LanguageModel, ModelConfig
from .tokenizer import CharTokenizer

FORMAT = "gpt-stages-checkpoint"
STAGE = __package__  # e.g. "stage2_bigram"


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
        replace(tmp, path)
    except (OSError, RuntimeError) as e:  # a full disk: torch.save raises a RuntimeError
        tmp.unlink(missing_ok=True)
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise UserError(f"cannot write {path} ({reason}). Is the disk full? Free some space or "
                        f"give another --out-dir; {path.name} on disk is the last one written "
                        "whole.") from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


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


def rng_state(batches: torch.Generator) -> dict:
    """Every random generator a run draws from: the batches', and PyTorch's own (weights,
    dropout) on the CPU and on a GPU, so that --resume draws what the run would have."""
    state = {"torch": torch.get_rng_state(), "batches": batches.get_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    if torch.backends.mps.is_available():
        state["mps"] = torch.mps.get_rng_state()
    return state


def restore_rng(state: dict, batches: torch.Generator) -> None:
    torch.set_rng_state(state["torch"])
    batches.set_state(state["batches"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    if "mps" in state and torch.backends.mps.is_available():
        torch.mps.set_rng_state(state["mps"])


RESUMABLE = ("args", "vocab", "optimizer", "rng", "history", "best_val")  # what --resume reads


def load_resumable(path: Path, args: argparse.Namespace, parser: argparse.ArgumentParser,
                   resumed: tuple[str, ...], say=print) -> tuple[dict, argparse.Namespace]:
    """What --resume continues: the checkpoint (with the optimizer, the random generators
    and the loss history besides the weights) and the run's settings (resumed_settings)."""
    ckpt = load_checkpoint(path)
    missing = [k for k in RESUMABLE if k not in ckpt]
    if missing:
        raise UserError(f"{path} cannot be resumed: it has no {', '.join(missing)}. Train a new "
                        "run in another --out-dir.")
    return ckpt, resumed_settings(args, vars(parser.parse_args([])), resumed, ckpt["args"], say)


def resumed_settings(args: argparse.Namespace, defaults: dict, resumed: tuple[str, ...],
                     saved: dict, say=print) -> argparse.Namespace:
    """The settings a --resume continues with: the checkpoint's for each flag in ``resumed``
    (one given now must agree); --max-iters may change. A new namespace: ``args`` stays."""
    merged = dict(vars(args))
    for k in resumed:
        if merged[k] != defaults[k] and merged[k] != saved.get(k, merged[k]):
            raise UserError(f"--{k.replace('_', '-')} {merged[k]} conflicts with the checkpoint's "
                            f"{saved[k]}: --resume continues the run with the settings it "
                            "started with. Drop the flag, or train a new run in another --out-dir.")
        merged[k] = saved.get(k, merged[k])
    if args.max_iters == defaults["max_iters"]:  # not given: finish the run as planned
        merged["max_iters"] = saved["max_iters"]
    elif args.max_iters != saved["max_iters"]:
        say(f"note: the run was planned for --max-iters {saved['max_iters']}; it now runs to "
              f"{args.max_iters}, and a schedule over the run's length follows the new one.")
    return argparse.Namespace(**merged)


def load_model(path: str | Path, device: str | torch.device = "cpu"
               ) -> tuple[LanguageModel, CharTokenizer, dict]:
    """Checkpoint file -> (model in eval mode, its tokenizer, the raw checkpoint)."""
    ckpt = load_checkpoint(path, map_location=device)
    try:
        tokenizer = CharTokenizer(ckpt["vocab"])
        config = ModelConfig(**ckpt["config"])
        if config.vocab_size != tokenizer.vocab_size:
            raise ValueError(f"config vocab_size {config.vocab_size} != {tokenizer.vocab_size}")
        model = LanguageModel(config)
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
    if os.name == "nt":  # on Windows, os.kill(pid, 0) would send Ctrl-C to that process
        return _running_on_windows(pid)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # alive, another user's
    return True


def _running_on_windows(pid: int, kernel32=None) -> bool:
    """Whether process ``pid`` is alive, asked of Windows itself (``kernel32``: for tests)."""
    kernel32 = kernel32 or ctypes.windll.kernel32
    handle = kernel32.OpenProcess(0x1000, False, pid)  # PROCESS_QUERY_LIMITED_INFORMATION
    if not handle:
        return False  # no such process (or one we may not even look at: not ours)
    try:
        code = ctypes.c_ulong()
        kernel32.GetExitCodeProcess(handle, ctypes.byref(code))
        return code.value == 259  # STILL_ACTIVE
    finally:
        kernel32.CloseHandle(handle)
