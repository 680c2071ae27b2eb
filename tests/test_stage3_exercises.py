"""Stage 3's exercises, as the workbook grader sees them (tools/workbook.py: 3.1
sinusoidal_positions, 3.2 Head.forward, 3.3 LanguageModel.forward): one typical mistake
per test, each failing with a message in plain words, saying what was expected and what
came instead (for attention: which well-known mistake the numbers match)."""

from __future__ import annotations

import math

import pytest
import torch
from torch.nn import functional as F

from stage3_attention.errors import UserError
from stage3_attention.model import Head, LanguageModel, ModelConfig, sinusoidal_positions


def attention(q, k, v, *, causal=True, scale=None, dim=-1, mask_after=False, diagonal=0,
              transposed=False):
    """softmax(q k^T / sqrt(d_k) + mask) v, and the usual ways to get it wrong."""
    scores = (k @ q.transpose(-2, -1)) if transposed else (q @ k.transpose(-2, -1))
    scores = scores / (math.sqrt(k.size(-1)) if scale is None else scale)
    T = q.size(-2)
    hidden = torch.ones(T, T, dtype=torch.bool).tril(diagonal - 1 if diagonal else 0) == 0
    if causal and not mask_after:
        scores = scores.masked_fill(hidden, float("-inf"))
    weights = F.softmax(scores, dim=dim)
    if causal and mask_after:
        weights = weights.masked_fill(hidden, 0.0)
    return weights @ v, weights


def mistakes(q, k, v, causal=True) -> dict[str, torch.Tensor]:
    """What the output is for each well-known mistake."""
    hs = k.size(-1)
    return {
        "scores not divided by sqrt(head_size)": attention(q, k, v, causal=causal, scale=1.0)[0],
        f"scores divided by head_size = {hs}, not by its square root":
            attention(q, k, v, causal=causal, scale=hs)[0],
        "no causal mask (the future is visible)": attention(q, k, v, causal=False)[0],
        "the mask applied after the softmax (rows no longer sum to 1)":
            attention(q, k, v, causal=causal, mask_after=True)[0],
        "the softmax taken over the wrong dimension": attention(q, k, v, causal=causal, dim=-2)[0],
        "k q^T instead of q k^T (the scores transposed)":
            attention(q, k, v, causal=causal, transposed=True)[0],
    }


def compare(what: str, got: torch.Tensor, want: torch.Tensor, wrong: dict) -> None:
    """Fail with a message naming the mistake ``got`` matches, if it matches one."""
    if got.shape != want.shape:
        pytest.fail(f"{what} should have shape {tuple(want.shape)}, got {tuple(got.shape)}")
    if torch.isnan(got).any():
        pytest.fail(f"{what} holds nan: a row of scores is all -inf (does the mask hide the "
                    "diagonal too? position t may attend to itself)")
    if torch.allclose(got, want, atol=1e-5):
        return
    diff = (got - want).abs().max().item()
    named = [name for name, out in wrong.items()
             if out.shape == got.shape and torch.allclose(got, out, atol=1e-5)]
    pytest.fail(f"{what} should be softmax(q k^T / sqrt(head_size) + causal mask) v; yours "
                f"differs by up to {diff:.3g}"
                + (f" and matches the result of {named[0]}" if named else ""))


# --------------------------------------------------------------------------- 3.1 positions


@pytest.mark.parametrize("T,C", [(6, 8), (5, 5), (3, 1)])
def test_sinusoidal_table_is_the_formula(T, C):
    pe = sinusoidal_positions(T, C)
    assert tuple(pe.shape) == (T, C), (
        f"sinusoidal_positions({T}, {C}) should have shape ({T}, {C}), got {tuple(pe.shape)}")
    assert pe.dtype == torch.float32, f"the table should be float32, got {pe.dtype}"
    for p in range(T):
        for c in range(C):
            angle = p / 10000 ** ((c - c % 2) / C)
            want, name = (math.sin(angle), "sin") if c % 2 == 0 else (math.cos(angle), "cos")
            got = pe[p, c].item()
            assert abs(got - want) < 1e-5, (
                f"PE[{p}, {c}] should be {name}({p} / 10000^({c - c % 2}/{C})) = {want:.5f}, got "
                f"{got:.5f} (even columns sin, odd columns cos, positions counted from 0)")


# --------------------------------------------------------------------------- 3.2 Head


def head_and_input(causal=True, seed=0):
    torch.manual_seed(seed)
    head = Head(n_embd=8, head_size=4, block_size=6, causal=causal)
    x = torch.randn(2, 5, 8)
    return head, x, head.query(x), head.key(x), head.value(x)


def test_head_is_causal_scaled_dot_product_attention():
    head, x, q, k, v = head_and_input()
    got = head(x)
    want, _ = attention(q, k, v)
    compare("the head's output", got, want, mistakes(q, k, v))


