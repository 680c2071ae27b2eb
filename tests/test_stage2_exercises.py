"""Stage 2's exercises, as the workbook grader sees them (tools/workbook.py: 2.1 the
bigram's forward pass, 2.2 stream): one typical mistake per test, each failing with a
message in plain words, saying what was expected and what came instead."""

from __future__ import annotations

import math

import pytest
import torch
from torch.nn import functional as F

from stage2_bigram.model import LanguageModel, ModelConfig

V = 6


def model(seed: int = 0) -> LanguageModel:
    torch.manual_seed(seed)
    return LanguageModel(ModelConfig(vocab_size=V))


def chain(strength: float = 2.0) -> LanguageModel:
    """A bigram whose likeliest next token after i is i + 1 (mod V), not by much."""
    m = LanguageModel(ModelConfig(vocab_size=V))
    with torch.no_grad():
        m.token_embedding_table.weight.zero_()
        for i in range(V):
            m.token_embedding_table.weight[i, (i + 1) % V] = strength
    return m


# --------------------------------------------------------------------------- 2.1 forward


def test_logits_are_rows_of_the_table():
    m = model()
    idx = torch.tensor([[0, 5, 2], [3, 3, 1]])
    logits, loss = m(idx)
    assert loss is None, f"without targets the loss should be None, got {loss!r}"
    assert tuple(logits.shape) == (2, 3, V), (
        f"logits for a (2, 3) batch should be (B, T, vocab_size) = (2, 3, {V}), got "
        f"{tuple(logits.shape)}")
    want = m.token_embedding_table.weight[idx]
    assert torch.allclose(logits, want), (
        "the logits of token i should be row i of token_embedding_table, unchanged")


def test_loss_is_the_mean_cross_entropy_of_every_position():
    m = model(1)
    idx = torch.tensor([[0, 5, 2, 4], [3, 3, 1, 0]])
    targets = torch.tensor([[5, 2, 4, 1], [3, 1, 0, 2]])
    logits, loss = m(idx, targets)
    assert tuple(logits.shape) == (2, 4, V), (
        f"with targets the logits should still be (B, T, vocab_size) = (2, 4, {V}), got "
        f"{tuple(logits.shape)}")
    table = m.token_embedding_table.weight
    want = -F.log_softmax(table[idx], dim=-1).gather(-1, targets[..., None]).mean()
    assert loss is not None and loss.dim() == 0, f"the loss should be one number, got {loss!r}"
    assert torch.isclose(loss, want, atol=1e-6), (
        f"the loss should be the mean over all B*T = 8 positions of -log softmax(logits)"
        f"[target] = {want.item():.5f}, got {loss.item():.5f}")


def test_first_loss_is_about_ln_vocab_size():
    m = model(2)
    idx = torch.randint(V, (8, 16), generator=torch.Generator().manual_seed(2))
    _, loss = m(idx, idx.roll(-1, 1))
    assert abs(loss.item() - math.log(V)) < 0.05, (
        f"with small random weights the first loss should be close to ln({V}) = "
        f"{math.log(V):.3f}, got {loss.item():.3f}")


def test_loss_has_a_gradient():
    m = model(3)
    idx = torch.tensor([[1, 2, 3]])
    _, loss = m(idx, torch.tensor([[2, 3, 4]]))
    loss.backward()
    grad = m.token_embedding_table.weight.grad
    assert grad is not None and grad.abs().sum() > 0, (
        "loss.backward() should give the table a gradient: compute the loss from the logits "
        "with torch operations")


# --------------------------------------------------------------------------- 2.2 stream


def test_greedy_follows_the_last_token():
    m = chain()
    prompt = torch.tensor([[0, 3], [5, 1]])
    out = m.generate(prompt, 5, temperature=0)
    want = torch.tensor([[0, 3, 4, 5, 0, 1, 2], [5, 1, 2, 3, 4, 5, 0]])
    assert out.shape == want.shape, (
        f"generate(prompt of (2, 2), 5 new) should give (2, 7), got {tuple(out.shape)}")
    assert torch.equal(out, want), (
        f"greedily (temperature 0) this bigram goes i -> i + 1 from the LAST token of the "
        f"context, growing it by each new token: from [0, 3] expected "
        f"{want[0].tolist()}, got {out[0].tolist()}")


def test_stream_yields_each_new_token_once():
    m = chain()
    pieces = list(m.stream(torch.tensor([[2]]), 4, temperature=0))
    assert len(pieces) == 4, f"stream(..., max_new_tokens=4) should yield 4 tokens, got {len(pieces)}"
    shapes = [tuple(p.shape) for p in pieces]
    assert all(s == (1, 1) for s in shapes), (
        f"each yielded token should be the new (B, 1) token only, got shapes {shapes}")
    assert [p.item() for p in pieces] == [3, 4, 5, 0], (
        f"from [2] greedily expected 3, 4, 5, 0, got {[p.item() for p in pieces]}")
    assert list(m.stream(torch.tensor([[2]]), 0)) == [], "max_new_tokens=0 should yield nothing"


def test_top_k_one_is_greedy_too():
    m = chain()
    prompt = torch.zeros(8, 1, dtype=torch.long)
    out = m.generate(prompt, 12, temperature=1.0, top_k=1,
                     generator=torch.Generator().manual_seed(0))
    want = torch.arange(13).remainder(V).expand(8, 13)
    assert torch.equal(out, want), (
        "with top_k=1 every step keeps only the likeliest token, so sampling is greedy: "
        f"expected {want[0].tolist()}, got {out[0].tolist()} (pass temperature and top_k "
        "on to sample_next)")


def test_the_generator_decides_the_sample():
    m = chain(strength=0.5)
    prompt = torch.zeros(4, 1, dtype=torch.long)
    a = m.generate(prompt, 20, generator=torch.Generator().manual_seed(5))
    torch.manual_seed(123)
    b = m.generate(prompt, 20, generator=torch.Generator().manual_seed(5))
    assert torch.equal(a, b), (
        "two generators with the same seed should give the same sample, whatever the global "
        "seed (pass generator on to sample_next)")


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_generate_keeps_the_prompt(temperature):
    m = chain()
    prompt = torch.tensor([[4, 1, 2]])
    out = m.generate(prompt, 3, temperature=temperature, generator=torch.Generator().manual_seed(0))
    assert torch.equal(out[:, :3], prompt), (
        f"generate should return the prompt followed by the new tokens, got {out.tolist()}")
