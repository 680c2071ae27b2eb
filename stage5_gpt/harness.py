"""The training harness: what a real run needs around the training loop.

Skip this file on a first reading: ``train.py`` is the training loop, and this
module is the bookkeeping it leans on. It is the same file, byte for byte, in
every stage from 2 to 5, so the diffs between stages show only the model.

What it does for a run (``Run``):

- checks ``--out-dir`` before any work, and removes half-written checkpoint files
  that a killed process left there;
- ``--resume``: restores the flags of the data, model and training groups, the
  weights, the optimizer, the random number generators and the loss history, so
  the run continues exactly where it stopped;
- every ``--eval-interval`` steps: the train and val loss on fixed batches, one
  row in ``log.jsonl``, the latest checkpoint ``ckpt.pt`` and, when val improved,
  ``best.pt`` (both written atomically);
- a divergence guard: a loss that is nan or inf stops the run with a message,
  before anything is saved, so the last checkpoint on disk is a good one;
- Ctrl-C stops at the next step boundary and saves a resumable checkpoint;
- the number of CPU threads: timed, not guessed (``ThreadTuner``, ``--threads``);
- at the end: ``loss.png``, ``vocab.json``, ``metrics.json`` and a sample, and
  "is my loss normal?": the reference result for the same settings, from the
  stage's ``reference.json``, and whether this run is within its range;
- under ``torchrun --nproc_per_node N``: data-parallel training with PyTorch's
  DistributedDataParallel, each process taking its share of every batch; only
  the first process (rank 0) prints and writes files.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import signal
import statistics
import time
from collections.abc import Iterator
from pathlib import Path

import torch
from tqdm import tqdm

from .checkpoint import check_vocab, load_checkpoint, remove_stale_tmp, save_checkpoint
from .cli import check_out_dir, pick_device
from .data import Corpus, check_length, get_batch
from .errors import UserError
from .plots import plot_losses
from .tokenizer import CharTokenizer

# --resume takes every flag of these argument groups from the checkpoint.
RESUMED_GROUPS = ("data", "model", "training")
RESUME_KEYS = ("args", "vocab", "optimizer", "rng", "history", "best_val")


def resumed_flags(parser: argparse.ArgumentParser) -> list[str]:
    """The ``dest`` of every flag that ``--resume`` restores, read off the parser."""
    return [a.dest for g in parser._action_groups if g.title in RESUMED_GROUPS
            for a in g._group_actions]


def plain_args(args: argparse.Namespace) -> dict:
    """The flags as JSON-able typed values (paths become strings), for checkpoints."""
    return {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}


# --8<-- [start:reference]
# "Is my loss normal?": tools/gen_docs.py writes this file from the runs the docs show.
REFERENCE = Path(__file__).with_name("reference.json")
NO_REFERENCE = "COURSE_NO_REFERENCE"  # set: no comparison (gen_docs sets it for its own runs)
GUIDE = "docs/troubleshooting.md"


def run_settings(args: argparse.Namespace, flags: list[str], text: str) -> dict:
    """What decides a run's numbers: the flags ``--resume`` restores and --max-iters,
    with the corpus named by the sha256 of its text rather than by --data."""
    settings = {k: getattr(args, k) for k in flags if k != "data"}
    settings = json.loads(json.dumps({**settings, "max_iters": args.max_iters}, default=str))
    settings["corpus_sha256"] = hashlib.sha256(text.encode("utf-8")).hexdigest()
    return settings


def reference_report(metrics: dict, settings: dict, device: str, resumed: bool = False,
                     path: Path | None = None) -> list[str]:
    """Compare a finished run with the reference for the same settings, if there is one.

    Returns the lines to print: [] without a reference file, one line when none of
    its references has these settings, else the reference, the verdict and, outside
    the range, the likely causes. Never raises for a missing or broken file.
    """
    path = path or REFERENCE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        refs = data["references"]
        ref = next((r for r in refs if r["settings"] == settings), None)
        if ref is None:
            names = ", ".join(r["name"] for r in refs)
            return [f"is this loss normal? no reference for these settings (there is one for: "
                    f"{names}); see {GUIDE}"]
        return compare_to_reference(metrics, ref, data, device, resumed)
    except FileNotFoundError:
        return []
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        return [f"is this loss normal? {path.name} is unreadable ({type(e).__name__}: {e}); "
                "no comparison"]


def compare_to_reference(metrics: dict, ref: dict, data: dict, device: str,
                         resumed: bool) -> list[str]:
    val, tol, here = ref["val_loss"], ref["tolerance"], metrics["val_loss"]
    lines = [f"is this loss normal? reference for these settings ({ref['name']}): val loss "
             f"{val:.4f} +- {tol:.4f}, best {ref['best_val_loss']:.4f}, "
             f"{ref['train_seconds']:.1f} s of training",
             f"  from {data['made_by']}: torch {data['torch']} on {data['device']}"
             + (f", {ref['precision']}" if ref.get("precision") else "")
             + f"; the range is {data['tolerance_is']}"]
    if metrics["interrupted"]:
        return lines + [f"  this run stopped at step {metrics['steps']}, before the end: "
                        "no verdict"]
    if abs(here - val) <= tol:
        lines.append(f"  this run: val loss {here:.4f}, within the expected range")
    else:
        side = "above" if here > val else "below"
        lines.append(f"  this run: val loss {here:.4f}, {abs(here - val) - tol:.4f} {side} the "
                     f"expected range {val - tol:.4f} to {val + tol:.4f}. Likely causes:")
        if device.split(":")[0] != data["device"]:
            lines.append(f"  - it trained on {device}, the reference on {data['device']}: other "
                         "hardware sums in another order and rounds differently, and over "
                         "thousands of steps the two runs drift apart")
        if torch.__version__.split("+")[0] != data["torch"].split("+")[0]:
            lines.append(f"  - torch {torch.__version__} here, {data['torch']} for the "
                         "reference: kernels change between versions")
        if ref.get("precision"):
            lines.append(f"  - the reference computed in {ref['precision']}; if this run's "
                         "'precision:' line says otherwise, the numbers differ")
        lines.append("  - otherwise: a change to the code or the data; `git status` and `git "
                     f"diff` show what changed. More in {GUIDE}")
    seconds = metrics["train_seconds"]
    if not resumed and seconds > 2 * ref["train_seconds"]:
        lines.append(f"  time: {seconds:.1f} s, {seconds / ref['train_seconds']:.1f}x the "
                     "reference's: a slower CPU, or a busy machine (other programs on the "
                     "cores). The harness times 1..all threads and keeps the fastest (the "
                     "'threads:' line); --threads N pins the count")
    return lines
# --8<-- [end:reference]


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
    model and optimizer are always a consistent, resumable pair."""

    def __init__(self):
        self.stop = False

    def __enter__(self):
        self.previous = signal.signal(signal.SIGINT, self._handler)
        return self

    def _handler(self, signum, frame):
        if self.stop:  # a second Ctrl-C: the user really wants out now
            raise KeyboardInterrupt
        self.stop = True

    def __exit__(self, *exc):
        signal.signal(signal.SIGINT, self.previous)
