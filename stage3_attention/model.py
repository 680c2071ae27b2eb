"""One head of causal self-attention: predictions that depend on context.

Each character now becomes a vector (token embedding) plus where it sits
(position embedding). One attention head lets every position look back at the
positions before it, weigh them by relevance, and mix their values. The causal
mask stops it from looking ahead, so training on all positions at once is
honest.

>>> model = LanguageModel(ModelConfig(vocab_size=5, block_size=4, n_embd=8))
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

POSITIONS = ("learned", "sinusoidal", "none")


@dataclass
class ModelConfig:
    vocab_size: int
    block_size: int = 32  # T_max: the longest context the model can see
    n_embd: int = 32  # C: width of every token vector
    pos: str = "learned"  # position information: learned, sinusoidal, or none

    def __post_init__(self):
        for name in ("vocab_size", "block_size", "n_embd"):
            if getattr(self, name) < 1:
                raise UserError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.pos not in POSITIONS:
            raise UserError(f"pos must be one of {', '.join(POSITIONS)}, got {self.pos!r}")


def sinusoidal_positions(block_size: int, n_embd: int) -> torch.Tensor:
    """(block_size, n_embd) table: PE[p, 2i] = sin(p / 10000^(2i/C)), PE[p, 2i+1] = cos(...)."""
    pos = torch.arange(block_size, dtype=torch.float32)[:, None]  # (T, 1)
    two_i = torch.arange(0, n_embd, 2, dtype=torch.float32)  # (ceil(C/2),)
    angle = pos / (10000.0 ** (two_i / n_embd))  # (T, ceil(C/2))
    pe = torch.zeros(block_size, n_embd)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle[:, : n_embd // 2])
    return pe


class Head(nn.Module):
    """One head of self-attention: softmax(q k^T / sqrt(head_size) + mask) v."""

    def __init__(self, n_embd: int, head_size: int, block_size: int, causal: bool = True):
        super().__init__()
        self.key = nn.Linear(n_embd, head_size, bias=False)
        self.query = nn.Linear(n_embd, head_size, bias=False)
        self.value = nn.Linear(n_embd, head_size, bias=False)
        self.causal = causal
        # A buffer, not a parameter: moved by .to(), never trained, not saved (persistent=False).
        self.register_buffer("tril", torch.tril(torch.ones(block_size, block_size)), persistent=False)
        self.last_attention: torch.Tensor | None = None  # (B, T, T), kept for plots

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        k = self.key(x)  # (B, T, hs)
        q = self.query(x)  # (B, T, hs)
        v = self.value(x)  # (B, T, hs)
        # Divide by sqrt(head_size): q.k adds up hs products, so its spread grows with hs;
        # dividing keeps softmax from turning one-hot (the stage 3 page measures it).
        wei = q @ k.transpose(-2, -1) / math.sqrt(k.size(-1))  # (B, T, T)
        if self.causal:
            wei = wei.masked_fill(self.tril[:T, :T] == 0, float("-inf"))  # no peeking ahead
        wei = F.softmax(wei, dim=-1)  # each row sums to 1
        self.last_attention = wei.detach()
        return wei @ v  # (B, T, hs)


class LanguageModel(nn.Module):
    """Token + position embeddings -> one causal attention head -> logits."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.config = config
        self.token_embedding_table = nn.Embedding(config.vocab_size, config.n_embd)
        if config.pos == "learned":
            self.position_embedding_table = nn.Embedding(config.block_size, config.n_embd)
        elif config.pos == "sinusoidal":
            self.register_buffer(
                "position_table", sinusoidal_positions(config.block_size, config.n_embd),
                persistent=False)
        self.sa_head = Head(config.n_embd, config.n_embd, config.block_size)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size)
        self.apply(self._init_weights)

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        # Small weights -> near-uniform first guesses -> initial loss close to ln(vocab_size).
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def positions(self, T: int, device: torch.device) -> torch.Tensor:
        """(T, C) position vectors, or zeros when the model is told nothing about order."""
        if self.config.pos == "learned":
            return self.position_embedding_table(torch.arange(T, device=device))
        if self.config.pos == "sinusoidal":
            return self.position_table[:T]
        return torch.zeros(T, self.config.n_embd, device=device)

    def forward(
        self, idx: torch.Tensor, targets: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        B, T = idx.shape
        if T > self.config.block_size:
            raise UserError(
                f"sequence of {T} tokens is longer than block_size={self.config.block_size}; "
                "crop it to the last block_size tokens (generate() does this for you)."
            )
        tok_emb = self.token_embedding_table(idx)  # (B, T, C)
        x = tok_emb + self.positions(T, idx.device)  # (B, T, C) + (T, C) broadcasts
        x = self.sa_head(x)  # (B, T, C)
        logits = self.lm_head(x)  # (B, T, vocab_size)
        if targets is None:
            return logits, None
        B, T, V = logits.shape
        # cross_entropy wants (N, V) scores and (N,) class ids: flatten batch and time.
        loss = F.cross_entropy(logits.view(B * T, V), targets.view(B * T))
        return logits, loss

    @torch.no_grad()
    def attention_maps(self, idx: torch.Tensor) -> torch.Tensor:
        """Attention weights for ``idx``: (B, n_layer=1, n_head=1, T, T)."""
        self(idx)
        return self.sa_head.last_attention[:, None, None]

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
