"""The training harness: the bookkeeping around the training loop.

Skip this file on a first reading. ``train.py`` is the lesson; its loop calls this
module for each phase it does not teach, in this order::

    run = Run(args, parser, RESUMED)  # check --out-dir, load the data, read a --resume
    net = run.start(model, optimizer) # restore a --resume, pick threads and precision
    for step in run.steps():          # 0 .. --max-iters - 1; stops early on Ctrl-C
        if run.evaluation_due(step):
            run.evaluate()            # losses on fixed batches -> log.jsonl, ckpt.pt, best.pt
        xb, yb = run.get_batch()      # then forward (with run.precision), run.check(loss), ...
    run.finish()                      # final losses, loss.png, metrics.json, a sample

Besides: ``--resume`` continues a run exactly (weights, optimizer, random generators,
loss history, and the settings it started with); a nan or inf loss stops the run
before anything is saved; Ctrl-C stops at the next step and saves; the CPU threads
are timed once and kept. What a run prints and writes about itself: report.py.

Stage 5 adds the precision of the forward pass (--dtype, precision.py), and training
in several processes: under ``torchrun --nproc_per_node N`` each process takes its
share of every batch, PyTorch's DistributedDataParallel averages their gradients in
``backward()``, and only the first process (rank 0) prints and writes files.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import torch
from tqdm import tqdm

from .checkpoint import (
    check_vocab,
    load_resumable,
    remove_stale_tmp,
    restore_rng,
    rng_state,
    save_checkpoint,
)
from .cli import check_out_dir, pick_device
from .data import Corpus, check_length, get_batch
from .errors import UserError
from .precision import autocast
from .report import describe, sample_text, write_results
from .tokenizer import CharTokenizer


@torch.no_grad()
def estimate_loss(model: torch.nn.Module, splits: dict[str, torch.Tensor],
                  args: argparse.Namespace, device: str) -> dict[str, float]:
    """Mean loss over ``eval_iters`` batches per split; the same batches every call."""
    model.eval()
    out = {}
    for name, data in splits.items():
        g = torch.Generator().manual_seed(args.seed)
        losses = [model(*get_batch(data, args.batch_size, args.block_size, g, device))[1].item()
                  for _ in range(args.eval_iters)]
        out[name] = sum(losses) / len(losses)
    model.train()
    return out


def pick_threads(threads: int | None, one_step: Callable[[], object], why: str = "--threads") -> str:
    """Set PyTorch's CPU threads for the whole run; returns the line to print. More threads
    are faster on an idle machine, but far slower when another program keeps a core busy:
    we time ``one_step`` (forward and backward) at each count once and keep the fastest.
    It never changes (another count sums in another order): --threads N repeats the run."""
    if threads:
        torch.set_num_threads(threads)
        return f"threads: {threads} ({why})"
    top = torch.get_num_threads()
    counts = sorted({1, top} | {2 ** i for i in range(1, 8) if 2 ** i < top})
    if len(counts) == 1:
        return "threads: 1"
    ms = {}
    for n in counts:
        torch.set_num_threads(n)
        one_step()  # warm-up
        t0 = time.perf_counter()
        for _ in range(3):
            one_step()
        ms[n] = (time.perf_counter() - t0) / 3 * 1000
    best = min(ms, key=ms.get)
    torch.set_num_threads(best)
    timed = ", ".join(f"{n}: {t:.1f} ms" for n, t in ms.items())
    return f"threads: {best} (timed per step: {timed}; --threads {best} repeats this run)"


class StopFlag:
    """Ctrl-C sets a flag; the loop stops at the next step boundary, so the saved model
    and optimizer are always a consistent, resumable pair. A second Ctrl-C stops at once.
    Under torchrun every process stops at the same step: ``stop`` asks them all."""

    def __init__(self, world: int, device: str):
        self.world, self.device = world, device

    def __enter__(self):
        self.pressed, self.previous = False, signal.signal(signal.SIGINT, self._handler)
        return self

    def _handler(self, signum, frame):
        if self.pressed and self.world == 1:
            raise KeyboardInterrupt
        self.pressed = True

    @property
    def stop(self) -> bool:
        if self.world == 1:
            return self.pressed
        flag = torch.tensor([float(self.pressed)], device=self.device)  # NCCL: on the GPU
        torch.distributed.all_reduce(flag, op=torch.distributed.ReduceOp.MAX)
        return bool(flag.item())

    def __exit__(self, *exc):
        signal.signal(signal.SIGINT, self.previous)


def start_distributed(device: str, batch_size: int) -> tuple[int, int, str]:
    """Under torchrun: join the process group; returns (rank, world size, device). A
    plain ``python -m`` run is rank 0 of a world of 1. Every process draws the same batch
    and trains on its slice: N processes at --batch-size B take the steps of one at B."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world == 1:
        return 0, 1, device
    if batch_size % world:
        raise UserError(f"--batch-size {batch_size} must be a multiple of the {world} processes "
                        "torchrun started: each takes an equal share of every batch.")
    if device == "cuda":  # one GPU per process
        here, gpus = int(os.environ.get("LOCAL_WORLD_SIZE", world)), torch.cuda.device_count()
        if here > gpus:
            raise UserError(f"torchrun started {here} processes on this machine, which has {gpus} "
                            f"GPU{'s' * (gpus != 1)}: pass --nproc_per_node {gpus} or fewer (one "
                            "process per GPU).")
        device = f"cuda:{int(os.environ['LOCAL_RANK'])}"
        torch.cuda.set_device(device)
    if not torch.distributed.is_initialized():
        torch.distributed.init_process_group("nccl" if device.startswith("cuda") else "gloo")
    return torch.distributed.get_rank(), world, device


