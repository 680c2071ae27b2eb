"""Named settings for stage 5's trainer: ``python -m <stage>.train --preset NAME``.

A preset sets the defaults of several flags at once; flags given beside it still
win. Each is a run worth repeating: nanoGPT's own CPU configuration, for a side
by side comparison, and short runs on the classic corpora that show what the
GPT learns in about two minutes on a laptop CPU.
"""

PRESETS = {
    # nanoGPT's configuration for a laptop CPU (its README), for side-by-side runs: its model
    # too, biases off and the head tied, as nanoGPT's model.py builds it.
    "nanogpt-cpu": dict(data="shakespeare", block_size=64, batch_size=12, n_layer=4, n_head=4,
                        n_embd=128, dropout=0.0, bias=False, max_iters=2000, lr=1e-3,
                        min_lr=1e-4, warmup_iters=100, eval_interval=250, eval_iters=20),
    # The same model with a larger batch and learning rate: Tiny Shakespeare in about two
    # minutes on two CPU cores.
    "shakespeare-2min": dict(data="shakespeare", block_size=64, batch_size=16, n_layer=4,
                             n_head=4, n_embd=128, dropout=0.0, bias=False, max_iters=1200,
                             lr=3e-3, min_lr=1e-4, warmup_iters=100, eval_interval=300,
                             eval_iters=20),
    # The Tang poems' regulated verse in about two minutes: the same model, fewer steps (its
    # 6,456 characters make the output layer the biggest part of every step).
    "tang-2min": dict(data="tang", block_size=64, batch_size=12, n_layer=4, n_head=4,
                      n_embd=128, dropout=0.0, bias=False, max_iters=800, lr=3e-3, min_lr=1e-4,
                      warmup_iters=50, eval_interval=200, eval_iters=10),
}


def as_flag(key: str, value: object) -> str:
    """One setting as a reader types it: --n-layer 4, --no-bias."""
    flag = key.replace("_", "-")
    if isinstance(value, bool):
        return f"--{flag}" if value else f"--no-{flag}"
    return f"--{flag} {value}"


def presets_help() -> str:
    """What --help says of --preset: every preset with the flags it sets."""
    return "named settings: " + "; ".join(
        f"{name}: " + " ".join(as_flag(k, v) for k, v in flags.items())
        for name, flags in PRESETS.items())
