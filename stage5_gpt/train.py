"""Train this stage's model and save it: python -m <stage>.train

Loads the corpus, trains with AdamW and prints train/val loss estimates. The
bookkeeping around the loop (checkpoints, --resume, Ctrl-C, the log and the
figures written to --out-dir) is harness.py's job, so this file is the loop,
here with the GPT recipe: decay groups, warmup + cosine, gradient clipping.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import math
import sys
import time
from pathlib import Path

import torch

from .cli import (
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
from .visualize import attention_figure, default_prompt

# --8<-- [start:presets]
# Named settings: --preset NAME sets these defaults; flags given beside it still win.
PRESETS = {
    # nanoGPT's configuration for a laptop CPU (its README), for side-by-side runs.
    "nanogpt-cpu": dict(data="shakespeare", block_size=64, batch_size=12, n_layer=4, n_head=4,
                        n_embd=128, dropout=0.0, bias=False, max_iters=2000, lr=1e-3,
                        min_lr=1e-4, warmup_iters=100, eval_interval=250, eval_iters=20),
    # The same model, a larger batch and learning rate, and 3000 steps: Tiny Shakespeare
    # to a val loss under 1.80 in about two minutes on 2 CPU cores.
    "shakespeare-2min": dict(data="shakespeare", block_size=64, batch_size=16, n_layer=4,
                             n_head=4, n_embd=128, dropout=0.0, bias=False, max_iters=3000,
                             lr=2e-3, min_lr=1e-4, warmup_iters=100, eval_interval=500,
                             eval_iters=20),
}
# --8<-- [end:presets]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=f"python -m {__package__}.train",
        description=__doc__.splitlines()[0].split(": ")[0] + ".",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    # --resume restores every flag of the data, model and training groups.
    g = p.add_argument_group("data")
    g.add_argument("--data", default="en", help=DATA_HELP)
    g.add_argument("--val-fraction", type=open_fraction, default=0.1, help="share held out for validation")
    g = p.add_argument_group("model")
    g.add_argument("--block-size", type=positive_int, default=64, help="T: context length")
    g.add_argument("--n-embd", type=positive_int, default=128, help="C: embedding width")
    g.add_argument("--n-head", type=positive_int, default=4, help="attention heads per block (must divide --n-embd)")
    g.add_argument("--n-layer", type=positive_int, default=4, help="Transformer blocks")
    g.add_argument("--dropout", type=unit_interval, default=0.1, help="dropout probability while training")
    g.add_argument("--activation", default="gelu", choices=ACTIVATIONS, help="feed-forward non-linearity")
    g.add_argument("--bias", action=argparse.BooleanOptionalAction, default=True, help="biases in projections and LayerNorm")
    g.add_argument("--tie-weights", action="store_true", help="share token embedding and output head")
    g = p.add_argument_group("training")
    g.add_argument("--batch-size", type=positive_int, default=12, help="B: windows per step")
    g.add_argument("--lr", type=learning_rate, default=2e-3, help="peak learning rate")
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
    g.add_argument("--threads", type=positive_int, default=None, help="CPU threads (default: timed, the fastest of 1..all)")
    g.add_argument("--compile", action="store_true", help="torch.compile the model (faster on long runs)")
    g.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16"], help="precision of the forward pass (auto: bfloat16 where this GPU or CPU computes it fast, else float32)")
    g.add_argument("--preset", choices=PRESETS, default=None, help="named settings: "
                   + "; ".join(f"{name}: " + " ".join(f"--{k.replace('_', '-')} {v}"
                                                      for k, v in flags.items())
                               for name, flags in PRESETS.items()))
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
    decay_iters = args.lr_decay_iters or max(args.max_iters, 1)
    if step < args.warmup_iters:
        return args.lr * (step + 1) / args.warmup_iters
    if step >= decay_iters:
        return args.min_lr
    progress = (step - args.warmup_iters) / max(1, decay_iters - args.warmup_iters)
    return args.min_lr + 0.5 * (1.0 + math.cos(math.pi * progress)) * (args.lr - args.min_lr)
# --8<-- [end:lr]


# --8<-- [start:optimizer]
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
# --8<-- [end:optimizer]


# --8<-- [start:precision]
@functools.cache
def bfloat16_is_fast(device: str) -> bool:
    """Is a bfloat16 matrix product at least twice as fast as a float32 one here?

    Recent GPUs, and CPUs with AVX512-BF16 or AMX, multiply bfloat16 (16-bit
    floats with float32's range) several times faster; elsewhere it is slower.
    On a CPU we time it rather than read the chip's feature list.
    """
    if device.startswith("cuda"):
        return torch.cuda.is_bf16_supported()
    if device != "cpu":
        return False
    g = torch.Generator().manual_seed(0)  # not the global generator: training's RNG stays
    a, b = torch.randn(256, 512, generator=g), torch.randn(512, 512, generator=g)

    def seconds(x: torch.Tensor, y: torch.Tensor) -> float:
        x @ y  # warm up
        t0 = time.perf_counter()
        for _ in range(10):
            x @ y
        return time.perf_counter() - t0

    return 2 * seconds(a.bfloat16(), b.bfloat16()) < seconds(a, b)
# --8<-- [end:precision]


def train(args: argparse.Namespace) -> dict:
    run = Run(args, build_parser())  # checks --out-dir, loads the data, restores a --resume
    if args.dtype == "bfloat16" and run.device.split(":")[0] not in ("cpu", "cuda"):
        raise UserError(f"--dtype bfloat16 is for a CPU or a CUDA GPU, not {run.device}; "
                        "use --dtype float32 (or auto).")
    bf16 = args.dtype == "bfloat16" or (args.dtype == "auto" and bfloat16_is_fast(run.device))
    model = GPT(model_config(args, run.vocab_size)).to(run.device)
    optimizer = make_optimizer(model, args)
    net = run.start(model, optimizer)  # the model, or its DDP wrapper under torchrun
    run.say(f"precision: {'bfloat16' if bf16 else 'float32'} forward pass (--dtype {args.dtype})")
    if args.compile:
        net = torch.compile(net)  # faster steps on long runs, after a slow first one
    autocast = (torch.autocast(run.device.split(":")[0], dtype=torch.bfloat16) if bf16
                else contextlib.nullcontext())
    # --8<-- [start:train_loop]
    for step in run.steps():  # every --eval-interval steps: losses, log, checkpoints
        for group in optimizer.param_groups:
            group["lr"] = get_lr(step, args)  # warmup, then cosine decay
        xb, yb = run.get_batch()  # (B, T) inputs, (B, T) targets
        with autocast:  # matrix products in bfloat16 where they are fast (see --dtype)
            _, loss = net(xb, yb)
        run.check(loss)  # nan or inf: stop, keeping the last good checkpoint
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if args.grad_clip > 0:  # one bad batch cannot throw the weights far
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip)
        optimizer.step()
    # --8<-- [end:train_loop]
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
