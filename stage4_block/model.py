"""The Transformer block: multi-head attention, an MLP, residuals, LayerNorm.

Stage 3 had one attention head. Now several heads look at the context in
parallel (each can track something different), a small MLP (the feed-forward
network) thinks about what they gathered, residual connections let both add to
the token's vector instead of replacing it, and LayerNorm keeps the numbers in a
healthy range. Stacking ``n_layer`` such blocks gives a deep model that still
trains. From here on the parts carry the names GPT-2 gives them (``wte``, ``h``,
``c_attn``, ``mlp``, ...), so stage 5 and GPT-2's own weights use the same ones.

>>> model = LanguageModel(ModelConfig(vocab_size=5, block_size=4, n_embd=8, n_head=2, n_layer=1))
>>> logits, loss = model(torch.zeros(2, 3, dtype=torch.long))
>>> tuple(logits.shape), loss
((2, 3, 5), None)
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import torch
import torch.nn as nn
from torch.nn import functional as F

from .errors import UserError

ACTIVATIONS = ("relu", "gelu")


@dataclass
class ModelConfig:
    vocab_size: int
    block_size: int = 32  # T_max: the longest context the model can see
    n_layer: int = 3  # blocks stacked on top of each other
    n_head: int = 4  # heads per block; each has head_size = n_embd // n_head
    n_embd: int = 64  # C: width of every token vector
    dropout: float = 0.0  # probability of zeroing activations during training
    activation: str = "relu"  # the MLP's non-linearity: relu or gelu

    def __post_init__(self):
        for name in ("vocab_size", "block_size", "n_embd", "n_head", "n_layer"):
            if getattr(self, name) < 1:
                raise UserError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.n_embd % self.n_head != 0:
            raise UserError(
                f"n_embd={self.n_embd} is not divisible by n_head={self.n_head}: every head "
                f"gets n_embd // n_head dimensions. Pick e.g. n_head in "
                f"{[h for h in range(1, self.n_embd + 1) if self.n_embd % h == 0][:8]}."
            )
        if not 0.0 <= self.dropout < 1.0:
            raise UserError(f"dropout must be in [0, 1), got {self.dropout}")
        if self.activation not in ACTIVATIONS:
            raise UserError(f"activation must be one of {', '.join(ACTIVATIONS)}, "
                            f"got {self.activation!r}")


class CausalSelfAttention(nn.Module):
    """n_head heads of causal self-attention at once: one matrix product makes the
    queries, keys and values of every head, and the heads are a batch dimension."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        C = config.n_embd
        self.n_head = config.n_head
        self.c_attn = nn.Linear(C, 3 * C, bias=False)  # q, k, v for all heads at once
        self.c_proj = nn.Linear(C, C)  # mixes what the heads found
        self.attn_dropout = nn.Dropout(config.dropout)
        self.resid_dropout = nn.Dropout(config.dropout)
        T = config.block_size
        self.register_buffer("tril", torch.tril(torch.ones(T, T)), persistent=False)
        self.last_attention: torch.Tensor | None = None  # (B, nh, T, T), kept for plots

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        nh, hs = self.n_head, C // self.n_head
        q, k, v = self.c_attn(x).split(C, dim=2)  # 3 x (B, T, C)
        # Split C into nh heads of hs, then move heads next to batch: (B, T, C) -> (B, nh, T, hs)
        q = q.view(B, T, nh, hs).transpose(1, 2)
        k = k.view(B, T, nh, hs).transpose(1, 2)
        v = v.view(B, T, nh, hs).transpose(1, 2)
        wei = q @ k.transpose(-2, -1) / math.sqrt(hs)  # (B, nh, T, T)
        wei = wei.masked_fill(self.tril[:T, :T] == 0, float("-inf"))
        wei = F.softmax(wei, dim=-1)
        self.last_attention = wei.detach()
        y = self.attn_dropout(wei) @ v  # (B, nh, T, hs)
        y = y.transpose(1, 2).contiguous().view(B, T, C)  # heads side by side again: (B, T, C)
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    """The feed-forward network: each token's vector on its own, C -> 4C -> C."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        C = config.n_embd
        self.c_fc = nn.Linear(C, 4 * C)
        self.act = nn.ReLU() if config.activation == "relu" else nn.GELU()
        self.c_proj = nn.Linear(4 * C, C)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.c_proj(self.act(self.c_fc(x))))  # (B, T, C)


class Block(nn.Module):
    """Communication (attention) then computation (MLP), each on a residual path:
    x + attn(ln_1(x)), then x + mlp(ln_2(x)), with LayerNorm before each branch
    ("pre-LN", GPT-2's wiring)."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd)
        self.mlp = MLP(config)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))  # (B, T, C)
        x = x + self.mlp(self.ln_2(x))
        return x


