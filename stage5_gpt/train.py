"""Train this stage's model and save it: python -m <stage>.train

Training as a practitioner runs it: AdamW with weight decay on matrices only,
linear warmup then cosine decay of the learning rate, gradient clipping, regular
train/val estimates, the best-val checkpoint kept apart from the latest,
``--resume`` that continues exactly where a run stopped, Ctrl-C that saves, and a
log of losses (log.jsonl) beside the checkpoints.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import signal
import sys
import time
from pathlib import Path

import torch
from tqdm import tqdm

from .checkpoint import check_vocab, load_checkpoint, save_checkpoint
from .cli import (
    check_out_dir,
    non_negative_float,
    non_negative_int,
    pick_device,
    positive_float,
    positive_int,
    unit_interval,
)
from .data import DATA_HELP, Corpus, check_length, get_batch
from .errors import UserError
from .model import ACTIVATIONS, GPT, GPTConfig
from .plots import plot_losses
from .tokenizer import CharTokenizer
from .visualize import attention_figure, default_prompt

# On --resume these come from the checkpoint, so the run continues as it started.
RESUMED_ARGS = ("data", "val_fraction", "block_size", "n_layer", "n_head", "n_embd", "dropout",
                "bias", "activation", "tie_weights", "batch_size", "lr", "min_lr", "warmup_iters",
                "lr_decay_iters", "weight_decay", "beta1", "beta2", "grad_clip", "eval_interval",
                "eval_iters", "seed")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=f"python -m {__package__}.train",
        description=__doc__.splitlines()[0].split(": ")[0] + ".",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    g = p.add_argument_group("data")
    g.add_argument("--data", default="en", help=DATA_HELP)
    g.add_argument("--val-fraction", type=float, default=0.1, help="share held out for validation")
    g = p.add_argument_group("model")
    g.add_argument("--block-size", type=positive_int, default=64, help="T: context length")
    g.add_argument("--n-layer", type=positive_int, default=4, help="Transformer blocks")
    g.add_argument("--n-head", type=positive_int, default=4, help="attention heads per block (must divide --n-embd)")
    g.add_argument("--n-embd", type=positive_int, default=128, help="C: width of the residual stream")
    g.add_argument("--dropout", type=float, default=0.1, help="dropout probability while training (0 for large corpora)")
    g.add_argument("--bias", action=argparse.BooleanOptionalAction, default=True, help="biases in projections and LayerNorm")
    g.add_argument("--activation", default="gelu", choices=ACTIVATIONS, help="feed-forward non-linearity")
    g.add_argument("--tie-weights", action="store_true", help="share token embedding and output head")
    g = p.add_argument_group("training")
    g.add_argument("--max-iters", type=non_negative_int, default=2000, help="optimizer steps in total")
    g.add_argument("--batch-size", type=positive_int, default=12, help="B: windows per step")
    g.add_argument("--lr", type=positive_float, default=2e-3, help="peak learning rate")
    g.add_argument("--min-lr", type=non_negative_float, default=1e-4, help="learning rate at the end of the cosine")
    g.add_argument("--warmup-iters", type=non_negative_int, default=100, help="steps of linear warmup")
    g.add_argument("--lr-decay-iters", type=positive_int, default=None, help="steps until min-lr (default: --max-iters)")
    g.add_argument("--weight-decay", type=non_negative_float, default=0.1, help="AdamW weight decay (matrices only)")
    g.add_argument("--beta1", type=unit_interval, default=0.9, help="AdamW beta1")
    g.add_argument("--beta2", type=unit_interval, default=0.99, help="AdamW beta2")
    g.add_argument("--grad-clip", type=non_negative_float, default=1.0, help="clip the gradient norm to this (0: off)")
    g.add_argument("--eval-interval", type=positive_int, default=250, help="steps between loss estimates and checkpoints")
    g.add_argument("--eval-iters", type=positive_int, default=20, help="batches per loss estimate")
    g.add_argument("--seed", type=int, default=1337, help="seeds weights, batches, dropout and samples")
    g.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda", "mps"], help="where to train")
    g.add_argument("--compile", action="store_true", help="torch.compile the model (faster on long runs)")
    g = p.add_argument_group("output")
    g.add_argument("--out-dir", type=Path, default=Path("out") / __package__, help="checkpoints, log and figures go here")
    g.add_argument("--resume", action="store_true", help="continue from OUT_DIR/ckpt.pt exactly where it stopped")
    g.add_argument("--sample-tokens", type=non_negative_int, default=200, help="characters sampled before and after training")
    return p


def model_config(args: argparse.Namespace, vocab_size: int) -> GPTConfig:
    return GPTConfig(vocab_size=vocab_size, block_size=args.block_size, n_layer=args.n_layer,
                     n_head=args.n_head, n_embd=args.n_embd, dropout=args.dropout,
                     bias=args.bias, activation=args.activation, tie_weights=args.tie_weights)


# --8<-- [start:lr]
def get_lr(step: int, args: argparse.Namespace) -> float:
    """Linear warmup to --lr, then cosine decay to --min-lr at --lr-decay-iters."""
    if step < args.warmup_iters:
        return args.lr * (step + 1) / args.warmup_iters
    if step >= args.lr_decay_iters:
        return args.min_lr
    progress = (step - args.warmup_iters) / max(1, args.lr_decay_iters - args.warmup_iters)
    return args.min_lr + 0.5 * (1.0 + math.cos(math.pi * progress)) * (args.lr - args.min_lr)
# --8<-- [end:lr]


# --8<-- [start:optimizer]
def make_optimizer(model: GPT, args: argparse.Namespace) -> torch.optim.AdamW:
    """Weight decay pulls matrices towards 0; biases, LayerNorm gains stay free."""
    params = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in params if p.dim() >= 2]  # embeddings and Linear weights
    no_decay = [p for p in params if p.dim() < 2]  # biases and LayerNorm weights
    return torch.optim.AdamW(
        [{"params": decay, "weight_decay": args.weight_decay},
         {"params": no_decay, "weight_decay": 0.0}],
        lr=args.lr, betas=(args.beta1, args.beta2))
# --8<-- [end:optimizer]


@torch.no_grad()
def estimate_loss(model: GPT, splits: dict[str, torch.Tensor], args: argparse.Namespace,
                  device: str) -> dict[str, float]:
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


def sample_text(model: GPT, tokenizer: CharTokenizer, n: int, seed: int, device: str) -> str:
    start = "\n" if "\n" in tokenizer.stoi else tokenizer.chars[0]
    idx = torch.tensor([tokenizer.encode(start)], device=device)
    model.eval()  # no dropout while sampling
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


def train(args: argparse.Namespace) -> dict:
    out = check_out_dir(Path(args.out_dir))
    ckpt_path = out / "ckpt.pt"
    resume = None
    if args.resume:
        resume = load_checkpoint(ckpt_path)
        missing = [k for k in ("args", "vocab", "optimizer", "rng", "history", "best_val")
                   if k not in resume]
        if missing:
            raise UserError(f"{ckpt_path} cannot be resumed: it has no {', '.join(missing)}. "
                            "Train a new run in another --out-dir.")
        defaults = vars(build_parser().parse_args([]))
        for k in RESUMED_ARGS:
            given, saved = getattr(args, k), resume["args"][k]
            if given != defaults[k] and given != saved:
                raise UserError(
                    f"--{k.replace('_', '-')} {given} conflicts with the checkpoint's {saved}: "
                    "--resume continues the run with the settings it started with. Drop the "
                    "flag, or train a new run in another --out-dir."
                )
            setattr(args, k, saved)
    args.lr_decay_iters = args.lr_decay_iters or max(args.max_iters, 1)
    device = pick_device(args.device)
    torch.manual_seed(args.seed)
    tokenizer = CharTokenizer(resume["vocab"]) if resume else None
    corpus = Corpus.load(args.data, args.val_fraction, tokenizer)
    if resume:
        check_vocab(resume, CharTokenizer.from_text(corpus.text), ckpt_path)
    check_length(corpus.train, args.block_size, "train")
    check_length(corpus.val, args.block_size, "val")

    model = GPT(model_config(args, corpus.tokenizer.vocab_size)).to(device)
    optimizer = make_optimizer(model, args)
    batches = torch.Generator().manual_seed(args.seed)
    history, best_val, start = [], float("inf"), 0
    # --8<-- [start:resume]
    if resume:
        model.load_state_dict(resume["model"])
        optimizer.load_state_dict(resume["optimizer"])
        restore_rng(resume["rng"], batches)
        history, best_val, start = resume["history"], resume["best_val"], resume["step"]
        print(f"resuming from {ckpt_path} at step {start} (best val {best_val:.4f})")
    # --8<-- [end:resume]

    parts = model.param_breakdown()
    print(f"{__package__}: {parts['total']:,} parameters, vocab {corpus.tokenizer.vocab_size}, "
          f"train {len(corpus.train):,} / val {len(corpus.val):,} tokens, device {device}")
    for name, n in parts.items():
        print(f"  {name:<20}{n:>12,}")
    if not resume:
        print(f"sample before training:\n"
              f"{sample_text(model, corpus.tokenizer, args.sample_tokens, args.seed, device)}\n")

    fwd = torch.compile(model) if args.compile else model
    autocast = (torch.autocast("cuda", dtype=torch.bfloat16)
                if device == "cuda" and torch.cuda.is_bf16_supported() else contextlib.nullcontext())
    splits = {"train": corpus.train, "val": corpus.val}
    out.mkdir(parents=True, exist_ok=True)
    log = (out / "log.jsonl").open("a" if resume else "w", encoding="utf-8")
    saved_args = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}

    # --8<-- [start:checkpoints]
    def save(path: Path, step: int) -> Path:
        return save_checkpoint(path, model, corpus.tokenizer, step, optimizer=optimizer.state_dict(),
                               rng=rng_state(batches), history=history, best_val=best_val,
                               args=saved_args)

    def evaluate(step: int) -> dict:
        nonlocal best_val
        losses = estimate_loss(model, splits, args, device)
        if not all(math.isfinite(v) for v in losses.values()):
            raise UserError(
                f"the loss became {losses} at step {step}: training diverged. The last good "
                f"checkpoint is {ckpt_path}. Try a lower --lr (now {args.lr}) or more --warmup-iters."
            )
        row = {"step": step, **losses, "lr": get_lr(step, args), "time": round(time.time() - t0, 2)}
        history.append(row)
        log.write(json.dumps(row) + "\n")
        log.flush()
        if losses["val"] < best_val:
            best_val = losses["val"]
            save(out / "best.pt", step)
        save(ckpt_path, step)
        return losses
    # --8<-- [end:checkpoints]

    # --8<-- [start:train_loop]
    step, t0, tokens_per_step = start, time.time(), args.batch_size * args.block_size
    bar = tqdm(range(start, args.max_iters), desc="training", unit="step", dynamic_ncols=True)
    with StopFlag() as flag, log, bar:
        for step in bar:
            if flag.stop:
                bar.write(f"Ctrl-C: stopping at step {step} and saving (resume with --resume)")
                break
            lr = get_lr(step, args)
            for group in optimizer.param_groups:
                group["lr"] = lr
            if step % args.eval_interval == 0 and step > start or step == 0:
                losses = evaluate(step)
                bar.write(f"step {step:5d}: train loss {losses['train']:.4f}, val loss "
                          f"{losses['val']:.4f}, lr {lr:.2e}")
            xb, yb = get_batch(corpus.train, args.batch_size, args.block_size, batches, device)
            with autocast:
                _, loss = fwd(xb, yb)
            if not torch.isfinite(loss):
                raise UserError(
                    f"the loss became {loss.item()} at step {step}: training diverged. The last "
                    f"good checkpoint is {ckpt_path}. Try a lower --lr (now {args.lr}) or more "
                    "--warmup-iters."
                )
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if args.grad_clip > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip)
            optimizer.step()
            done = step + 1 - start
            bar.set_postfix(loss=f"{loss.item():.3f}",
                            tok_s=f"{done * tokens_per_step / (time.time() - t0):,.0f}")
        else:
            step = max(args.max_iters, start)
        bar.close()
        wall = time.time() - t0
        losses = evaluate(step) if step > start or not history else history[-1]
    # --8<-- [end:train_loop]
    print(f"step {step:5d}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f} "
          f"(best {best_val:.4f}, {wall:.1f} s)")

    corpus.tokenizer.save(out / "vocab.json")
    png = plot_losses(history, out / "loss.png", title=f"{__package__} on {args.data}")
    sample = sample_text(model, corpus.tokenizer, args.sample_tokens, args.seed, device)
    print(f"\nsample after training:\n{sample}\n")
    heatmap = attention_figure(model, corpus.tokenizer,
                               default_prompt(corpus.text, min(args.block_size, 24)),
                               out / "attention.png")
    metrics = {
        "stage": __package__, "data": args.data, "params": parts["total"], "steps": step,
        "train_loss": losses["train"], "val_loss": losses["val"], "best_val_loss": best_val,
        "train_seconds": round(wall, 2), "interrupted": step < args.max_iters, "sample": sample,
    }
    (out / "metrics.json").write_text(json.dumps(metrics, ensure_ascii=False, indent=2), encoding="utf-8")
    print(f"checkpoint: {ckpt_path} (best: {out / 'best.pt'})\nlog:        {out / 'log.jsonl'}\n"
          f"loss curve: {png}\nattention:  {heatmap}\nmetrics:    {out / 'metrics.json'}")
    return metrics


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        train(args)
    except UserError as e:
        parser.exit(2, f"error: {e}\n")


if __name__ == "__main__":
    sys.exit(main())
