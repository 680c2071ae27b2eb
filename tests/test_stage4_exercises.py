"""Stage 4's exercises, as the workbook grader sees them (tools/workbook.py: 4.1
CausalSelfAttention.forward, 4.2 MLP.__init__, 4.3 Block.forward): one typical mistake
per test, each failing with a message in plain words, saying what was expected and what
came instead (for attention and the block: which well-known mistake the numbers match)."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from stage4_block.model import MLP, Block, CausalSelfAttention, ModelConfig

B, T, C, NH = 2, 5, 12, 3
HS = C // NH


def config(**kw) -> ModelConfig:
    return ModelConfig(**{"vocab_size": 7, "block_size": 8, "n_embd": C, "n_head": NH,
                          "n_layer": 1, **kw})


def randomize(module: nn.Module, seed: int) -> nn.Module:
    """Every parameter random (LayerNorm gains and biases too), so no symmetry hides a bug."""
    torch.manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.normal_(0.0, 0.4)
    return module.eval()


def heads(t: torch.Tensor) -> torch.Tensor:
    """(B, T, C) -> (B, nh, T, hs)."""
    return t.view(B, T, NH, HS).transpose(1, 2)


def attention(x, attn, *, scale=None, causal=True, dim=-1, mask_after=False, split=heads,
              merge=True, project=True):
    """The batched multi-head attention, and the usual ways to get it wrong."""
    q, k, v = attn.c_attn(x).split(C, dim=2)
    q, k, v = split(q), split(k), split(v)
    scores = q @ k.transpose(-2, -1) / (math.sqrt(HS) if scale is None else scale)
    hidden = torch.ones(T, T, dtype=torch.bool).tril() == 0
    if causal and not mask_after:
        scores = scores.masked_fill(hidden, float("-inf"))
    weights = F.softmax(scores, dim=dim)
    if causal and mask_after:
        weights = weights.masked_fill(hidden, 0.0)
    y = weights @ v  # (B, nh, T, hs)
    y = y.transpose(1, 2).reshape(B, T, C) if merge else y.reshape(B, T, C)
    return (attn.c_proj(y) if project else y), weights


def attention_mistakes(x, attn) -> dict[str, torch.Tensor]:
    return {
        "scores not divided by sqrt(head_size)": attention(x, attn, scale=1.0)[0],
        f"scores divided by sqrt(n_embd) = sqrt({C}), not by sqrt(head_size) = sqrt({HS})":
            attention(x, attn, scale=math.sqrt(C))[0],
        "no causal mask (the future is visible)": attention(x, attn, causal=False)[0],
        "the mask applied after the softmax (rows no longer sum to 1)":
            attention(x, attn, mask_after=True)[0],
        "the softmax taken over the wrong dimension": attention(x, attn, dim=-2)[0],
        "q, k, v viewed as (B, nh, T, hs) directly, without view(B, T, nh, hs).transpose(1, 2)":
            attention(x, attn, split=lambda t: t.reshape(B, NH, T, HS))[0],
        "the heads put back side by side without transpose(1, 2) first":
            attention(x, attn, merge=False)[0],
        "no output projection (c_proj)": attention(x, attn, project=False)[0],
    }


def compare(what: str, got, want, wrong: dict, formula: str) -> None:
    if tuple(got.shape) != tuple(want.shape):
        pytest.fail(f"{what} should have shape {tuple(want.shape)}, got {tuple(got.shape)}")
    if torch.isnan(got).any():
        pytest.fail(f"{what} holds nan: a row of scores is all -inf (does the mask hide the "
                    "diagonal too? position t may attend to itself)")
    if torch.allclose(got, want, atol=1e-5):
        return
    diff = (got - want).abs().max().item()
    named = [name for name, out in wrong.items()
             if tuple(out.shape) == tuple(got.shape) and torch.allclose(got, out, atol=1e-5)]
    pytest.fail(f"{what} should be {formula}; yours differs by up to {diff:.3g}"
                + (f" and matches the result of {named[0]}" if named else ""))


# --------------------------------------------------------------------------- 4.1 attention


def test_attention_is_every_head_of_scaled_dot_product_attention():
    attn = randomize(CausalSelfAttention(config()), 0)
    x = torch.randn(B, T, C, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        got = attn(x)
        want, _ = attention(x, attn)
        compare("the attention's output", got, want, attention_mistakes(x, attn),
                "c_proj(heads side by side of softmax(q k^T / sqrt(head_size) + causal mask) v)")


def test_attention_keeps_the_weights_of_every_head():
    attn = randomize(CausalSelfAttention(config()), 1)
    x = torch.randn(B, T, C, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        attn(x)
        _, want = attention(x, attn)
    weights = attn.last_attention
    assert weights is not None, "self.last_attention should hold the attention weights"
    assert tuple(weights.shape) == (B, NH, T, T), (
        f"self.last_attention should be (B, n_head, T, T) = {(B, NH, T, T)}, got "
        f"{tuple(weights.shape)}")
    assert not weights.requires_grad, "self.last_attention should be a detached copy (.detach())"
    sums = weights.sum(-1)
    assert torch.allclose(sums, torch.ones_like(sums), atol=1e-5), (
        f"each row of every head's weights should sum to 1, got row sums "
        f"{[round(s, 3) for s in sums[0, 0].tolist()]}")
    assert weights.triu(1).abs().max().item() == 0, (
        "every head's weights above the diagonal (the future) should be 0")
    assert torch.allclose(weights, want, atol=1e-5), (
        "head h's weights should be softmax(q_h k_h^T / sqrt(head_size) + mask), with q_h the "
        "h-th slice of head_size columns of q (view(B, T, n_head, head_size).transpose(1, 2))")


def test_attention_output_does_not_depend_on_the_future():
    attn = randomize(CausalSelfAttention(config()), 2)
    x = torch.randn(B, T, C, generator=torch.Generator().manual_seed(2))
    x2 = x.clone()
    x2[:, 3:] += 1.0
    with torch.no_grad():
        diff = (attn(x)[:, :3] - attn(x2)[:, :3]).abs().max().item()
    assert diff < 1e-6, (
        f"changing positions 3 and 4 changed the outputs at positions 0..2 by {diff:.3g}: no "
        "position may see a later one (the mask, on every head, before the softmax)")


def test_attention_in_eval_mode_drops_nothing():
    attn = randomize(CausalSelfAttention(config(dropout=0.5)), 3).eval()
    x = torch.randn(B, T, C, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        got = attn(x)
        want, _ = attention(x, attn)
    if not torch.allclose(got, want, atol=1e-5):
        pytest.fail("with dropout=0.5, in eval mode (model.eval()) the attention should drop "
                    "nothing and give c_proj(heads of softmax(q k^T / sqrt(head_size) + mask) v), "
                    "but its output changed: use the nn.Dropout modules the constructor made, "
                    "self.attn_dropout and self.resid_dropout (they know the mode; F.dropout "
                    "drops always, unless given training=self.training)")


class Drop(nn.Module):
    """Stands in for an nn.Dropout in training: notes each tensor it is given, and drops a
    fixed third of it (scaling the rest by 1.5), the same every time, so that the test knows
    what a dropout at the right place gives."""

    def __init__(self):
        super().__init__()
        self.inputs: list[torch.Tensor] = []

    @staticmethod
    def apply(t: torch.Tensor) -> torch.Tensor:
        keep = (torch.arange(t.numel()) % 3 != 1).view(t.shape)
        return t * keep * 1.5

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        self.inputs.append(t.detach().clone())
        return self.apply(t)


def what_it_got(got: torch.Tensor, known: dict[str, torch.Tensor]) -> str | None:
    """The name of the tensor in ``known`` that ``got`` is, if any."""
    return next((name for name, t in known.items() if tuple(t.shape) == tuple(got.shape)
                 and torch.allclose(got, t, atol=1e-5, equal_nan=True)), None)


def test_attention_dropout_drops_the_weights_and_the_output():
    attn = randomize(CausalSelfAttention(config(dropout=0.5)), 4).train()
    attn.attn_dropout, attn.resid_dropout = Drop(), Drop()
    x = torch.randn(B, T, C, generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        got = attn(x)
        q, k, v = (heads(t) for t in attn.c_attn(x).split(C, dim=2))
        scores = (q @ k.transpose(-2, -1) / math.sqrt(HS)).masked_fill(
            torch.ones(T, T, dtype=torch.bool).tril() == 0, float("-inf"))
        weights = F.softmax(scores, dim=-1)
        merged = (Drop.apply(weights) @ v).transpose(1, 2).reshape(B, T, C)
        out = attn.c_proj(merged)
        plain_out = attn.c_proj((weights @ v).transpose(1, 2).reshape(B, T, C))
    known = {"the attention weights (after the softmax)": weights,
             "the scores, before the softmax": scores, "v, the values": v,
             "the heads' output, weights @ v (after the weights multiplied v)": weights @ v,
             "the heads side by side, before c_proj": merged, "c_proj's output": out,
             "the heads side by side (weights not dropped), before c_proj":
                 (weights @ v).transpose(1, 2).reshape(B, T, C),
             "c_proj's output (weights not dropped)": plain_out}
    places = {"attn_dropout": ("the attention weights, after the softmax, before they multiply v",
                               "y = self.attn_dropout(wei) @ v", weights),
              "resid_dropout": ("c_proj's output, last", "self.resid_dropout(self.c_proj(y))", out)}
    for name, (place, code, want) in places.items():
        inputs = getattr(attn, name).inputs
        if not inputs:
            pytest.fail(f"self.{name} was never called: in training it should drop from {place} "
                        f"({code})")
        if len(inputs) > 1:
            pytest.fail(f"self.{name} was called {len(inputs)} times: once, on {place} ({code})")
        seen = what_it_got(inputs[0], known)
        if seen == "c_proj's output (weights not dropped)":
            pytest.fail("what self.attn_dropout returned is not used: the weights it dropped "
                        "should be the ones that multiply v (y = self.attn_dropout(wei) @ v)")
        if seen != what_it_got(want, known):
            pytest.fail(f"self.{name} got "
                        + (seen or f"a tensor of shape {tuple(inputs[0].shape)}")
                        + f"; it should get {place} ({code})")
    if not torch.allclose(got, Drop.apply(out), atol=1e-5):
        undropped = what_it_got(got, {
            "c_proj's output itself, not what self.resid_dropout returned": out,
            "computed from the weights before self.attn_dropout (what it returned is not used)":
                Drop.apply(plain_out)})
        pytest.fail("in training the attention's output should be resid_dropout(c_proj(heads of "
                    "attn_dropout(weights) @ v))"
                    + (f"; yours is {undropped}" if undropped else "")
                    + ": use what each dropout returns")


# --------------------------------------------------------------------------- 4.2 MLP


@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_mlp_layers_are_c_to_4c_to_c(activation):
    mlp = MLP(config(activation=activation, dropout=0.25))
    for name in ("c_fc", "act", "c_proj", "dropout"):
        assert hasattr(mlp, name), f"the MLP should have a part named {name} (forward uses it)"
    for name, shape in (("c_fc", (4 * C, C)), ("c_proj", (C, 4 * C))):
        layer = getattr(mlp, name)
        assert isinstance(layer, nn.Linear), f"{name} should be an nn.Linear, got {type(layer).__name__}"
        got = tuple(layer.weight.shape)
        assert got == shape, (
            f"{name} should map {shape[1]} -> {shape[0]} features (n_embd={C}, 4 * n_embd="
            f"{4 * C}), so its weight is {shape}; got {got}")
        assert layer.bias is not None, f"{name} should have a bias (nn.Linear's default)"
    assert isinstance(mlp.dropout, nn.Dropout) and mlp.dropout.p == 0.25, (
        f"dropout should be nn.Dropout(config.dropout) = nn.Dropout(0.25), got {mlp.dropout}")
    n = sum(p.numel() for p in mlp.parameters())
    assert n == 8 * C * C + 5 * C, (
        f"the MLP of width {C} should have 8 C^2 + 5 C = {8 * C * C + 5 * C} parameters, got {n}")


@pytest.mark.parametrize("activation,fn", [("relu", F.relu), ("gelu", F.gelu)])
def test_mlp_non_linearity_is_the_configured_one(activation, fn):
    mlp = MLP(config(activation=activation))
    x = torch.tensor([-2.0, -0.5, 0.0, 0.7, 3.0])
    got = mlp.act(x)
    want = fn(x)
    if torch.allclose(got, x):
        pytest.fail(f"act should be the non-linearity {activation}, but it leaves its input "
                    f"unchanged: act(-2.0) = {got[0].item():g}, {activation} gives "
                    f"{want[0].item():.4g}. Without it, C -> 4C -> C is one linear map")
    assert torch.allclose(got, want, atol=1e-6), (
        f"with activation={activation!r}, act(-0.5) should be {want[1].item():.4f}, got "
        f"{got[1].item():.4f} (config.activation picks nn.ReLU or nn.GELU)")


def test_mlp_forward_is_the_formula():
    mlp = randomize(MLP(config(activation="gelu")), 4)
    x = torch.randn(B, T, C, generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        got = mlp(x)
        want = F.linear(F.gelu(F.linear(x, mlp.c_fc.weight, mlp.c_fc.bias)), mlp.c_proj.weight,
                        mlp.c_proj.bias)
    diff = (got - want).abs().max().item()
    assert diff < 1e-5, f"the MLP's output should be c_proj(gelu(c_fc(x))); yours differs by {diff:.3g}"


# --------------------------------------------------------------------------- 4.3 Block


def block_mistakes(x, b) -> dict[str, torch.Tensor]:
    attn, mlp, ln_1, ln_2 = b.attn, b.mlp, b.ln_1, b.ln_2
    h = x + attn(ln_1(x))
    n1 = ln_1(x)
    return {
        "no residual around the attention (x = attn(ln_1(x)))": (lambda h: h + mlp(ln_2(h)))(attn(ln_1(x))),
        "no residual around the MLP (x = mlp(ln_2(x)))": mlp(ln_2(h)),
        "no residuals at all": mlp(ln_2(attn(ln_1(x)))),
        "post-LN: ln_1(x + attn(x)), then ln_2(x + mlp(x))":
            (lambda h: ln_2(h + mlp(h)))(ln_1(x + attn(x))),
        "ln_1 before both branches (ln_2 unused)": h + mlp(ln_1(h)),
        "the MLP before the attention": (lambda h: h + attn(ln_1(h)))(x + mlp(ln_2(x))),
        "the residual adds the normalised x (ln_1(x) + attn(ln_1(x)))":
            (lambda h: h + mlp(ln_2(h)))(n1 + attn(n1)),
        "both branches reading the same x (x + attn(ln_1(x)) + mlp(ln_2(x)))":
            x + attn(ln_1(x)) + mlp(ln_2(x)),
    }


def test_block_is_pre_ln_with_residuals():
    b = randomize(Block(config()), 5)
    x = torch.randn(B, T, C, generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        got = b(x)
        h = x + b.attn(b.ln_1(x))
        want = h + b.mlp(b.ln_2(h))
        compare("the block's output", got, want, block_mistakes(x, b),
                "h = x + attn(ln_1(x)), then h + mlp(ln_2(h))")


def test_block_with_silent_branches_passes_its_input_on():
    b = randomize(Block(config()), 6)
    with torch.no_grad():
        for proj in (b.attn.c_proj, b.mlp.c_proj):  # both branches now output zeros
            proj.weight.zero_()
            proj.bias.zero_()
        x = torch.randn(B, T, C, generator=torch.Generator().manual_seed(6))
        diff = (b(x) - x).abs().max().item()
    assert diff < 1e-6, (
        f"when both branches output zeros the block should return x unchanged (the residual "
        f"path carries it), but it changed by up to {diff:.3g}: x + branch(LayerNorm(x)), "
        "not LayerNorm(x + branch(x)) nor branch(x) alone")
