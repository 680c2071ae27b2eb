"""The Transformer block: multi-head attention, feed-forward, residuals, LayerNorm.

Stage 3 had one attention head. Now several heads look at the context in
parallel (each can track something different), a small MLP thinks about what
they gathered, residual connections let both add to the token's vector instead
of replacing it, and LayerNorm keeps the numbers in a healthy range. Stacking
``n_layer`` such blocks gives a deep model that still trains.

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

POSITIONS = ("learned", "sinusoidal", "none")
ACTIVATIONS = ("relu", "gelu")
NORMS = ("pre", "post", "none")
ATTENTIONS = ("batched", "heads")


@dataclass
class ModelConfig:
    vocab_size: int
    block_size: int = 32  # T_max: the longest context the model can see
    n_embd: int = 64  # C: width of every token vector
    pos: str = "learned"  # position information: learned, sinusoidal, or none
    n_head: int = 4  # heads per block; each has head_size = n_embd // n_head
    n_layer: int = 3  # blocks stacked on top of each other
    dropout: float = 0.0  # probability of zeroing activations during training
    activation: str = "relu"  # feed-forward non-linearity: relu or gelu
    norm: str = "pre"  # LayerNorm before (pre) or after (post) each residual branch, or none
    attention: str = "batched"  # multi-head form: batched (one matmul) or heads (a list)
    residual: bool = True  # x + f(x); False: x = f(x), to measure what the residual path buys
    ffwd: bool = True  # the feed-forward branch; False: attention only, to measure what it buys

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
        for name, allowed in (("pos", POSITIONS), ("activation", ACTIVATIONS),
                              ("norm", NORMS), ("attention", ATTENTIONS)):
            if getattr(self, name) not in allowed:
                raise UserError(f"{name} must be one of {', '.join(allowed)}, "
                                f"got {getattr(self, name)!r}")
        for name in ("residual", "ffwd"):
            if not isinstance(getattr(self, name), bool):
                raise UserError(f"{name} must be True or False, got {getattr(self, name)!r}")


# --8<-- [start:sinusoidal]
def sinusoidal_positions(block_size: int, n_embd: int) -> torch.Tensor:
    """(block_size, n_embd) table: PE[p, 2i] = sin(p / 10000^(2i/C)), PE[p, 2i+1] = cos(...)."""
    pos = torch.arange(block_size, dtype=torch.float32)[:, None]  # (T, 1)
    two_i = torch.arange(0, n_embd, 2, dtype=torch.float32)  # (ceil(C/2),)
    angle = pos / (10000.0 ** (two_i / n_embd))  # (T, ceil(C/2))
    pe = torch.zeros(block_size, n_embd)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle[:, : n_embd // 2])
    return pe
# --8<-- [end:sinusoidal]


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


# --8<-- [start:head]
class Head(nn.Module):
    """One head of self-attention: softmax(q k^T / sqrt(head_size) + mask) v."""

    def __init__(self, n_embd: int, head_size: int, block_size: int, causal: bool = True,
                 dropout: float = 0.0):
        super().__init__()
        self.key = nn.Linear(n_embd, head_size, bias=False)
        self.query = nn.Linear(n_embd, head_size, bias=False)
        self.value = nn.Linear(n_embd, head_size, bias=False)
        self.causal = causal
        # A buffer, not a parameter: saved with the module, moved by .to(), never trained.
        self.register_buffer("tril", torch.tril(torch.ones(block_size, block_size)), persistent=False)
        self.dropout = Dropout(dropout)
        self.last_attention: torch.Tensor | None = None  # (B, T, T), kept for plots

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        k = self.key(x)  # (B, T, hs)
        q = self.query(x)  # (B, T, hs)
        v = self.value(x)  # (B, T, hs)
        # Scale by 1/sqrt(head_size) so the scores keep unit variance and softmax stays soft.
        wei = q @ k.transpose(-2, -1) / math.sqrt(k.size(-1))  # (B, T, T)
        if self.causal:
            wei = wei.masked_fill(self.tril[:T, :T] == 0, float("-inf"))  # no peeking ahead
        wei = F.softmax(wei, dim=-1)  # each row sums to 1
        self.last_attention = wei.detach()
        wei = self.dropout(wei)  # randomly drop some attention links while training
        return wei @ v  # (B, T, hs)
# --8<-- [end:head]


# --8<-- [start:multihead]
class MultiHeadAttention(nn.Module):
    """Form 1: n_head separate heads side by side, concatenated, then projected."""

    def __init__(self, n_embd: int, n_head: int, block_size: int, dropout: float = 0.0):
        super().__init__()
        head_size = n_embd // n_head
        self.heads = nn.ModuleList(
            [Head(n_embd, head_size, block_size, dropout=dropout) for _ in range(n_head)])
        self.proj = nn.Linear(n_embd, n_embd)  # mixes what the heads found
        self.dropout = Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.cat([h(x) for h in self.heads], dim=-1)  # n_head x (B, T, hs) -> (B, T, C)
        return self.dropout(self.proj(out))  # (B, T, C)

    @property
    def last_attention(self) -> torch.Tensor | None:
        if any(h.last_attention is None for h in self.heads):
            return None  # no forward pass yet
        return torch.stack([h.last_attention for h in self.heads], dim=1)  # (B, nh, T, T)
# --8<-- [end:multihead]


# --8<-- [start:batched]
class CausalSelfAttention(nn.Module):
    """Form 2: the same computation with all heads in one batched matrix multiply."""

    def __init__(self, n_embd: int, n_head: int, block_size: int, dropout: float = 0.0):
        super().__init__()
        self.n_head = n_head
        self.c_attn = nn.Linear(n_embd, 3 * n_embd, bias=False)  # q, k, v for all heads at once
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.attn_dropout = Dropout(dropout)
        self.resid_dropout = Dropout(dropout)
        self.register_buffer("tril", torch.tril(torch.ones(block_size, block_size)), persistent=False)
        self.last_attention: torch.Tensor | None = None  # (B, nh, T, T)

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
# --8<-- [end:batched]


# --8<-- [start:copy_heads]
def copy_heads_into_batched(mha: MultiHeadAttention, csa: CausalSelfAttention) -> None:
    """Load form 1's weights into form 2, showing where each head lives in c_attn.

    c_attn's output rows are [q of head 0, q of head 1, ..., k of head 0, ..., v ...].
    """
    with torch.no_grad():
        q = torch.cat([h.query.weight for h in mha.heads], dim=0)  # (C, C)
        k = torch.cat([h.key.weight for h in mha.heads], dim=0)
        v = torch.cat([h.value.weight for h in mha.heads], dim=0)
        csa.c_attn.weight.copy_(torch.cat([q, k, v], dim=0))  # (3C, C)
        csa.c_proj.load_state_dict(mha.proj.state_dict())
# --8<-- [end:copy_heads]


# --8<-- [start:ffwd]
class FeedForward(nn.Module):
    """Position-wise MLP: each token's vector on its own, C -> 4C -> C."""

    def __init__(self, n_embd: int, dropout: float = 0.0, activation: str = "relu"):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(n_embd, 4 * n_embd),
            nn.ReLU() if activation == "relu" else nn.GELU(),
            nn.Linear(4 * n_embd, n_embd),
            Dropout(dropout),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)  # (B, T, C)