class Run:
    """One training run; see the module docstring for the order of the calls. ``args``
    holds the settings it trains with: those given, or a --resume's own."""

    def __init__(self, args: argparse.Namespace, parser: argparse.ArgumentParser,
                 resumed: tuple[str, ...]):
        self.out, self.bar = check_out_dir(Path(args.out_dir)), None  # bar: while steps() runs
        self.ckpt_path, self.resumed = self.out / "ckpt.pt", resumed
        self.rank, self.world, self.device = start_distributed(pick_device(args.device),
                                                               args.batch_size)
        self.main = self.rank == 0  # the process that prints and writes files
        if self.main:
            remove_stale_tmp(self.out)
        self.resume = None
        if args.resume:  # the checkpoint, and the settings it continues with (checkpoint.py)
            self.resume, args = load_resumable(self.ckpt_path, args, parser, resumed, self.say)
        self.args = args
        torch.manual_seed(args.seed)
        vocab = CharTokenizer(self.resume["vocab"]) if self.resume else None
        self.corpus = Corpus.load(args.data, args.val_fraction, vocab)
        if self.resume:
            check_vocab(self.resume, CharTokenizer.from_text(self.corpus.text), self.ckpt_path)
        check_length(self.corpus.train, args.block_size, "train")
        check_length(self.corpus.val, args.block_size, "val")
        self.vocab_size = self.corpus.tokenizer.vocab_size
        self.batches = torch.Generator().manual_seed(args.seed)
        self.history, self.best_val, self.best_step, self.step = [], float("inf"), None, 0

    def say(self, text: str) -> None:
        """Print a line (only the first process does), above the progress bar if any."""
        if self.main:
            self.bar.write(text) if self.bar is not None else print(text)

    def start(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> torch.nn.Module:
        """Restore a --resume's weights, optimizer and random generators, or print a sample
        of the untrained model; say what trains; pick the CPU threads and the precision.
        Returns the module to train: ``model``, or under torchrun its DDP wrapper."""
        self.model, self.optimizer, r = model, optimizer, self.resume
        self.params = sum(p.numel() for p in model.parameters())
        if r:
            model.load_state_dict(r["model"])
            optimizer.load_state_dict(r["optimizer"])
            restore_rng(r["rng"], self.batches)
            self.history, self.best_val, self.step = r["history"], r["best_val"], r["step"]
            self.best_step = r.get("best_step")
            self.say(f"resuming from {self.ckpt_path} at step {self.step} "
                     f"(best val {self.best_val:.4f})")
        for line in describe(self, model):  # report.py: the parameters, part by part
            self.say(line)
        if self.world > 1:
            self.say(f"{self.world} processes, each with 1/{self.world} of every batch")
        own = self.args.dtype == "auto" and r and r.get("dtype")  # auto's choice, kept
        self.precision, self.dtype, self.scaler = autocast(own or self.args.dtype, self.device)
        if r and r.get("scaler"):  # float16: the loss scale the run had found
            self.scaler.load_state_dict(r["scaler"])
        why = ("the run's own, from ckpt.pt" if own else f"--dtype {self.args.dtype}" + (
            f"; --dtype {self.dtype} repeats this run" if self.args.dtype == "auto" else ""))
        self.say(f"precision: {self.dtype} forward pass ({why})")
        if self.device == "cpu":  # a --resume keeps the run's own count: another sums otherwise
            own = not self.args.threads and r and r.get("threads")
            self.say(pick_threads(self.args.threads or own, self._timing_step,
                                  "the run's own, from ckpt.pt" if own else "--threads"))
        self.threads = torch.get_num_threads()
        if not r:
            self.say(f"sample before training:\n{sample_text(self)}\n")
        if self.main:
            self.out.mkdir(parents=True, exist_ok=True)
            self.log = (self.out / "log.jsonl").open("a" if r else "w", encoding="utf-8",
                                                     buffering=1)
        if self.world == 1:
            return model
        return torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[self.device] if self.device.startswith("cuda") else None)

    def _timing_step(self) -> None:
        """A forward and backward pass that changes nothing: not the weights, not the RNGs."""
        x, y = get_batch(self.corpus.train, self.args.batch_size // self.world,
                         self.args.block_size, torch.Generator().manual_seed(0), self.device)
        with torch.random.fork_rng(devices=[]), self.precision:
            self.model(x, y)[1].backward()
        self.model.zero_grad(set_to_none=True)

    def steps(self) -> Iterator[int]:
        """The step numbers still to train, under a progress bar; Ctrl-C ends them early."""
        self.t0 = time.time()
        self.bar = tqdm(range(self.step, self.args.max_iters), desc="training", unit="step",
                        dynamic_ncols=True, disable=not self.main or not sys.stderr.isatty())
        with StopFlag(self.world, self.device) as flag, self.bar:
            for step in self.bar:
                if flag.stop:
                    self.say(f"Ctrl-C: stopping at step {step} and saving (continue with --resume)")
                    break
                yield step
                self.step = step + 1
        self.bar, self.wall = None, time.time() - self.t0

    def evaluation_due(self, step: int) -> bool:
        """Every --eval-interval steps, unless this step was evaluated before a --resume."""
        done = self.history and self.history[-1]["step"] == step
        return step % self.args.eval_interval == 0 and not done

    def get_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        """A random (B, T) batch of inputs and targets from the training text (to a GPU from
        pinned memory: the copy runs while the GPU computes); under torchrun, this process's
        share of it."""
        x, y = get_batch(self.corpus.train, self.args.batch_size, self.args.block_size,
                         self.batches)
        share = len(x) // self.world
        x, y = (t[self.rank * share:(self.rank + 1) * share] for t in (x, y))
        if self.device.startswith("cuda"):
            return tuple(t.pin_memory().to(self.device, non_blocking=True) for t in (x, y))
        return x.to(self.device), y.to(self.device)

    def save(self, path: Path) -> Path:
        args = {k: str(v) if isinstance(v, Path) else v for k, v in vars(self.args).items()}
        return save_checkpoint(path, self.model, self.corpus.tokenizer, self.step,
                               optimizer=self.optimizer.state_dict(), args=args,
                               rng=rng_state(self.batches),
                               history=self.history, best_val=self.best_val,
                               best_step=self.best_step, threads=self.threads, dtype=self.dtype,
                               scaler=self.scaler.state_dict())

    def evaluate(self) -> dict:
        """Estimate the losses, print and log them, keep the best checkpoint and the latest."""
        losses = estimate_loss(self.model, {"train": self.corpus.train, "val": self.corpus.val},
                               self.args, self.device)
        if not all(math.isfinite(v) for v in losses.values()):
            self.diverged(f"{losses}")
        row = {"step": self.step, **losses, "lr": self.optimizer.param_groups[0]["lr"],
               "time": round(time.time() - self.t0, 2)}
        self.history.append(row)
        best = losses["val"] < self.best_val
        if best:
            self.best_val, self.best_step = losses["val"], self.step
        if self.main:
            self.log.write(json.dumps(row) + "\n")  # line-buffered: on disk at once
            if best:
                self.save(self.out / "best.pt")
            self.save(self.ckpt_path)
        self.say(f"step {self.step:5d}: train loss {losses['train']:.4f}, "
                 f"val loss {losses['val']:.4f}")
        return losses

    def diverged(self, value: str) -> None:
        raise UserError(f"the loss became {value} at step {self.step}: training diverged. The "
                        f"last good checkpoint is {self.ckpt_path}. Try a lower --lr (now "
                        f"{self.args.lr}).")

    def check(self, loss: torch.Tensor) -> None:
        """The divergence guard: stop on a nan or inf loss, before anything is saved. Reading
        a loss waits for a GPU to finish the step: there only every 25th step is read (an
        evaluation stops a nan in between before it is saved)."""
        if self.device != "cpu" and self.step % 25:
            return
        value = loss.item()
        if not math.isfinite(value):
            self.diverged(str(value))
        if self.bar is not None:
            self.bar.set_postfix(loss=f"{value:.3f}", refresh=False)

    def finish(self) -> dict:
        """The final losses and checkpoints; report.py writes and prints the rest."""
        done = self.history and self.history[-1]["step"] == self.step
        losses = self.history[-1] if done else self.evaluate()
        if self.world > 1:
            torch.distributed.barrier()  # every process done before any leaves the group
            torch.distributed.destroy_process_group()
        if not self.main:
            return {}
        self.log.close()
        return write_results(self, losses)
