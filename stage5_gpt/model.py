"""The GPT: GPT-2's architecture, layer for layer, in a stack of Transformer blocks.

Stage 4 built the block. What turns a stack of blocks into GPT-2: a final LayerNorm
before the output head, GPT-2's initialisation (N(0, 0.02), with the residual
projections scaled down by sqrt(2 * n_layer) so the residual stream does not grow
with depth), biases where GPT-2 has them, GELU in its tanh form, the output head
tied to the token embedding, and a KV cache that makes generation fast. With these,
OpenAI's GPT-2 weights load into this very code (gpt2.py).

>>> model = GPT(GPTConfig(vocab_size=5, block_size=4, n_layer=1, n_head=2, n_embd=8))
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
# Where attention takes PyTorch's fused kernel (nanoGPT's "flash"): the same numbers without
# storing the (T, T) weights, faster on a GPU; on a CPU it measured slower (tools/bench.py).
FLASH_DEVICES = ("cuda",)


@dataclass
class GPTConfig:
    vocab_size: int
    block_size: int = 64  # T_max: the longest context the model can see
    n_layer: int = 4  # blocks stacked on top of each other
    n_head: int = 4  # heads per block; each has head_size = n_embd // n_head
    n_embd: int = 128  # C: width of every token vector
    dropout: float = 0.0  # probability of zeroing activations during training
    activation: str = "gelu"  # the MLP's non-linearity: relu or gelu
    bias: bool = True  # biases in every Linear but lm_head, and in LayerNorm (as GPT-2)
    tie_weights: bool = True  # the output head reuses the token embedding (as GPT-2)

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

    def __init__(self, config: GPTConfig):
        super().__init__()
        C = config.n_embd
        self.n_head = config.n_head
        self.c_attn = nn.Linear(C, 3 * C, bias=config.bias)  # q, k, v for all heads at once
        self.c_proj = nn.Linear(C, C, bias=config.bias)  # mixes what the heads found
        self.attn_dropout = nn.Dropout(config.dropout)
        self.resid_dropout = nn.Dropout(config.dropout)
        T = config.block_size
        self.register_buffer("tril", torch.tril(torch.ones(T, T)), persistent=False)

    def forward(self, x: torch.Tensor, cache: dict | None = None,
                trace: dict | None = None) -> torch.Tensor:
        B, T, C = x.shape
        nh, hs = self.n_head, C // self.n_head
        q, k, v = self.c_attn(x).split(C, dim=2)  # 3 x (B, T, C)
        # Split C into nh heads of hs, then move heads next to batch: (B, T, C) -> (B, nh, T, hs)
        q = q.view(B, T, nh, hs).transpose(1, 2)
        k = k.view(B, T, nh, hs).transpose(1, 2)
        v = v.view(B, T, nh, hs).transpose(1, 2)
        if cache is not None:  # generation: the keys and values of the earlier tokens, kept
            if "k" in cache:
                k = torch.cat((cache["k"], k), dim=2)  # (B, nh, S, hs), S = past + T
                v = torch.cat((cache["v"], v), dim=2)
            cache["k"], cache["v"] = k, v
        S = k.size(2)  # positions attended over; the T queries are the last T of them
        flash = x.device.type in FLASH_DEVICES and cache is None and trace is None
        if flash:  # the lines below in one kernel
            y = F.scaled_dot_product_attention(
                q, k, v, dropout_p=self.attn_dropout.p if self.training else 0.0, is_causal=True)
        else:
            scores = q @ k.transpose(-2, -1)  # (B, nh, T, S)
            scaled = scores / math.sqrt(hs)
            # query i sits at position S - T + i: it sees the keys up to there
            masked = scaled.masked_fill(self.tril[S - T : S, :S] == 0, float("-inf"))
            weights = F.softmax(masked, dim=-1)
            y = self.attn_dropout(weights) @ v  # (B, nh, T, hs)
            if trace is not None:  # inspect.py and lens.py read these
                trace.update(x=x, q=q, k=k, v=v, scores=scores, scaled=scaled, masked=masked,
                             weights=weights, heads_out=y)
        y = y.transpose(1, 2).contiguous().view(B, T, C)  # heads side by side again: (B, T, C)
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    """The feed-forward network: each token's vector on its own, C -> 4C -> C."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        C = config.n_embd
        self.c_fc = nn.Linear(C, 4 * C, bias=config.bias)
        # GPT-2's GELU: the tanh approximation of x * Phi(x) (the exact form differs by < 1e-3)
        self.act = nn.ReLU() if config.activation == "relu" else nn.GELU(approximate="tanh")
        self.c_proj = nn.Linear(4 * C, C, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.c_proj(self.act(self.c_fc(x))))  # (B, T, C)


