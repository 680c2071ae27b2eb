"""Train this stage's model and save it: python -m <stage>.train

Loads the corpus, trains with AdamW, prints train/val loss estimates, and writes
to --out-dir a checkpoint (ckpt.pt), the loss curve (loss.png), the attention
heatmap (attention.png) and the final figures (metrics.json). Ctrl-C stops early
and still saves a usable checkpoint.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
from tqdm import tqdm

from .checkpoint import save_checkpoint
from .cli import check_out_dir, non_negative_int, pick_device, positive_float, positive_int
from .data import DATA_HELP, Corpus, check_length, get_batch
from .errors import UserError
from .model import ACTIVATIONS, ATTENTIONS, NORMS, POSITIONS, LanguageModel, ModelConfig
from .plots import plot_losses
from .visualize import attention_figure, default_prompt


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
    g.add_argument("--block-size", type=positive_int, default=32, help="T: context length")
    g.add_argument("--n-embd", type=positive_int, default=64, help="C: embedding width")
    g.add_argument("--pos", default="learned", choices=POSITIONS, help="position information")
    g.add_argument("--n-head", type=positive_int, default=4, help="attention heads per block (must divide --n-embd)")
    g.add_argument("--n-layer", type=positive_int, default=3, help="Transformer blocks")
    g.add_argument("--dropout", type=float, default=0.1, help="dropout probability while training")
    g.add_argument("--activation", default="relu", choices=ACTIVATIONS, help="feed-forward non-linearity")
    g.add_argument("--norm", default="pre", choices=NORMS, help="LayerNorm before or after each residual branch")
    g.add_argument("--attention", default="batched", choices=ATTENTIONS, help="multi-head form")
    g = p.add_argument_group("training")
    g.add_argument("--max-iters", type=non_negative_int, default=3000, help="optimizer steps")
    g.add_argument("--batch-size", type=positive_int, default=32, help="B: windows per step")
    g.add_argument("--lr", type=positive_float, default=1e-3, help="AdamW learning rate")
    g.add_argument("--eval-interval", type=positive_int, default=300, help="steps between loss estimates")
    g.add_argument("--eval-iters", type=positive_int, default=50, help="batches per loss estimate")
    g.add_argument("--seed", type=int, default=1337, help="seeds weights, batches and samples")
    g.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda", "mps"], help="where to train")
    g = p.add_argument_group("output")
    g.add_argument("--out-dir", type=Path, default=Path("out") / __package__, help="checkpoint and figures go here")
    g.add_argument("--sample-tokens", type=non_negative_int, default=200, help="characters sampled before and after training")
    return p


def model_config(args: argparse.Namespace, vocab_size: int) -> ModelConfig:
    return ModelConfig(vocab_size=vocab_size, block_size=args.block_size, n_embd=args.n_embd,
                       pos=args.pos, n_head=args.n_head, n_layer=args.n_layer, dropout=args.dropout,
                       activation=args.activation, norm=args.norm, attention=args.attention)


# --8<-- [start:estimate_loss]
@torch.no_grad()
def estimate_loss(model: LanguageModel, splits: dict[str, torch.Tensor], args: argparse.Namespace,
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
# --8<-- [end:estimate_loss]


def sample_text(model: LanguageModel, corpus: Corpus, n: int, seed: int, device: str) -> str:
    start = "\n" if "\n" in corpus.tokenizer.stoi else corpus.tokenizer.chars[0]
    idx = torch.tensor([corpus.tokenizer.encode(start)], device=device)
    model.eval()  # no dropout while sampling
    out = model.generate(idx, n, generator=torch.Generator(device).manual_seed(seed))
    model.train()
    return corpus.tokenizer.decode(out[0, 1:].tolist())


def train(args: argparse.Namespace) -> dict:
    check_out_dir(args.out_dir)
    device = pick_device(args.device)
    torch.manual_seed(args.seed)
    corpus = Corpus.load(args.data, args.val_fraction)
    check_length(corpus.train, args.block_size, "train")
    check_length(corpus.val, args.block_size, "val")
    model = LanguageModel(model_config(args, corpus.tokenizer.vocab_size)).to(device)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"{__package__}: {n_params:,} parameters, vocab {corpus.tokenizer.vocab_size}, "
          f"train {len(corpus.train):,} / val {len(corpus.val):,} tokens, device {device}")
    print(f"sample before training:\n{sample_text(model, corpus, args.sample_tokens, args.seed, device)}\n")

    # --8<-- [start:train_loop]
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    splits = {"train": corpus.train, "val": corpus.val}
    batches = torch.Generator().manual_seed(args.seed)
    history: list[dict] = []
    step, interrupted, t0 = 0, False, time.time()
    bar = tqdm(range(args.max_iters), desc="training", unit="step", dynamic_ncols=True)
    try:
        for step in bar:
            if step % args.eval_interval == 0:
                losses = estimate_loss(model, splits, args, device)
                history.append({"step": step, **losses})
                bar.write(f"step {step:5d}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}")
            xb, yb = get_batch(corpus.train, args.batch_size, args.block_size, batches, device)
            _, loss = model(xb, yb)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
        step = args.max_iters
    except KeyboardInterrupt:
        interrupted = True
        bar.write(f"interrupted at step {step}: saving what we have")
    finally:
        bar.close()
    wall = time.time() - t0
    # --8<-- [end:train_loop]

    losses = estimate_loss(model, splits, args, device)
    history.append({"step": step, **losses})
    print(f"step {step:5d}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f} "
          f"({wall:.1f} s)")
    out = Path(args.out_dir)
    ckpt = save_checkpoint(out / "ckpt.pt", model, corpus.tokenizer, step,
                           history=history, args={k: str(v) for k, v in vars(args).items()})
    corpus.tokenizer.save(out / "vocab.json")
    png = plot_losses(history, out / "loss.png", title=f"{__package__} on {args.data}")
    sample = sample_text(model, corpus, args.sample_tokens, args.seed, device)
    print(f"\nsample after training:\n{sample}\n")
    heatmap = attention_figure(model, corpus.tokenizer,
                               default_prompt(corpus.text, min(args.block_size, 24)),
                               out / "attention.png")
    metrics = {
        "stage": __package__, "data": args.data, "params": n_params, "steps": step,
        "train_loss": losses["train"], "val_loss": losses["val"], "train_seconds": round(wall, 2),
        "interrupted": interrupted, "sample": sample,
    }
    (out / "metrics.json").write_text(json.dumps(metrics, ensure_ascii=False, indent=2), encoding="utf-8")
    print(f"checkpoint: {ckpt}\nloss curve: {png}\nattention:  {heatmap}\n"
          f"metrics:    {out / 'metrics.json'}")
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
