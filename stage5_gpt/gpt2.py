"""GPT-2's weights, name by name, in this stage's GPT: python -m <stage>.gpt2

Stage 5 uses GPT-2's names (``transformer.h.0.attn.c_attn.weight`` ...), so a GPT-2
checkpoint in the Hugging Face layout maps onto it almost one to one. ``from_gpt2``
does the mapping and says what does not carry over:

- GPT-2 stores its projections as ``Conv1D`` weights, (in, out); ``nn.Linear`` keeps
  (out, in): those four matrices per block are transposed;
- GPT-2's ``c_attn`` has a bias; ours has none (q, k and v without bias), so a GPT-2
  whose ``c_attn.bias`` is not zero cannot be loaded exactly;
- our ``lm_head`` has a bias (with ``--bias``) that GPT-2 lacks: it is set to zero;
- GPT-2's ``attn.bias``/``attn.masked_bias`` are its causal mask, not weights: dropped;
- GPT-2 computes GELU with the tanh approximation; ``nn.GELU()`` is the exact one.

Nothing is downloaded: ``python -m <stage>.gpt2`` prints the mapping for GPT-2 small's
sizes from the names and shapes alone.
"""

from __future__ import annotations

import argparse
import sys

import torch

from .model import GPT, GPTConfig

TRANSPOSED = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")
DROPPED = (".attn.bias", ".attn.masked_bias")  # GPT-2's mask buffers
SMALL = dict(vocab_size=50257, block_size=1024, n_layer=12, n_head=12, n_embd=768)  # GPT-2 small


def config_for(state: dict[str, torch.Tensor]) -> GPTConfig:
    """The GPTConfig that holds a GPT-2 state dict: its sizes, biases, tied head, GELU."""
    V, C = state["transformer.wte.weight"].shape
    layers = {int(k.split(".")[2]) for k in state if k.startswith("transformer.h.")}
    return GPTConfig(vocab_size=V, block_size=state["transformer.wpe.weight"].shape[0],
                     n_layer=len(layers), n_head=max(1, C // 64), n_embd=C, bias=True,
                     activation="gelu", tie_weights=True)


def from_gpt2(state: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], list[str]]:
    """A GPT-2 state dict (Hugging Face names) as this stage's GPT's, and notes on what
    did not carry over exactly."""
    ours, notes = {}, []
    for name, t in state.items():
        if name.endswith(DROPPED):
            continue
        if name.endswith("attn.c_attn.bias"):
            if t.abs().max() > 0:
                notes.append(f"{name}: GPT-2's q, k, v bias is not zero; ours has none")
            continue
        ours[name] = t.T.contiguous() if name.endswith(TRANSPOSED) else t
    ours.setdefault("lm_head.weight", ours["transformer.wte.weight"])  # tied in GPT-2
    ours["lm_head.bias"] = torch.zeros(ours["lm_head.weight"].shape[0])
    return ours, notes


def mapping(config: GPTConfig) -> list[tuple[str, tuple[int, ...], str]]:
    """(our name, our shape, what GPT-2 calls it) for every weight of one block and the rest."""
    model = GPT(config)
    rows = []
    for name, p in model.state_dict().items():
        if ".h." in name and ".h.0." not in name:
            continue  # every block is like block 0
        their = name + (" (transposed)" if name.endswith(TRANSPOSED) else "")
        if name == "lm_head.bias":
            their = "none: set to 0"
        rows.append((name, tuple(p.shape), their))
    return rows


def main(argv: list[str] | None = None) -> None:
    argparse.ArgumentParser(
        prog="python -m stage5_gpt.gpt2",
        description="Print how the weights of GPT-2 small map onto stage 5's GPT: each of our "
                    "tensors, its shape at GPT-2 small's size, and the name it has in GPT-2's "
                    "checkpoint.").parse_args(argv)
    with torch.device("meta"):  # shapes only: no memory, no weights
        rows = mapping(GPTConfig(**SMALL, bias=True, tie_weights=True))
    print(f"{'stage 5 (ours)':<34} {'shape':<14} GPT-2's name")
    for name, shape, their in rows:
        print(f"{name:<34} {str(shape):<14} {their}")
    print("transformer.h.0.attn.c_attn.bias   GPT-2 only: ours has no q, k, v bias")


if __name__ == "__main__":
    sys.exit(main())
