"""Stage 3's build-up from averaging the past to self-attention (stage3_attention/buildup.py):
the first three ways of mixing the past compute the same averages, self-attention with
equal scores is that average, it is the stage's Head, and ``python -m
stage3_attention.buildup`` prints every step of the small example with numbers that are
computed, not typed."""

from __future__ import annotations

import math
import re

import pytest
import torch

from stage3_attention import buildup
from stage3_attention.model import Head

FORMS = [buildup.average_loop, buildup.average_matmul, buildup.average_softmax]


def test_loop_matmul_and_masked_softmax_compute_the_same_averages():
    x = torch.randn(3, 7, 5, generator=torch.Generator().manual_seed(0))
    loop = buildup.average_loop(x)
    assert torch.allclose(buildup.average_matmul(x), loop, atol=1e-6)
    assert torch.allclose(buildup.average_softmax(x), loop, atol=1e-6)
    # Row t really is the mean of rows 0..t, and nothing after t.
    assert torch.allclose(loop[:, 3], x[:, :4].mean(dim=1))
    assert torch.allclose(loop[:, 0], x[:, 0])
    assert loop.shape == x.shape


def test_the_averaging_weights_are_one_over_t_plus_one_left_of_the_diagonal():
    T = 5
    expected = torch.tril(torch.ones(T, T)) / torch.arange(1, T + 1)[:, None]
    for form in FORMS:
        assert torch.allclose(buildup.weights_of(form, T), expected), form.__name__


def test_self_attention_with_equal_scores_is_the_average_of_the_past():
    x = torch.randn(2, 6, 4, generator=torch.Generator().manual_seed(1))
    zero = torch.zeros(4, 4)
    out, wei = buildup.self_attention(x, zero, zero, torch.eye(4))
    assert torch.allclose(out, buildup.average_softmax(x), atol=1e-6)
    assert torch.allclose(wei[0], buildup.weights_of(buildup.average_matmul, 6))


def test_self_attention_weights_depend_on_the_data_and_never_on_the_future():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1, 6, 4, generator=g)
    W_q, W_k, W_v = (torch.randn(4, 3, generator=g) for _ in range(3))
    out, wei = buildup.self_attention(x, W_q, W_k, W_v)
    assert out.shape == (1, 6, 3) and wei.shape == (1, 6, 6)
    assert torch.allclose(wei.sum(-1), torch.ones(1, 6))
    assert (wei[0].triu(1) == 0).all()
    assert not torch.allclose(wei[0], buildup.weights_of(buildup.average_matmul, 6), atol=1e-3)
    # Changing the last position changes no earlier output.
    x2 = x.clone()
    x2[0, -1] += 10.0
    out2, _ = buildup.self_attention(x2, W_q, W_k, W_v)
    assert torch.allclose(out2[:, :-1], out[:, :-1])
    assert not torch.allclose(out2[:, -1], out[:, -1])


def test_self_attention_scales_the_scores_by_the_square_root_of_the_head_size():
    g = torch.Generator().manual_seed(2)
    x = torch.randn(1, 3, 4, generator=g)
    W_q, W_k = torch.randn(4, 9, generator=g), torch.randn(4, 9, generator=g)
    _, wei = buildup.self_attention(x, W_q, W_k, torch.eye(4))
    scores = (x @ W_q) @ (x @ W_k).transpose(-2, -1) / 3.0  # sqrt(9)
    expected = scores.masked_fill(torch.ones(3, 3).tril() == 0, float("-inf")).softmax(-1)
    assert torch.allclose(wei, expected, atol=1e-6)


def test_self_attention_is_the_stage3_head_with_the_same_weights():
    torch.manual_seed(1)
    head = Head(n_embd=6, head_size=4, block_size=8)
    x = torch.randn(2, 8, 6)
    # nn.Linear keeps its weight as (out, in): x @ W.T is the layer.
    out, wei = buildup.self_attention(x, head.query.weight.T, head.key.weight.T,
                                      head.value.weight.T)
    with torch.no_grad():
        assert torch.allclose(out, head(x), atol=1e-6)
    assert torch.allclose(wei, head.last_attention, atol=1e-6)


