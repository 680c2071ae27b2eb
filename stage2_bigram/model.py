"""The bigram language model: the next character depends only on the current one.

The whole model is one lookup table with a row per character. Row ``i`` holds the
scores (logits) of every possible next character after character ``i``; training
turns those scores into good guesses. It sees no context at all, which is
exactly what stage 3 fixes.

>>> model = LanguageModel(ModelConfig(vocab_size=5))
>>> logits, loss = model(torch.zeros(2, 3, dtype=torch.long))
>>> tuple(logits.shape), loss
((2, 3, 5), None)
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch
import torch.nn as nn
from torch.nn import functional as F

from .errors import UserError


@dataclass
class ModelConfig:
    vocab_size: int


class LanguageModel(nn.Module):
    """Bigram: logits for the next token are a row of a (vocab_size, vocab_size) table."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.config = config
        self.token_embedding_table = nn.Embedding(config.vocab_size, config.vocab_size)
        # Small weights -> near-uniform first guesses -> initial loss close to ln(vocab_size).
        nn.init.normal_(self.token_embedding_table.weight, mean=0.0, std=0.02)

    def forward(
        self, idx: torch.Tensor, targets: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        logits = self.token_embedding_table(idx)  # (B, T, vocab_size)
        if targets is None:
            return logits, None
        B, T, V = logits.shape
        # cross_entropy wants (N, V) scores and (N,) class ids: flatten batch and time.
        loss = F.cross_entropy(logits.view(B * T, V), targets.view(B * T))
        return logits, loss

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
            logits, _ = self(idx)  # (B, T, V)
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
