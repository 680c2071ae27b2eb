"""The block, varied: the same multi-head attention written head by head, the 2017
Transformer's LayerNorm placement, and blocks with a part taken out.

Skip this file on a first reading: model.py is the block stage 5 builds on. The
variants here are switches of train.py (``--attention heads``, ``--norm post``,
``--norm none``, ``--no-residual``, ``--no-mlp``), there to compare forms and to
measure what each part of the block buys. ``build_model`` makes the taught
``LanguageModel`` when no switch is set, and a ``VariantModel`` otherwise.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields

import torch
import torch.nn as nn
from torch.nn import functional as F

from .errors import UserError
from .model import Block, CausalSelfAttention, LanguageModel, ModelConfig

NORMS = ("pre", "post", "none")
ATTENTIONS = ("batched", "heads")


@dataclass
class VariantConfig(ModelConfig):
    norm: str = "pre"  # LayerNorm before (pre) or after (post) each residual branch, or none
    attention: str = "batched"  # multi-head form: batched (one matmul) or heads (a list)
    residual: bool = True  # x + f(x); False: x = f(x), to measure what the residual path buys
    mlp: bool = True  # the MLP branch; False: attention only, to measure what it buys

    def __post_init__(self):
        super().__post_init__()
        for name, allowed in (("norm", NORMS), ("attention", ATTENTIONS)):
            if getattr(self, name) not in allowed:
                raise UserError(f"{name} must be one of {', '.join(allowed)}, "
                                f"got {getattr(self, name)!r}")
        for name in ("residual", "mlp"):
            if not isinstance(getattr(self, name), bool):
                raise UserError(f"{name} must be True or False, got {getattr(self, name)!r}")

    @property
    def plain(self) -> bool:
        """No switch set: the block of model.py."""
        return (self.norm, self.attention, self.residual, self.mlp) == ("pre", "batched", True, True)


def build_model(config: VariantConfig) -> LanguageModel:
    """The taught LanguageModel for a plain config, else a VariantModel."""
    if config.plain:
        base = {f.name for f in fields(ModelConfig)}
        return LanguageModel(ModelConfig(**{k: v for k, v in asdict(config).items() if k in base}))
    return VariantModel(config)


class Head(nn.Module):
    """One head of self-attention, as in stage 3: softmax(q k^T / sqrt(head_size) + mask) v."""

    def __init__(self, n_embd: int, head_size: int, block_size: int, dropout: float = 0.0):
        super().__init__()
        self.key = nn.Linear(n_embd, head_size, bias=False)
        self.query = nn.Linear(n_embd, head_size, bias=False)
        self.value = nn.Linear(n_embd, head_size, bias=False)
        self.register_buffer("tril", torch.tril(torch.ones(block_size, block_size)), persistent=False)
        self.dropout = nn.Dropout(dropout)
        self.last_attention: torch.Tensor | None = None  # (B, T, T), kept for plots

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        k = self.key(x)  # (B, T, hs)
        q = self.query(x)  # (B, T, hs)
        v = self.value(x)  # (B, T, hs)
        wei = q @ k.transpose(-2, -1) / math.sqrt(k.size(-1))  # (B, T, T)
        wei = wei.masked_fill(self.tril[:T, :T] == 0, float("-inf"))  # no peeking ahead
        wei = F.softmax(wei, dim=-1)  # each row sums to 1
        self.last_attention = wei.detach()
        return self.dropout(wei) @ v  # (B, T, hs)


class MultiHeadAttention(nn.Module):
    """The attention of model.py head by head: n_head separate heads, concatenated, projected."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        C, nh = config.n_embd, config.n_head
        self.heads = nn.ModuleList(
            [Head(C, C // nh, config.block_size, config.dropout) for _ in range(nh)])
        self.c_proj = nn.Linear(C, C)  # mixes what the heads found
        self.resid_dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.cat([h(x) for h in self.heads], dim=-1)  # n_head x (B, T, hs) -> (B, T, C)
        return self.resid_dropout(self.c_proj(out))  # (B, T, C)

    @property
    def last_attention(self) -> torch.Tensor | None:
        if any(h.last_attention is None for h in self.heads):
            return None  # no forward pass yet
        return torch.stack([h.last_attention for h in self.heads], dim=1)  # (B, nh, T, T)


def copy_heads_into_batched(mha: MultiHeadAttention, csa: CausalSelfAttention) -> None:
    """Load the head-by-head weights into the batched form, showing where each head
    lives in c_attn: its output rows are [q of head 0, q of head 1, ..., k of head 0, ...]."""
    with torch.no_grad():
        q = torch.cat([h.query.weight for h in mha.heads], dim=0)  # (C, C)
        k = torch.cat([h.key.weight for h in mha.heads], dim=0)
        v = torch.cat([h.value.weight for h in mha.heads], dim=0)
        csa.c_attn.weight.copy_(torch.cat([q, k, v], dim=0))  # (3C, C)
        csa.c_proj.load_state_dict(mha.c_proj.state_dict())


class VariantBlock(Block):
    """The block with its wiring switched: --norm post (LayerNorm after the addition, as
    in the 2017 Transformer), --norm none (no LayerNorm), --no-residual (x = f(x)
    instead of x + f(x)), --no-mlp (attention only), --attention heads."""

    def __init__(self, config: VariantConfig):
        super().__init__(config)
        if config.attention == "heads":
            self.attn = MultiHeadAttention(config)
        if config.norm == "none":
            self.ln_1, self.ln_2 = nn.Identity(), nn.Identity()
        if not config.mlp:
            self.mlp, self.ln_2 = None, None
        self.post_norm, self.residual = config.norm == "post", config.residual

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for f, ln in ((self.attn, self.ln_1), (self.mlp, self.ln_2)):
            if f is None:  # --no-mlp: no second branch
                continue
            if self.post_norm:
                x = ln(x + f(x)) if self.residual else ln(f(x))  # (B, T, C)
            else:
                x = x + f(ln(x)) if self.residual else f(ln(x))
        return x


class VariantModel(LanguageModel):
    """LanguageModel built from VariantBlocks."""

    def __init__(self, config: VariantConfig):
        super().__init__(config)
        self.transformer.h = nn.ModuleList([VariantBlock(config) for _ in range(config.n_layer)])
        self.apply(self._init_weights)
