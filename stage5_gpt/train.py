"""Train this stage's model and save it: python -m <stage>.train

Loads the corpus, builds the model and trains it. The loop below shows every
phase of a step; the bookkeeping each phase needs (checkpoints, --resume,
Ctrl-C, the log, the progress bar) lives in harness.py, so this file stays the lesson.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import torch

from .cli import (
    HelpFormatter,
    learning_rate,
    non_negative_float,
    non_negative_int,
    open_fraction,
    positive_int,
    run_cli,
    unit_interval,
)
from .data import DATA_HELP
from .errors import UserError
from .harness import Run
from .model import ACTIVATIONS, GPT, GPTConfig
from .precision import DTYPES
from .presets import PRESETS, presets_help
from .prompts import default_prompt
from .visualize import attention_figure


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=f"python -m {__package__}.train",
        description=__doc__.splitlines()[0].split(": ")[0] + ".",
        formatter_class=HelpFormatter,
    )
    g = p.add_argument_group("data")
    g.add_argument("--data", default="en", help=DATA_HELP)
    g.add_argument("--val-fraction", type=open_fraction, default=0.1, help="share held out for validation")
    g = p.add_argument_group("model")
    g.add_argument("--block-size", type=positive_int, default=64, help="T: context length")
    g.add_argument("--n-embd", type=positive_int, default=128, help="C: embedding width")
    g.add_argument("--n-head", type=positive_int, default=4, help="attention heads per block (must divide --n-embd)")
    g.add_argument("--n-layer", type=positive_int, default=4, help="Transformer blocks")
    g.add_argument("--dropout", type=unit_interval, default=0.1, help="dropout probability while training")
    g.add_argument("--activation", default="gelu", choices=ACTIVATIONS, help="the MLP's non-linearity")
    g.add_argument("--bias", action=argparse.BooleanOptionalAction, default=True, help="biases in every Linear but the output head, and in LayerNorm (GPT-2 has them)")
    g.add_argument("--tie-weights", action=argparse.BooleanOptionalAction, default=True, help="the output head reuses the token embedding (GPT-2 does)")
    g = p.add_argument_group("training")
    g.add_argument("--batch-size", type=positive_int, default=12, help="B: windows per step")
    g.add_argument("--lr", type=learning_rate, default=3e-3, help="peak learning rate")
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
    g = p.add_argument_group("run")
    g.add_argument("--max-iters", type=non_negative_int, default=2000, help="optimizer steps in total")
    g.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda", "mps"], help="where to train")
    g.add_argument("--threads", type=positive_int, default=None, help="CPU threads (default: the fastest count, timed once at the start)")
    g.add_argument("--dtype", default="auto", choices=DTYPES, help="precision of the forward pass (auto: bfloat16 where this GPU or CPU computes it fast, float16 on another GPU, else float32; see precision.py)")
    g.add_argument("--preset", choices=PRESETS, default=None, help=presets_help())
    g.add_argument("--out-dir", type=Path, default=Path("out") / __package__, help="checkpoints, log and figures go here")
    g.add_argument("--resume", action="store_true", help="continue from OUT_DIR/ckpt.pt exactly where it stopped")
    g.add_argument("--sample-tokens", type=non_negative_int, default=200, help="characters sampled before and after training")
    return p


# What --resume takes from the checkpoint: every setting that decides what the run computes
# (a flag given beside --resume must agree). --max-iters may change.
RESUMED = ("data", "val_fraction",  # data
           "block_size", "n_embd", "n_head", "n_layer", "dropout", "activation",
           "bias", "tie_weights",  # model
           "batch_size", "lr", "min_lr", "warmup_iters", "lr_decay_iters", "weight_decay",
           "beta1", "beta2", "grad_clip", "eval_interval", "eval_iters", "seed")  # training


def model_config(args: argparse.Namespace, vocab_size: int) -> GPTConfig:
    return GPTConfig(vocab_size=vocab_size, block_size=args.block_size, n_layer=args.n_layer,
                     n_head=args.n_head, n_embd=args.n_embd, dropout=args.dropout,
                     bias=args.bias, activation=args.activation, tie_weights=args.tie_weights)


def get_lr(step: int, args: argparse.Namespace) -> float:
    """Linear warmup to --lr, then cosine decay to --min-lr at --lr-decay-iters."""
    decay_iters = args.lr_decay_iters or max(args.max_iters, 1)
    if step < args.warmup_iters:
        return args.lr * (step + 1) / args.warmup_iters
    if step >= decay_iters:
        return args.min_lr
    progress = (step - args.warmup_iters) / max(1, decay_iters - args.warmup_iters)
    return args.min_lr + 0.5 * (1.0 + math.cos(math.pi * progress)) * (args.lr - args.min_lr)


def make_optimizer(model: GPT, args: argparse.Namespace) -> torch.optim.AdamW:
    """Weight decay pulls matrices towards 0; biases, LayerNorm gains stay free."""
    params = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in params if p.dim() >= 2]  # embeddings and Linear weights
    no_decay = [p for p in params if p.dim() < 2]  # biases and LayerNorm weights
    fused = all(p.device.type in ("cpu", "cuda") for p in params)  # one kernel for all updates
    return torch.optim.AdamW(
        [{"params": decay, "weight_decay": args.weight_decay},
         {"params": no_decay, "weight_decay": 0.0}],
        lr=args.lr, betas=(args.beta1, args.beta2), fused=fused)


def train(args: argparse.Namespace) -> dict:
    run = Run(args, build_parser(), RESUMED)  # checks --out-dir, loads the data, reads a --resume
    args = run.args  # the settings this run trains with (a --resume's own)
    if args.min_lr > args.lr:
        raise UserError(f"--min-lr {args.min_lr} is above --lr {args.lr}: the cosine would climb "
                        f"instead of decaying. Give a --min-lr at most {args.lr} (e.g. --lr / 10).")
    model = GPT(model_config(args, run.vocab_size)).to(run.device)
    optimizer = make_optimizer(model, args)
    net = run.start(model, optimizer)  # the model, or its DDP wrapper under torchrun
    for step in run.steps():  # 0 .. --max-iters - 1; Ctrl-C ends the loop early
        if run.evaluation_due(step):  # every --eval-interval steps
            run.evaluate()  # losses on fixed batches, log.jsonl, checkpoints
        for group in optimizer.param_groups:
            group["lr"] = get_lr(step, args)  # warmup, then cosine decay
        xb, yb = run.get_batch()  # (B, T) inputs, (B, T) targets
        with run.precision:  # 16-bit matrix products where this CPU or GPU is fast at them
            _, loss = net(xb, yb)  # forward: mean cross-entropy over B*T targets
        run.check(loss)  # nan or inf: stop, keeping the last good checkpoint
        optimizer.zero_grad(set_to_none=True)
        scaler = run.scaler  # float16 only: scales the loss up and the gradients back down
        scaler.scale(loss).backward()  # backward: the gradient of the loss for every weight
        if args.grad_clip > 0:  # one bad batch cannot throw the weights far
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip)
        scaler.step(optimizer)  # move every weight a little against its gradient
        scaler.update()
    metrics = run.finish()  # final losses, checkpoints, loss.png, metrics.json, a sample
    if run.main:  # under torchrun, only the first process writes files
        prompt = default_prompt(run.corpus.text, min(args.block_size, 24))
        print(f"attention:  {attention_figure(model, run.corpus.tokenizer, prompt, run.out / 'attention.png')}")
    return metrics


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    preset = parser.parse_known_args(argv)[0].preset
    if preset:
        parser.set_defaults(**PRESETS[preset])  # the preset's values become the defaults
    run_cli(parser, train, argv)


if __name__ == "__main__":
    sys.exit(main())