class LanguageModel(nn.Module):
    """Token + position embeddings -> n_layer Transformer blocks -> logits."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.config = config
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(config.vocab_size, config.n_embd),  # token embeddings
            wpe=nn.Embedding(config.block_size, config.n_embd),  # position embeddings
            h=nn.ModuleList([Block(config) for _ in range(config.n_layer)]),
        ))
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size)
        self.apply(self._init_weights)

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        # Small weights -> near-uniform first guesses -> initial loss close to ln(vocab_size).
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(
        self, idx: torch.Tensor, targets: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        B, T = idx.shape
        if T > self.config.block_size:
            raise UserError(
                f"sequence of {T} tokens is longer than block_size="
                f"{self.config.block_size}; crop it to the last block_size tokens "
                "(generate() does this for you)."
            )
        pos = torch.arange(T, device=idx.device)
        x = self.transformer.wte(idx) + self.transformer.wpe(pos)  # (B, T, C) + (T, C)
        for block in self.transformer.h:
            x = block(x)  # (B, T, C)
        logits = self.lm_head(x)  # (B, T, vocab_size)
        if targets is None:
            return logits, None
        B, T, V = logits.shape
        # cross_entropy wants (N, V) scores and (N,) class ids: flatten batch and time.
        loss = F.cross_entropy(logits.view(B * T, V), targets.view(B * T))
        return logits, loss

    @torch.no_grad()
    def attention_maps(self, idx: torch.Tensor) -> torch.Tensor:
        """Attention weights for ``idx``: (B, n_layer, n_head, T, T)."""
        self(idx)
        return torch.stack([b.attn.last_attention for b in self.transformer.h], dim=1)

    @torch.no_grad()
    def stream(
        self,
        idx: torch.Tensor,
        max_new_tokens: int,
        temperature: float = 1.0,
        top_k: int | None = None,
        generator: torch.Generator | None = None,
    ) -> Iterator[torch.Tensor]:
        """Yield each new token (B, 1) as soon as it is sampled."""
        for _ in range(max_new_tokens):
            idx_cond = idx[:, -self.config.block_size :]  # the model sees at most block_size
            logits, _ = self(idx_cond)  # (B, T, V)
            logits = logits[:, -1, :]  # only the last position predicts the next token
            idx_next = sample_next(logits, temperature, top_k, generator)  # (B, 1)
            idx = torch.cat((idx, idx_next), dim=1)  # (B, T + 1)
            yield idx_next

    def generate(self, idx: torch.Tensor, max_new_tokens: int, temperature: float = 1.0,
                 top_k: int | None = None, generator: torch.Generator | None = None
                 ) -> torch.Tensor:
        """Extend ``idx`` (B, T) by ``max_new_tokens`` sampled tokens, one at a time."""
        new = list(self.stream(idx, max_new_tokens, temperature, top_k, generator))
        return torch.cat([idx, *new], dim=1)


def sample_next(
    logits: torch.Tensor,
    temperature: float = 1.0,
    top_k: int | None = None,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """(B, V) logits -> (B, 1) next ids.

    temperature 0 means greedy (always the most likely token); higher values
    flatten the distribution. top_k keeps only the k most likely tokens.
    """
    if not temperature >= 0:  # also catches nan
        raise UserError(f"temperature must be >= 0 (0 means greedy), got {temperature}")
    if top_k is not None and top_k < 1:
        raise UserError(f"top_k must be at least 1, got {top_k}")
    if temperature == 0:
        return logits.argmax(dim=-1, keepdim=True)
    # Shift so the largest logit is 0, then scale by 1/temperature (capped at the largest
    # float): a tiny temperature pushes the others to a huge negative number (probability
    # 0, near-greedy) instead of overflowing to inf - inf = nan.
    scale = min(1.0 / temperature, torch.finfo(logits.dtype).max)
    logits = (logits - logits.max(dim=-1, keepdim=True).values) * scale
    if top_k is not None:
        kth = torch.topk(logits, min(top_k, logits.size(-1))).values[:, [-1]]  # (B, 1)
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = F.softmax(logits, dim=-1)  # (B, V)
    return torch.multinomial(probs, num_samples=1, generator=generator)
