"""The training harness: the bookkeeping around the training loop.

Skip this file on a first reading. ``train.py`` is the lesson: it builds the model
and runs the loop, and the loop calls this module for each phase it does not teach,
in the order it happens::

    run = Run(args, parser)          # check --out-dir, load the data, restore a --resume
    net = run.start(model, optimizer)
    for step in run.steps():         # 0 .. --max-iters - 1; stops early on Ctrl-C
        if run.evaluation_due(step):
            run.evaluate()           # losses on fixed batches -> log.jsonl, ckpt.pt, best.pt
        xb, yb = run.get_batch()     # then forward, run.check(loss), backward, step
    run.finish()                     # final losses, loss.png, metrics.json, a sample

It is the same file, byte for byte, in every stage from 2 to 5, so the diffs
between stages show only the model. What it does besides:

- ``--resume``: restores the flags of the data, model and training groups, the
  weights, the optimizer, the random number generators and the loss history, so
  the run continues exactly where it stopped;
- a divergence guard: a loss that is nan or inf stops the run before anything is
  saved, so the last checkpoint on disk is a good one;
- Ctrl-C stops at the next step boundary and saves a resumable checkpoint;
- the number of CPU threads: timed once before training (``pick_threads``), kept
  for the whole run and printed, so ``--threads N`` repeats the run exactly;
- at the end, "is my loss normal?" (``reference.py``);
- under ``torchrun --nproc_per_node N``: data-parallel training with PyTorch's
  DistributedDataParallel, each process taking its share of every batch; only the
  first process (rank 0) prints and writes files.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import torch
from tqdm import tqdm

from .checkpoint import check_vocab, load_checkpoint, remove_stale_tmp, save_checkpoint
from .cli import check_out_dir, pick_device
from .data import Corpus, check_length, get_batch
from .errors import UserError
from .plots import plot_losses
from .reference import reference_report, run_settings
from .tokenizer import CharTokenizer

# --resume takes every flag of these argument groups from the checkpoint.
RESUMED_GROUPS = ("data", "model", "training")
RESUME_KEYS = ("args", "vocab", "optimizer", "rng", "history", "best_val")
# Settings a run times at its start when they are not given (stage 5 adds --dtype): ckpt.pt
# keeps what the run chose, and --resume takes it, since another choice sums in another order.
CHOSEN = ("threads", "dtype")


def resumed_flags(parser: argparse.ArgumentParser) -> list[str]:
    """The ``dest`` of every flag that ``--resume`` restores, read off the parser."""
    return [a.dest for g in parser._action_groups if g.title in RESUMED_GROUPS
            for a in g._group_actions]


def plain_args(args: argparse.Namespace) -> dict:
    """The flags as JSON-able typed values (paths become strings), for checkpoints."""
    return {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}


def param_breakdown(model: torch.nn.Module) -> dict[str, int]:
    """Parameter counts by part of the model (``transformer.wte``, ..., ``lm_head``), and
    the total. A weight that two parts share (tied) counts once, under the first."""
    parts: dict[str, int] = {}
    for name, p in model.named_parameters():  # lists a shared tensor only once
        depth = 2 if name.startswith("transformer.") else 1
        part = ".".join(name.split(".")[:depth])
        parts[part] = parts.get(part, 0) + p.numel()
    return {**parts, "total": sum(parts.values())}


# --8<-- [start:estimate_loss]
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
# --8<-- [end:estimate_loss]


def sample_text(model: torch.nn.Module, tokenizer: CharTokenizer, n: int, seed: int,
                device: str) -> str:
    """``n`` characters sampled after a newline, with dropout off."""
    start = "\n" if "\n" in tokenizer.stoi else tokenizer.chars[0]
    idx = torch.tensor([tokenizer.encode(start)], device=device)
    model.eval()
    out = model.generate(idx, n, generator=torch.Generator(device).manual_seed(seed))
    model.train()
    return tokenizer.decode(out[0, 1:].tolist())


# --8<-- [start:rng]
def rng_state(batches: torch.Generator) -> dict:
    state = {"torch": torch.get_rng_state(), "batches": batches.get_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(state: dict, batches: torch.Generator) -> None:
    torch.set_rng_state(state["torch"])
    batches.set_state(state["batches"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
# --8<-- [end:rng]


# --8<-- [start:stopflag]
class StopFlag:
    """Ctrl-C sets a flag; the loop stops at the next step boundary, so the saved
    model and optimizer are always a consistent, resumable pair. Under torchrun every
    process stops at the same step: ``stop`` asks them all."""

    def __init__(self, world: int = 1):
        self.world, self.pressed = world, False

    def __enter__(self):
        self.previous = signal.signal(signal.SIGINT, self._handler)
        return self

    def _handler(self, signum, frame):
        if self.pressed and self.world == 1:  # a second Ctrl-C: the user really wants out
            raise KeyboardInterrupt
        self.pressed = True

    @property
    def stop(self) -> bool:
        if self.world == 1:
            return self.pressed
        flag = torch.tensor([float(self.pressed)])  # stop when any process was told to
        torch.distributed.all_reduce(flag, op=torch.distributed.ReduceOp.MAX)
        return bool(flag.item())

    def __exit__(self, *exc):
        signal.signal(signal.SIGINT, self.previous)
# --8<-- [end:stopflag]


# --8<-- [start:threads]
def pick_threads(threads: int | None, one_step: Callable[[], object]) -> str:
    """Set how many CPU threads PyTorch uses for the whole run; returns the line to print.

    More threads are faster on an idle machine, but when another program keeps a
    core busy, threads that wait for each other can make every step many times slower.
    So we time ``one_step`` (a forward and backward pass) at each candidate count
    once, before training, and keep the fastest. The count never changes during
    the run (another count would round sums differently), so the printed
    ``--threads N`` repeats the run number for number.
    """
    if threads:
        torch.set_num_threads(threads)
        return f"threads: {threads} (--threads)"
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
# --8<-- [end:threads]


# --8<-- [start:distributed]
def start_distributed(device: str, batch_size: int) -> tuple[int, int, str]:
    """Under torchrun: join the process group; returns (rank, world size, device).

    A plain ``python -m ...`` run is rank 0 of a world of 1 and changes nothing.
    Every process draws the same batch and trains on its slice of it, so N
    processes at --batch-size B take the same steps as one process at B.
    """
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world == 1:
        return 0, 1, device
    if batch_size % world:
        raise UserError(f"--batch-size {batch_size} must be a multiple of the {world} processes "
                        "torchrun started: each takes an equal share of every batch.")
    local = int(os.environ["LOCAL_RANK"])
    if device == "cuda":  # one GPU per process
        torch.cuda.set_device(local)
        device = f"cuda:{local}"
    if not torch.distributed.is_initialized():
        torch.distributed.init_process_group("nccl" if device.startswith("cuda") else "gloo")
    return torch.distributed.get_rank(), world, device
# --8<-- [end:distributed]


class Run:
    """One training run; see the module docstring for the order of the calls."""

    def __init__(self, args: argparse.Namespace, parser: argparse.ArgumentParser):
        self.args = args
        self.bar: tqdm | None = None  # the progress bar, while steps() runs
        self.out = check_out_dir(Path(args.out_dir))
        self.ckpt_path = self.out / "ckpt.pt"
        self.rank, self.world, self.device = start_distributed(pick_device(args.device),
                                                               args.batch_size)
        self.main = self.rank == 0  # the process that prints and writes files
        if self.main:
            remove_stale_tmp(self.out)
        self.resume = self._restore_flags(parser) if args.resume else None
        self.flags = resumed_flags(parser)  # with --max-iters: the settings of a reference
        torch.manual_seed(args.seed)
        tokenizer = CharTokenizer(self.resume["vocab"]) if self.resume else None
        self.corpus = Corpus.load(args.data, args.val_fraction, tokenizer)
        if self.resume:
            check_vocab(self.resume, CharTokenizer.from_text(self.corpus.text), self.ckpt_path)
        check_length(self.corpus.train, args.block_size, "train")
        check_length(self.corpus.val, args.block_size, "val")
        self.vocab_size = self.corpus.tokenizer.vocab_size
        self.batches = torch.Generator().manual_seed(args.seed)
        self.history: list[dict] = []
        self.best_val, self.best_step, self.step = float("inf"), None, 0

    # --8<-- [start:resume]
    def _restore_flags(self, parser: argparse.ArgumentParser) -> dict:
        """Load ckpt.pt and take the run's settings from it; refuse conflicting flags."""
        args, ckpt = self.args, load_checkpoint(self.ckpt_path)
        missing = [k for k in RESUME_KEYS if k not in ckpt]
        if missing:
            raise UserError(f"{self.ckpt_path} cannot be resumed: it has no {', '.join(missing)}. "
                            "Train a new run in another --out-dir.")
        defaults, saved = vars(parser.parse_args([])), ckpt["args"]
        for k in resumed_flags(parser):
            given = getattr(args, k)
            if given != defaults[k] and given != saved.get(k, given):
                raise UserError(
                    f"--{k.replace('_', '-')} {given} conflicts with the checkpoint's {saved[k]}: "
                    "--resume continues the run with the settings it started with. Drop the "
                    "flag, or train a new run in another --out-dir."
                )
            setattr(args, k, saved.get(k, given))
        chosen = [k for k in CHOSEN if getattr(args, k, None) in (None, "auto")
                  and saved.get(k) not in (None, "auto")]
        for k in chosen:  # not given: the run's own choice, not a new timing
            setattr(args, k, saved[k])
        if chosen:
            self.say("continuing with the run's " + ", ".join(f"--{k} {saved[k]}" for k in chosen)
                     + " (another choice would change the last digits)")
        if args.max_iters == defaults["max_iters"]:  # not given: finish the run as planned
            args.max_iters = saved["max_iters"]
        elif args.max_iters != saved["max_iters"]:
            self.say(f"note: the run was planned for --max-iters {saved['max_iters']}; it now runs "
                     f"to {args.max_iters}. Whatever depends on the run's length (such as a "
                     f"learning-rate schedule) follows the new length from step {ckpt['step']} on.")
        return ckpt
    # --8<-- [end:resume]

    def say(self, text: str) -> None:
        """Print a line (only the first process does), above the progress bar if there is one."""
        if self.main:
            self.bar.write(text) if self.bar is not None else print(text)

    def start(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> torch.nn.Module:
        """Resume the weights, optimizer and RNGs, or print a sample of the untrained model;
        pick the CPU threads. Returns the module to train: ``model``, or under torchrun its
        DDP wrapper, which averages the gradients of all processes during ``backward()``."""
        self.model, self.optimizer = model, optimizer
        if self.resume:
            model.load_state_dict(self.resume["model"])
            optimizer.load_state_dict(self.resume["optimizer"])
            restore_rng(self.resume["rng"], self.batches)
            self.history, self.best_val = self.resume["history"], self.resume["best_val"]
            self.best_step = self.resume.get("best_step")
            self.step = self.resume["step"]
            self.say(f"resuming from {self.ckpt_path} at step {self.step} "
                     f"(best val {self.best_val:.4f})")
        parts = param_breakdown(model)
        self.params = parts["total"]
        c = self.corpus
        self.say(f"{__package__}: {self.params:,} parameters, vocab "
                 f"{self.vocab_size}, train {len(c.train):,} / val {len(c.val):,} tokens, "
                 f"device {self.device}" + (f", {self.world} processes" if self.world > 1 else ""))
        if len(parts) > 2:  # more than one part, and the total
            width = max(20, max(map(len, parts)) + 2)  # the longest name, and two spaces
            for name, n in parts.items():
                self.say(f"  {name:<{width}}{n:>12,}")
        if self.device == "cpu":
            self.say(pick_threads(self.args.threads, self._timing_step))
            self.args.threads = torch.get_num_threads()  # kept in ckpt.pt for --resume
        if not self.resume:
            self.say(f"sample before training:\n{self.sample()}\n")
        if self.main:
            self.out.mkdir(parents=True, exist_ok=True)
            self.log = (self.out / "log.jsonl").open("a" if self.resume else "w",
                                                     encoding="utf-8")
        if self.world == 1:
            return model
        return torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[self.device] if self.device.startswith("cuda") else None)

    def _timing_step(self) -> None:
        """A forward and backward pass that changes nothing: not the weights, not the RNGs."""
        g = torch.Generator().manual_seed(0)
        x, y = get_batch(self.corpus.train, self.args.batch_size // self.world,
                         self.args.block_size, g, self.device)
        with torch.random.fork_rng(devices=[]):
            self.model(x, y)[1].backward()
        self.model.zero_grad(set_to_none=True)

    # --8<-- [start:steps]
    def steps(self) -> Iterator[int]:
        """The step numbers still to train, under a progress bar; Ctrl-C ends them early."""
        args, first = self.args, self.step
        self.t0 = time.time()
        self.bar = tqdm(range(first, args.max_iters), desc="training", unit="step",
                        dynamic_ncols=True, disable=not self.main)
        with StopFlag(self.world) as flag, self.bar:
            for step in self.bar:
                if flag.stop:
                    self.say(f"Ctrl-C: stopping at step {step} and saving (continue with --resume)")
                    break
                yield step
                self.step = step + 1
        self.bar = None
        self.wall = time.time() - self.t0

    def evaluation_due(self, step: int) -> bool:
        """Every --eval-interval steps, unless this step was evaluated before a --resume."""
        done = self.history and self.history[-1]["step"] == step
        return step % self.args.eval_interval == 0 and not done
    # --8<-- [end:steps]

    def get_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        """A random (B, T) batch of inputs and targets from the training text."""
        x, y = get_batch(self.corpus.train, self.args.batch_size, self.args.block_size,
                         self.batches, self.device)
        share = len(x) // self.world  # under torchrun: this process's slice of the batch
        lo, hi = self.rank * share, (self.rank + 1) * share
        return x[lo:hi], y[lo:hi]

    def sample(self) -> str:
        return sample_text(self.model, self.corpus.tokenizer, self.args.sample_tokens,
                           self.args.seed, self.device)

    # --8<-- [start:checkpoints]
    def save(self, path: Path) -> Path:
        return save_checkpoint(path, self.model, self.corpus.tokenizer, self.step,
                               optimizer=self.optimizer.state_dict(), rng=rng_state(self.batches),
                               history=self.history, best_val=self.best_val,
                               best_step=self.best_step, args=plain_args(self.args))

    def evaluate(self) -> dict:
        """Estimate the losses, print and log them, keep the best checkpoint and the latest."""
        splits = {"train": self.corpus.train, "val": self.corpus.val}
        losses = estimate_loss(self.model, splits, self.args, self.device)
        if not all(math.isfinite(v) for v in losses.values()):
            self.diverged(f"{losses}")
        row = {"step": self.step, **losses, "lr": self.optimizer.param_groups[0]["lr"],
               "time": round(time.time() - self.t0, 2)}
        self.history.append(row)
        improved = losses["val"] < self.best_val
        if improved:
            self.best_val, self.best_step = losses["val"], self.step
        if self.main:
            self.log.write(json.dumps(row) + "\n")
            self.log.flush()
            if improved:
                self.save(self.out / "best.pt")
            self.save(self.ckpt_path)
        self.say(f"step {self.step:5d}: train loss {losses['train']:.4f}, "
                 f"val loss {losses['val']:.4f}")
        return losses
    # --8<-- [end:checkpoints]

    def diverged(self, value: str) -> None:
        raise UserError(
            f"the loss became {value} at step {self.step}: training diverged. The last good "
            f"checkpoint is {self.ckpt_path}. Try a lower --lr (now {self.args.lr})."
        )

    def check(self, loss: torch.Tensor) -> float:
        """The divergence guard: stop on a nan or inf loss, before anything is saved."""
        value = loss.item()
        if not math.isfinite(value):
            self.diverged(str(value))
        if self.bar is not None:
            self.bar.set_postfix(loss=f"{value:.3f}", refresh=False)
        return value

    def finish(self) -> dict:
        """Final estimate and checkpoints, loss curve, sample, metrics.json, and the
        comparison with the reference run."""
        args, out = self.args, self.out
        if not self.history or self.history[-1]["step"] < self.step:
            losses = self.evaluate()
        else:
            losses = self.history[-1]
        metrics = {
            "stage": __package__, "data": args.data, "params": self.params, "steps": self.step,
            "batch_size": args.batch_size, "block_size": args.block_size,
            "train_loss": losses["train"], "val_loss": losses["val"],
            "best_val_loss": self.best_val, "best_val_step": self.best_step,
            "train_seconds": round(self.wall, 2), "interrupted": self.step < args.max_iters,
        }
        if self.world > 1:
            torch.distributed.barrier()  # every process done before any leaves the group
            torch.distributed.destroy_process_group()
        if not self.main:
            return metrics
        self.log.close()
        print(f"step {self.step:5d}: train loss {losses['train']:.4f}, val loss "
              f"{losses['val']:.4f} (best {self.best_val:.4f} at step {self.best_step}, "
              f"{self.wall:.1f} s)")
        self.corpus.tokenizer.save(out / "vocab.json")
        self.png = plot_losses(self.history, out / "loss.png", title=f"{__package__} on {args.data}")
        metrics["sample"] = self.sample()
        print(f"\nsample after training:\n{metrics['sample']}\n")
        (out / "metrics.json").write_text(json.dumps(metrics, ensure_ascii=False, indent=2),
                                          encoding="utf-8")
        print(f"checkpoint: {self.ckpt_path} (best: {out / 'best.pt'})\n"
              f"log:        {out / 'log.jsonl'}\nloss curve: {self.png}\n"
              f"metrics:    {out / 'metrics.json'}")
        settings = run_settings(args, self.flags, self.corpus.text)
        for line in reference_report(metrics, settings, self.device, bool(self.resume)):
            print(line)
        return metrics