def test_the_example_is_small_seeded_and_consistent():
    ex = buildup.example()
    x = ex["x"]
    assert x.shape == (1, buildup.T_EXAMPLE, buildup.C_EXAMPLE)
    assert torch.equal(x, x.round()) and x.min() >= 0 and x.max() <= 9  # small whole numbers
    for name in ("loop", "matmul", "softmax"):
        assert torch.allclose(ex[name], buildup.average_loop(x), atol=1e-6), name
    out, wei = buildup.self_attention(x, *ex["W"])
    assert torch.equal(ex["out"], out) and torch.equal(ex["wei"], wei)
    # The same seed, the same example; another seed, another one.
    assert torch.equal(buildup.example()["x"], x)
    assert not torch.equal(buildup.example(seed=7)["x"], x)


def test_agreement_is_tiny_for_the_real_forms_and_catches_a_wrong_one(monkeypatch):
    diffs = buildup.agreement()
    assert list(diffs) == ["loop vs matmul", "loop vs softmax",
                           "softmax vs self-attention with W_q = W_k = 0"]
    assert all(0 <= d < 1e-5 for d in diffs.values()), diffs
    monkeypatch.setattr(buildup, "average_matmul", lambda x: x)  # "forgets" to average
    broken = buildup.agreement()
    assert broken["loop vs matmul"] > 0.1 and broken["loop vs softmax"] < 1e-5


@pytest.mark.parametrize(("m", "text"), [
    (torch.tensor([[1.0, 0.5], [0.25, -2.0]]), " 1.00   0.50\n 0.25  -2.00"),
    (torch.tensor([[0.0, float("-inf")]]), "0.00  -inf"),
])
def test_fmt_aligns_two_decimals_and_keeps_minus_infinity(m, text):
    assert buildup.fmt(m) == text


def test_the_cli_prints_every_step_of_the_example_and_the_agreement(capsys):
    buildup.main([])
    out = capsys.readouterr().out
    titles = re.findall(r"^== (.+)$", out, re.M)
    assert titles == ["1. loop", "2. matrix product", "3. masked softmax", "4. self-attention",
                      "do the steps agree?"]
    ex = buildup.example()
    assert f"x (4, 2):\n{buildup.fmt(ex['x'][0])}\n" in out
    assert f"wei = softmax (4, 4):\n{buildup.fmt(ex['wei'][0])}\n" in out
    assert f"out = wei @ v (4, 2):\n{buildup.fmt(ex['out'][0])}\n" in out
    # The averaging weights of step 2: 1/(t+1) left of the diagonal.
    assert "wei = tril / row sums (4, 4):\n1.00  0.00  0.00  0.00\n0.50  0.50  0.00  0.00\n" in out
    for name, d in buildup.agreement().items():
        assert f"largest difference, {name}: {d:.1e}" in out
    masked = out.split("masked (4, 4):\n")[1].split("\n\n")[0].splitlines()
    assert [row.split().count("-inf") for row in masked] == [3, 2, 1, 0]  # the future


def test_the_cli_seed_picks_another_example(capsys):
    buildup.main(["--seed", "7"])
    out = capsys.readouterr().out
    assert f"x (4, 2):\n{buildup.fmt(buildup.example(7)['x'][0])}\n" in out
    with pytest.raises(SystemExit) as e:
        buildup.main(["--seed", "x"])
    assert e.value.code == 2


def test_the_weights_of_the_example_keep_the_softmax_soft():
    """Scores of order 1, so the printed attention weights are not all 0s and 1s."""
    wei = buildup.example()["wei"][0]
    allowed = torch.ones_like(wei).tril().bool()
    assert wei[allowed].min() > 0.01 and wei[1:][allowed[1:]].max() < 0.99
    assert math.isclose(float(wei.sum()), buildup.T_EXAMPLE, rel_tol=1e-6)