class Block(nn.Module):
    """Communication (attention) then computation (MLP), each on a residual path:
    x + attn(ln_1(x)), then x + mlp(ln_2(x)), with LayerNorm before each branch
    ("pre-LN", GPT-2's wiring)."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.mlp = MLP(config)

    def forward(self, x: torch.Tensor, cache: dict | None = None,
                trace: dict | None = None) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x), cache, trace)  # (B, T, C)
        x = x + self.mlp(self.ln_2(x))
        return x


class GPT(nn.Module):
    """Embeddings -> n_layer blocks -> final LayerNorm -> lm_head."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        self.config = config
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(config.vocab_size, config.n_embd),  # token embeddings
            wpe=nn.Embedding(config.block_size, config.n_embd),  # position embeddings
            drop=nn.Dropout(config.dropout),
            h=nn.ModuleList([Block(config) for _ in range(config.n_layer)]),
            ln_f=nn.LayerNorm(config.n_embd, bias=config.bias),
        ))
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.init_weights()

    def init_weights(self) -> None:
        """GPT-2's starting point. Small weights give near-uniform first guesses, so the
        first loss is close to ln(vocab_size)."""
        if self.config.tie_weights:
            # One (V, C) matrix both reads tokens in and scores them out.
            self.lm_head.weight = self.transformer.wte.weight
        for name, p in self.named_parameters():  # a tied weight once
            if name.endswith("c_proj.weight"):
                # Each block adds two outputs to the residual stream: keep its variance flat.
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * self.config.n_layer))
            elif p.dim() == 2:  # every other Linear weight, and the embeddings
                nn.init.normal_(p, mean=0.0, std=0.02)
            elif name.endswith("bias"):
                nn.init.zeros_(p)  # (LayerNorm gains keep their 1)

    def forward(
        self, idx: torch.Tensor, targets: torch.Tensor | None = None,
        cache: list[dict] | None = None, trace: list | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``cache``: one dict per layer (see ``stream``); ``idx`` then holds only the new
        tokens. ``trace``: a list, to receive every intermediate (one dict per layer)."""
        B, T = idx.shape
        past = cache_length(cache)
        if past + T > self.config.block_size:
            raise UserError(
                f"sequence of {past + T} tokens is longer than block_size="
                f"{self.config.block_size}; crop it to the last block_size tokens "
                "(generate() does this for you)."
            )
        pos = torch.arange(past, past + T, device=idx.device)  # after the cached positions
        x = self.transformer.wte(idx) + self.transformer.wpe(pos)  # (B, T, C) + (T, C)
        x = self.transformer.drop(x)
        for i, block in enumerate(self.transformer.h):
            layer = None if trace is None else {}
            x = block(x, None if cache is None else cache[i], layer)
            if layer is not None:
                layer["resid"] = x  # the residual stream after this block, (B, T, C)
                trace.append(layer)
        logits = self.lm_head(self.transformer.ln_f(x))  # (B, T, vocab_size)
        if targets is None:
            return logits, None
        B, T, V = logits.shape
        # cross_entropy wants (N, V) scores and (N,) class ids: flatten batch and time.
        loss = F.cross_entropy(logits.view(B * T, V), targets.view(B * T))
        return logits, loss

    @torch.no_grad()
    def attention_maps(self, idx: torch.Tensor) -> torch.Tensor:
        """Attention weights for ``idx``: (B, n_layer, n_head, T, T), from a trace."""
        trace: list[dict] = []
        self(idx, trace=trace)
        return torch.stack([layer["weights"] for layer in trace], dim=1)

    @torch.no_grad()
    def stream(
        self,
        idx: torch.Tensor,
        max_new_tokens: int,
        temperature: float = 1.0,
        top_k: int | None = None,
        generator: torch.Generator | None = None,
        use_cache: bool = True,
    ) -> Iterator[torch.Tensor]:
        """Yield each new token (B, 1) as soon as it is sampled.

        Without a cache, every step runs the whole context again. With the KV cache, each
        layer keeps the keys and values it computed, so after the first step the model
        reads only the newest token. Positions are learned up to block_size, so a full
        cache starts again from the last half of the context."""
        T_max, cache = self.config.block_size, None
        for _ in range(max_new_tokens):
            if not use_cache:
                logits, _ = self(idx[:, -T_max:])  # the model sees at most block_size
            elif cache is None or cache_length(cache) == T_max:
                keep = T_max if cache is None else max(1, T_max // 2)
                cache = [{} for _ in self.transformer.h]  # one {"k": ..., "v": ...} per layer
                logits, _ = self(idx[:, -keep:], cache=cache)  # fill it from the context
            else:
                logits, _ = self(idx[:, -1:], cache=cache)  # only the newest token
            logits = logits[:, -1, :]  # only the last position predicts the next token
            idx_next = sample_next(logits, temperature, top_k, generator)  # (B, 1)
            idx = torch.cat((idx, idx_next), dim=1)  # (B, T + 1)
            yield idx_next

    def generate(self, idx: torch.Tensor, max_new_tokens: int, temperature: float = 1.0,
                 top_k: int | None = None, generator: torch.Generator | None = None,
                 use_cache: bool = True) -> torch.Tensor:
        """Extend ``idx`` (B, T) by ``max_new_tokens`` sampled tokens, one at a time."""
        new = list(self.stream(idx, max_new_tokens, temperature, top_k, generator, use_cache))
        return torch.cat([idx, *new], dim=1)


def cache_length(cache: list[dict] | None) -> int:
    """How many tokens a KV cache holds (0 for none or an empty one)."""
    return cache[0]["k"].shape[2] if cache and "k" in cache[0] else 0


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
