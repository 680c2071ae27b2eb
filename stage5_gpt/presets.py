"""Named settings for stage 5's trainer: ``python -m <stage>.train --preset NAME``.

A preset sets the defaults of several flags at once; flags given beside it still
win. Each is a run worth repeating: nanoGPT's own CPU configuration, for a side
by side comparison, and short runs on the classic corpora that show what the
GPT learns in about two minutes on a laptop CPU.
"""

# --8<-- [start:presets]
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


def presets_help() -> str:
    """What --help says of --preset: every preset with the flags it sets."""
    return "named settings: " + "; ".join(
        f"{name}: " + " ".join(f"--{k.replace('_', '-')} {v}" for k, v in flags.items())
        for name, flags in PRESETS.items())
