"""Train this stage's model and save it: python -m <stage>.train

Loads the corpus, builds the model and trains it. The loop below shows every
phase of a step; the bookkeeping each phase needs (checkpoints, --resume,
Ctrl-C, the log, the progress bar) lives in harness.py, so this file stays the lesson.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from .cli import (
    HelpFormatter,
    learning_rate,
    non_negative_int,
    open_fraction,
    positive_int,
    run_cli,
)
from .data import DATA_HELP
from .harness import Run
from .model import POSITIONS, LanguageModel, ModelConfig
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
    g.add_argument("--block-size", type=positive_int, default=32, help="T: context length")
    g.add_argument("--n-embd", type=positive_int, default=32, help="C: embedding width (= head size)")
    g.add_argument("--pos", default="learned", choices=POSITIONS, help="position information")
    g = p.add_argument_group("training")
    g.add_argument("--batch-size", type=positive_int, default=32, help="B: windows per step")
    g.add_argument("--lr", type=learning_rate, default=3e-3, help="AdamW learning rate")
    g.add_argument("--eval-interval", type=positive_int, default=500, help="steps between loss estimates and checkpoints")
    g.add_argument("--eval-iters", type=positive_int, default=50, help="batches per loss estimate")
    g.add_argument("--seed", type=int, default=1337, help="seeds weights, batches and samples")
    g = p.add_argument_group("run")
    g.add_argument("--max-iters", type=non_negative_int, default=5000, help="optimizer steps in total")
    g.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda", "mps"], help="where to train")
    g.add_argument("--threads", type=positive_int, default=None, help="CPU threads (default: the fastest count, timed once at the start)")
    g.add_argument("--out-dir", type=Path, default=Path("out") / __package__, help="checkpoints, log and figures go here")
    g.add_argument("--resume", action="store_true", help="continue from OUT_DIR/ckpt.pt exactly where it stopped")
    g.add_argument("--sample-tokens", type=non_negative_int, default=200, help="characters sampled before and after training")
    return p


# What --resume takes from the checkpoint: every setting that decides what the run computes
# (a flag given beside --resume must agree). --max-iters may change.
RESUMED = ("data", "val_fraction",  # data
           "block_size", "n_embd", "pos",  # model
           "batch_size", "lr", "eval_interval", "eval_iters", "seed")  # training


def model_config(args: argparse.Namespace, vocab_size: int) -> ModelConfig:
    return ModelConfig(vocab_size=vocab_size, block_size=args.block_size, n_embd=args.n_embd,
                       pos=args.pos)


def train(args: argparse.Namespace) -> dict:
    run = Run(args, build_parser(), RESUMED)  # checks --out-dir, loads the data, reads a --resume
    args = run.args  # the settings this run trains with (a --resume's own)
    model = LanguageModel(model_config(args, run.vocab_size)).to(run.device)
    # weight_decay=0.0: PyTorch's default (0.01) would pull every weight towards 0 unseen;
    # weight decay arrives in stage 5, on the weight matrices only. fused=True: one kernel
    # updates every weight, much faster on a CPU for a big table (the bigram on Chinese).
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0, fused=True)
    run.start(model, optimizer)  # restores a --resume, picks the threads, prints a sample
    for step in run.steps():  # 0 .. --max-iters - 1; Ctrl-C ends the loop early
        if run.evaluation_due(step):  # every --eval-interval steps
            run.evaluate()  # losses on fixed batches, log.jsonl, checkpoints
        xb, yb = run.get_batch()  # (B, T) inputs, (B, T) targets
        _, loss = model(xb, yb)  # forward: mean cross-entropy over B*T targets
        run.check(loss)  # nan or inf: stop, keeping the last good checkpoint
        optimizer.zero_grad(set_to_none=True)
        loss.backward()  # backward: the gradient of the loss for every weight
        optimizer.step()  # move every weight a little against its gradient
    metrics = run.finish()  # final losses, checkpoints, loss.png, metrics.json, a sample
    prompt = default_prompt(run.corpus.text, min(args.block_size, 24))
    print(f"attention:  {attention_figure(model, run.corpus.tokenizer, prompt, run.out / 'attention.png')}")
    return metrics


def main(argv: list[str] | None = None) -> None:
    run_cli(build_parser(), train, argv)


if __name__ == "__main__":
    sys.exit(main())