def test_head_keeps_its_attention_weights():
    head, x, q, k, v = head_and_input(seed=1)
    head(x)
    weights = head.last_attention
    assert weights is not None, "self.last_attention should hold the attention weights"
    assert tuple(weights.shape) == (2, 5, 5), (
        f"self.last_attention should be (B, T, T) = (2, 5, 5), got {tuple(weights.shape)}")
    assert not weights.requires_grad, "self.last_attention should be a detached copy (.detach())"
    sums = weights.sum(-1)
    assert torch.allclose(sums, torch.ones_like(sums), atol=1e-5), (
        f"each row of the attention weights should sum to 1, got row sums "
        f"{[round(s, 3) for s in sums[0].tolist()]} "
        "(softmax over the last dimension, after the mask)")
    above = weights.triu(1).abs().max().item()
    assert above == 0, (
        f"the weights above the diagonal (the future) should be 0, got up to {above:.3g}")
    assert torch.allclose(weights[:, 0, 0], torch.ones(2)), (
        "the first position can only attend to itself: its weight should be 1")


def test_head_output_does_not_depend_on_the_future():
    head, x, *_ = head_and_input(seed=2)
    y = head(x)
    x2 = x.clone()
    x2[:, 3:] = torch.randn(2, 2, 8)
    y2 = head(x2)
    diff = (y[:, :3] - y2[:, :3]).abs().max().item()
    assert diff < 1e-6, (
        f"changing positions 3 and 4 changed the outputs at positions 0..2 by {diff:.3g}: "
        "the causal mask must hide every later position (-inf before the softmax)")


def test_head_without_causal_mask_sees_everything():
    head, x, q, k, v = head_and_input(causal=False, seed=3)
    got = head(x)
    want, _ = attention(q, k, v, causal=False)
    compare("the output of a head with causal=False", got, want, {
        "a causal mask although causal=False": attention(q, k, v)[0],
        "scores not divided by sqrt(head_size)": attention(q, k, v, causal=False, scale=1.0)[0],
    })


# --------------------------------------------------------------------------- 3.3 forward


def small_model(pos="learned", seed=0, block_size=8) -> LanguageModel:
    torch.manual_seed(seed)
    m = LanguageModel(ModelConfig(vocab_size=7, block_size=block_size, n_embd=8, pos=pos))
    with torch.no_grad():  # big enough weights that every part shows in the logits
        for p in m.parameters():
            p.normal_(0.0, 0.5)
    return m


@pytest.mark.parametrize("pos", ["learned", "sinusoidal"])
def test_forward_is_embeddings_head_and_lm_head(pos):
    m = small_model(pos)
    idx = torch.tensor([[1, 2, 3, 4, 5], [6, 0, 6, 0, 6]])  # T = 5 < block_size = 8
    logits, loss = m(idx)
    assert loss is None, f"without targets the loss should be None, got {loss!r}"
    tok, where = m.token_embedding_table(idx), m.positions(5, idx.device)
    want = m.lm_head(m.sa_head(tok + where))
    assert tuple(logits.shape) == (2, 5, 7), (
        f"logits should be (B, T, vocab_size) = (2, 5, 7), got {tuple(logits.shape)}")
    diff = (logits - want).abs().max().item()
    wrong = {"no position embeddings (lm_head(sa_head(tok_emb)))": m.lm_head(m.sa_head(tok)),
             "no attention head (lm_head(tok_emb + positions))": m.lm_head(tok + where),
             "lm_head reading the token embeddings (lm_head(tok_emb))": m.lm_head(tok)}
    named = [name for name, out in wrong.items() if torch.allclose(logits, out, atol=1e-5)]
    assert diff < 1e-5, (
        f"logits should be lm_head(sa_head(token embeddings + positions(T))); yours differ "
        f"by up to {diff:.3g}" + (f" and match those of {named[0]}" if named else ""))


def test_positions_make_a_difference():
    m = small_model("learned", seed=1)
    logits, _ = m(torch.full((1, 4), 3))
    spread = (logits[0] - logits[0, :1]).abs().max().item()
    assert spread > 1e-3, (
        "for the input 3 3 3 3 every position got the same logits: the position embeddings "
        "must be added to the token embeddings")


def test_loss_covers_every_position():
    m = small_model(seed=2)
    idx = torch.tensor([[1, 2, 3], [4, 5, 6]])
    targets = torch.tensor([[2, 3, 4], [5, 6, 0]])
    logits, loss = m(idx, targets)
    want = F.cross_entropy(logits.reshape(-1, 7), targets.reshape(-1))
    assert loss is not None and torch.isclose(loss, want, atol=1e-5), (
        f"the loss should be the mean cross-entropy over all B*T = 6 positions, "
        f"{want.item():.4f}, got {None if loss is None else round(loss.item(), 4)}")


def test_context_longer_than_block_size_is_a_user_error():
    m = small_model(block_size=4)
    m(torch.zeros(1, 4, dtype=torch.long))
    try:
        m(torch.zeros(1, 5, dtype=torch.long))
    except UserError as e:
        assert "block_size" in str(e), f"the error should name block_size, got: {e}"
    except Exception as e:  # noqa: BLE001
        pytest.fail(f"5 tokens with block_size=4 should be a UserError naming block_size, got "
                    f"{type(e).__name__}: {e}")
    else:
        pytest.fail("5 tokens with block_size=4 should be a UserError naming block_size, "
                    "got no error")