# --8<-- [end:stopflag]


# --8<-- [start:threads]
class ThreadTuner:
    """Picks how many CPU threads PyTorch uses, by timing training steps.

    More threads are faster on an idle machine, but when another program keeps a
    core busy, threads that wait for each other can make every step 2-3x slower.
    So: time a few steps at each candidate count, keep the fastest, and time them
    again every ``every`` seconds in case the machine got busier or quieter.
    ``threads`` (the --threads flag) pins the count instead.
    """

    def __init__(self, threads: int | None, trial: int = 6, every: float = 30.0):
        top = threads or torch.get_num_threads()
        torch.set_num_threads(top)
        self.pinned, self.trial, self.every = threads is not None, trial, every
        self.choices = sorted({1, top} | {2 ** i for i in range(1, 8) if 2 ** i < top})
        self.plan = [] if self.pinned or len(self.choices) == 1 else list(self.choices)
        self.samples: dict[int, list[float]] = {}
        self.best, self.recheck_at = top, math.inf

    def before_step(self) -> None:
        if self.plan:
            torch.set_num_threads(self.plan[0])

    def after_step(self, seconds: float) -> str | None:
        """Record one step's time; returns a note when the choice changes."""
        if self.plan:
            times = self.samples.setdefault(self.plan[0], [])
            times.append(seconds)
            if len(times) >= self.trial:
                self.plan.pop(0)
            if not self.plan:  # every candidate timed: keep the fastest (first step: warm-up)
                speed = {n: statistics.median(t[1:]) for n, t in self.samples.items()}
                best, self.best = self.best, min(speed, key=speed.get)
                torch.set_num_threads(self.best)
                self.samples, self.recheck_at = {}, time.monotonic() + self.every
                if best != self.best or not hasattr(self, "told"):
                    self.told = True
                    return f"threads: {self.best} (ms per step: " + ", ".join(
                        f"{n}: {1000 * t:.1f}" for n, t in sorted(speed.items())) + ")"
        elif time.monotonic() >= self.recheck_at:
            self.plan = list(self.choices)
        return None
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
    """One training run: ``Run(args, parser)``, ``start(model, optimizer)``,
    ``for step in steps(): ...``, ``finish()``."""

    def __init__(self, args: argparse.Namespace, parser: argparse.ArgumentParser):
        self.args = args
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
        if args.max_iters == defaults["max_iters"]:  # not given: finish the run as planned
            args.max_iters = saved["max_iters"]
        elif args.max_iters != saved["max_iters"]:
            self.say(f"note: the run was planned for --max-iters {saved['max_iters']}; it now runs "
                  f"to {args.max_iters}. Whatever depends on the run's length (such as a "
                  f"learning-rate schedule) follows the new length from step {ckpt['step']} on.")
        return ckpt
    # --8<-- [end:resume]

    def say(self, text: str) -> None:
        if self.main:
            print(text)

    def write(self, text: str) -> None:
        """Print a line above the progress bar (only the first process does)."""
        if self.main:
            self.bar.write(text)

    def start(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> torch.nn.Module:
        """Resume the weights, optimizer and RNGs, or print a sample of the untrained model.
        Returns the module to train: ``model``, or under torchrun its DDP wrapper, which
        averages the gradients of all processes during ``backward()``."""
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
        parts = (model.param_breakdown() if hasattr(model, "param_breakdown")
                 else {"total": sum(p.numel() for p in model.parameters())})
        self.params = parts["total"]
        c = self.corpus
        self.say(f"{__package__}: {self.params:,} parameters, vocab "
                 f"{self.vocab_size}, train {len(c.train):,} / val {len(c.val):,} tokens, "
                 f"device {self.device}" + (f", {self.world} processes" if self.world > 1 else ""))
        if len(parts) > 1:
            for name, n in parts.items():
                self.say(f"  {name:<20}{n:>12,}")
        if not self.resume and self.main:
            print(f"sample before training:\n{self.sample()}\n")
        if self.main:
            self.out.mkdir(parents=True, exist_ok=True)
            self.log = (self.out / "log.jsonl").open("a" if self.resume else "w",
                                                     encoding="utf-8")
        if self.world == 1:
            return model
        return torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[self.device] if self.device.startswith("cuda") else None)

    def get_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        """A random (B, T) batch of inputs and targets from the training text."""
        x, y = get_batch(self.corpus.train, self.args.batch_size, self.args.block_size, self.batches,
                         self.device)
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
        """Estimate the losses, log them, keep the best checkpoint and the latest."""
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
        self.bar.set_postfix(loss=f"{value:.3f}", refresh=False)
        return value

    def steps(self) -> Iterator[int]:
        """Yield step numbers; evaluate and checkpoint between steps; stop on Ctrl-C."""
        args, first = self.args, self.step
        tuner = ThreadTuner(getattr(args, "threads", None))
        self.t0 = time.time()
        self.bar = tqdm(range(first, args.max_iters), desc="training", unit="step",
                        dynamic_ncols=True, disable=not self.main)
        with StopFlag() as flag, self.bar:
            for step in self.bar:
                if flag.stop:
                    self.write(f"Ctrl-C: stopping at step {step} and saving "
                               "(continue with --resume)")
                    break
                if step % args.eval_interval == 0 and (step > first or not self.history):
                    losses = self.evaluate()
                    self.write(f"step {step:5d}: train loss {losses['train']:.4f}, "
                               f"val loss {losses['val']:.4f}")
                tuner.before_step()
                t = time.perf_counter()
                yield step
                note = tuner.after_step(time.perf_counter() - t)
                if note:
                    self.write(note)
                self.step = step + 1
        self.wall = time.time() - self.t0

    def finish(self) -> dict:
        """Final estimate and checkpoints, loss curve, sample and metrics.json."""
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
        if not os.environ.get(NO_REFERENCE):
            settings = run_settings(args, self.flags, self.corpus.text)
            for line in reference_report(metrics, settings, self.device, bool(self.resume)):
                print(line)
        return metrics