# --8<-- [end:ffwd]


# --8<-- [start:block]
class Block(nn.Module):
    """Communication (attention) then computation (feed-forward), each on a residual path."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        attn_cls = CausalSelfAttention if config.attention == "batched" else MultiHeadAttention
        self.attn = attn_cls(config.n_embd, config.n_head, config.block_size, config.dropout)
        self.ffwd = FeedForward(config.n_embd, config.dropout, config.activation)
        self.ln1 = nn.LayerNorm(config.n_embd)
        self.ln2 = nn.LayerNorm(config.n_embd)
        self.pre_norm = config.norm == "pre"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.pre_norm:  # GPT-2 and later: normalize the input of each branch
            x = x + self.attn(self.ln1(x))  # (B, T, C)
            x = x + self.ffwd(self.ln2(x))
        else:  # the original 2017 Transformer: normalize after adding
            x = self.ln1(x + self.attn(x))
            x = self.ln2(x + self.ffwd(x))
        return x
# --8<-- [end:block]


# --8<-- [start:ablated]
class AblatedBlock(Block):
    """The block with a part taken out, to measure what that part buys.

    --norm none: no LayerNorm; --no-residual: x = f(x) instead of x + f(x);
    --no-ffwd: attention only.
    """

    def __init__(self, config: ModelConfig):
        super().__init__(config)
        if config.norm == "none":  # pre-LN wiring, nothing where the LayerNorms were
            self.ln1, self.ln2, self.pre_norm = nn.Identity(), nn.Identity(), True
        if not config.ffwd:
            self.ffwd, self.ln2 = None, None
        self.residual = config.residual

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for f, ln in ((self.attn, self.ln1), (self.ffwd, self.ln2)):
            if f is None:  # --no-ffwd: no second branch
                continue
            if self.pre_norm:
                x = x + f(ln(x)) if self.residual else f(ln(x))  # (B, T, C)
            else:
                x = ln(x + f(x)) if self.residual else ln(f(x))
        return x


def block_class(config: ModelConfig) -> type[Block]:
    """Block, or AblatedBlock when an ablation switch takes a part out."""
    whole = config.norm != "none" and config.residual and config.ffwd
    return Block if whole else AblatedBlock
# --8<-- [end:ablated]


# --8<-- [start:model]
class LanguageModel(nn.Module):
    """Token + position embeddings -> n_layer Transformer blocks -> logits."""

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
        self.blocks = nn.Sequential(*[block_class(config)(config) for _ in range(config.n_layer)])
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
        x = self.blocks(x)  # (B, T, C)
        logits = self.lm_head(x)  # (B, T, vocab_size)
        if targets is None:
            return logits, None
        B, T, V = logits.shape
        # cross_entropy wants (N, V) scores and (N,) class ids: flatten batch and time.
        loss = F.cross_entropy(logits.view(B * T, V), targets.view(B * T))
        return logits, loss
# --8<-- [end:model]

    @torch.no_grad()
    def attention_maps(self, idx: torch.Tensor) -> torch.Tensor:
        """Attention weights for ``idx``: (B, n_layer, n_head, T, T)."""
        self(idx)
        return torch.stack([b.attn.last_attention for b in self.blocks], dim=1)

    # --8<-- [start:generate]
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
    # --8<-- [end:generate]


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
