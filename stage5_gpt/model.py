"""The GPT: a stack of Transformer blocks, initialised and wired the way GPT-2 is.

Stage 4 built the block. What turns a stack of blocks into a GPT:
a final LayerNorm before the output head, a careful initialisation (N(0, 0.02),
with the residual projections scaled down by sqrt(2 * n_layer) so the residual
stream does not grow with depth), optional weight tying between the token
embedding and the output head, and a fast attention kernel
(``scaled_dot_product_attention``) with the explicit stage-4 math kept for
when we want to look inside.

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


@dataclass
class GPTConfig:
    vocab_size: int
    block_size: int = 64  # T_max: the longest context the model can see
    n_layer: int = 4  # Transformer blocks
    n_head: int = 4  # heads per block; each has head_size = n_embd // n_head
    n_embd: int = 128  # C: width of the residual stream
    dropout: float = 0.0  # probability of zeroing activations during training
    bias: bool = True  # biases in projections, feed-forward and LayerNorm (q, k, v never)
    activation: str = "gelu"  # feed-forward non-linearity: relu or gelu
    tie_weights: bool = False  # share the token embedding with the output head

    def __post_init__(self):
        for name in ("vocab_size", "block_size", "n_layer", "n_head", "n_embd"):
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


# --8<-- [start:dropout]
class Dropout(nn.Dropout):
    """``nn.Dropout`` with a cheaper random mask on a CPU.

    PyTorch's CPU dropout draws one random number per element with ``bernoulli_``,
    which took a quarter of a small model's training step here. We draw 64 random
    bits at a time and use them as four 16-bit numbers r, dropping an element when
    r < p * 65536: the same dropout, with p rounded to a multiple of 1/65536 (the
    kept values are scaled by the exact 1 / (1 - p') so the expectation is unchanged).
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not (self.training and self.p > 0 and x.is_cpu):
            return super().forward(x)
        cut = round(self.p * 65536)  # drop when a 16-bit number falls below this
        n = x.numel()
        bits = torch.empty((n + 3) // 4, dtype=torch.int64).random_(-(2**63), 2**63 - 1)
        r = bits.view(torch.int16)[:n].view(x.shape)  # uniform on -32768 .. 32767
        return x * (r >= cut - 32768) * (65536 / (65536 - cut))
# --8<-- [end:dropout]


# --8<-- [start:attention]
class CausalSelfAttention(nn.Module):
    """All heads at once, by one of four routes to the same result: with a KV cache
    (generation), the fused kernel (GPU), batched products (CPU), or the stage-4 math
    step by step, keeping every intermediate (``trace``)."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        C = config.n_embd
        self.n_head = config.n_head
        self.c_attn = nn.Linear(C, 3 * C, bias=False)  # q, k, v for all heads at once
        self.c_proj = nn.Linear(C, C, bias=config.bias)
        self.dropout = config.dropout
        self.attn_dropout = Dropout(config.dropout)
        self.resid_dropout = Dropout(config.dropout)
        self.register_buffer("tril", torch.tril(torch.ones(config.block_size, config.block_size)),
                             persistent=False)
        self.fused: bool | None = None  # None: the fused kernel on a GPU, batched math on a CPU
        self.register_buffer("causal_bias", torch.zeros_like(self.tril).masked_fill(
            self.tril == 0, float("-inf")), persistent=False)

    def forward(self, x: torch.Tensor, trace: dict | None = None,
                cache: dict | None = None) -> torch.Tensor:
        B, T, C = x.shape
        nh, hs = self.n_head, C // self.n_head
        q, k, v = self.c_attn(x).split(C, dim=2)  # 3 x (B, T, C)
        q = q.view(B, T, nh, hs).transpose(1, 2)  # (B, nh, T, hs)
        k = k.view(B, T, nh, hs).transpose(1, 2)
        v = v.view(B, T, nh, hs).transpose(1, 2)
        if cache is not None:  # generation: keys and values of the earlier tokens are kept
            past = cache["k"].shape[2] if "k" in cache else 0
            if past:
                k = torch.cat((cache["k"], k), dim=2)  # (B, nh, past + T, hs)
                v = torch.cat((cache["v"], v), dim=2)
            cache["k"], cache["v"] = k, v
            # New query i sits at position past + i: it may see keys 0 .. past + i.
            allowed = self.tril[past : past + T, : past + T] == 1  # (T, past + T)
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
        elif trace is None and (not x.is_cpu if self.fused is None else self.fused):
            # Fused kernel: never materialises the (T, T) matrix, so leaner and faster on
            # a GPU. On a CPU the three batched products below measured faster, forward
            # and backward, from block_size 32 to 256 (see the stage-5 page).
            y = F.scaled_dot_product_attention(
                q, k, v, dropout_p=self.dropout if self.training else 0.0, is_causal=True)
        elif trace is None:  # the explicit path's math in three batched kernels
            bias = self.causal_bias[:T, :T].expand(B * nh, T, T)  # 0, or -inf above the diagonal
            att = torch.baddbmm(bias, q.reshape(B * nh, T, hs),
                                k.reshape(B * nh, T, hs).transpose(1, 2), alpha=hs ** -0.5)
            att = self.attn_dropout(F.softmax(att, dim=-1))
            y = torch.bmm(att, v.reshape(B * nh, T, hs)).view(B, nh, T, hs)
        else:
            scores = q @ k.transpose(-2, -1)  # (B, nh, T, T)
            scaled = scores / math.sqrt(hs)
            masked = scaled.masked_fill(self.tril[:T, :T] == 0, float("-inf"))
            weights = F.softmax(masked, dim=-1)
            y = self.attn_dropout(weights) @ v  # (B, nh, T, hs)
            trace.update(x=x, q=q, k=k, v=v, scores=scores, scaled=scaled, masked=masked,
                         weights=weights, heads_out=y)
        y = y.transpose(1, 2).contiguous().view(B, T, C)  # heads side by side: (B, T, C)
        return self.resid_dropout(self.c_proj(y))
# --8<-- [end:attention]


# --8<-- [start:mlp]
class MLP(nn.Module):
    """Position-wise feed-forward: C -> 4C -> C."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        C = config.n_embd
        self.c_fc = nn.Linear(C, 4 * C, bias=config.bias)
        self.act = nn.GELU() if config.activation == "gelu" else nn.ReLU()
        self.c_proj = nn.Linear(4 * C, C, bias=config.bias)
        self.dropout = Dropout(config.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.c_proj(self.act(self.c_fc(x))))  # (B, T, C)
# --8<-- [end:mlp]


# --8<-- [start:block]
class Block(nn.Module):
    """Pre-LayerNorm Transformer block: x + attn(ln1(x)), then x + mlp(ln2(x))."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.mlp = MLP(config)

    def forward(self, x: torch.Tensor, trace: dict | None = None,
                cache: dict | None = None) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x), trace, cache)  # (B, T, C)
        x = x + self.mlp(self.ln_2(x))
        return x
# --8<-- [end:block]


# --8<-- [start:gpt]
class GPT(nn.Module):
    """Embeddings -> n_layer blocks -> final LayerNorm -> lm_head."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        self.config = config
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(config.vocab_size, config.n_embd),  # token embeddings
            wpe=nn.Embedding(config.block_size, config.n_embd),  # position embeddings
            drop=Dropout(config.dropout),
            h=nn.ModuleList([Block(config) for _ in range(config.n_layer)]),
            ln_f=nn.LayerNorm(config.n_embd, bias=config.bias),
        ))
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=config.bias)
        # --8<-- [start:init]
        if config.tie_weights:
            # One (V, C) matrix both reads tokens in and scores them out.
            self.lm_head.weight = self.transformer.wte.weight
        self.apply(self._init_weights)
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                # Each block adds two outputs to the residual stream: keep its variance flat.
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layer))
        # --8<-- [end:init]

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(
        self, idx: torch.Tensor, targets: torch.Tensor | None = None, trace: list | None = None,
        cache: list[dict] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``trace``: pass a list to take the explicit path; it receives one dict per layer.
        ``cache``: one dict per layer (see ``stream``); ``idx`` then holds only new tokens."""
        B, T = idx.shape
        past = cache_length(cache)
        if past + T > self.config.block_size:
            raise UserError(
                f"sequence of {past + T} tokens is longer than block_size="
                f"{self.config.block_size}; crop it to the last block_size tokens "
                "(generate() does this for you)."
            )
        x = self.transformer.drop(self.embed(idx, past))  # (B, T, C)
        for i, block in enumerate(self.transformer.h):
            layer = None if trace is None else {}
            x = block(x, layer, None if cache is None else cache[i])
            if layer is not None:
                layer["resid"] = x  # the residual stream after this block, (B, T, C)
                trace.append(layer)
        logits = self.readout(x)  # (B, T, vocab_size)
        if targets is None:
            return logits, None
        loss = F.cross_entropy(logits.view(B * T, -1), targets.view(B * T))
        return logits, loss

    def embed(self, idx: torch.Tensor, start: int = 0) -> torch.Tensor:
        """Token plus position embeddings: (B, T) ids -> (B, T, C), the residual stream's start.
        ``start``: the position of the first token (after ``start`` cached ones)."""
        pos = torch.arange(start, start + idx.shape[1], device=idx.device)
        return self.transformer.wte(idx) + self.transformer.wpe(pos)  # (B, T, C) + (T, C)

    def readout(self, x: torch.Tensor) -> torch.Tensor:
        """The final LayerNorm and lm_head: residual stream (..., C) -> logits (..., vocab_size)."""
        return self.lm_head(self.transformer.ln_f(x))
# --8<-- [end:gpt]

    # --8<-- [start:param_breakdown]
    def param_breakdown(self) -> dict[str, int]:
        """Parameter counts by part; a tied head counts only its bias."""
        t = self.transformer
        count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
        parts = {
            "token embedding": count(t.wte),
            "position embedding": count(t.wpe),
            "blocks": count(t.h),
            "final norm": count(t.ln_f),
            "lm_head": sum(p.numel() for n, p in self.lm_head.named_parameters()
                           if not (self.config.tie_weights and n == "weight")),
        }
        parts["total"] = sum(parts.values())
        assert parts["total"] == sum(p.numel() for p in self.parameters())
        return parts
    # --8<-- [end:param_breakdown]

    @torch.no_grad()
    def attention_maps(self, idx: torch.Tensor) -> torch.Tensor:
        """Attention weights for ``idx``: (B, n_layer, n_head, T, T), via the explicit path."""
        trace: list[dict] = []
        self(idx, trace=trace)
        return torch.stack([layer["weights"] for layer in trace], dim=1)

    # --8<-- [start:generate]
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

        With the KV cache, each layer keeps the keys and values of the tokens seen so
        far and the model reads only the new token. Positions are absolute, so a full
        cache cannot slide by one: it restarts from the last half of the context.
        Without it, every step re-reads the last block_size tokens.
        """
        T_max, cache = self.config.block_size, None
        for _ in range(max_new_tokens):
            if not use_cache:
                logits, _ = self(idx[:, -T_max:])  # the model sees at most block_size
            elif cache is None or cache_length(cache) == T_max:
                # Fill the cache: first from the prompt, later from the last half window.
                keep = T_max if cache is None else max(1, T_max // 2)
                cache = [{} for _ in self.transformer.h]
                logits, _ = self(idx[:, -keep:], cache=cache)
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
    # --8<-- [end:generate]


def cache_length(cache: list[dict] | None) -> int:
    """How many tokens a KV cache holds (0 for none or an empty one)."""
    return cache[0]["k"].shape[2] if cache and "k" in cache[0] else 0


# The names every stage's checkpoint.py and visualize.py use for "this stage's model".
LanguageModel, ModelConfig = GPT, GPTConfig


# --8<-- [start:sample_next]
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
# --8<-- [end:sample_next]
