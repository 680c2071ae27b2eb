"""Stage 2's exercises, as the workbook grader sees them (tools/workbook.py: 2.1 the
bigram's forward pass, 2.2 stream, 2.3 the loss's gradient by hand): one typical mistake
per test, each failing with a message in plain words, saying what was expected and what
came instead."""

from __future__ import annotations

import inspect
import math

import pytest
import torch
from torch.nn import functional as F

from stage2_bigram import backward
from stage2_bigram import model as M
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
    sums = logits.sum(-1)
    assert torch.allclose(logits, want), (
        "the logits of token i should be row i of token_embedding_table, unchanged"
        + (": yours are probabilities (each row sums to 1); no softmax here, F.cross_entropy "
           "takes it itself" if torch.allclose(sums, torch.ones_like(sums)) else ""))


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


class TooManyTokens(Exception):
    """A stream that samples far more tokens than it was asked for: its loop does not end."""


class SampleNextSpy:
    """Stands in for model.sample_next while a stream runs: notes what each call was given
    (by name, as sample_next would read it) and stops a stream whose loop does not end,
    after ``limit`` calls, before it fills the time or the memory of the tests."""

    def __init__(self):
        self.real, self.calls, self.limit = M.sample_next, [], 50

    def __call__(self, *args, **kwargs):
        try:
            bound = inspect.signature(self.real).bind(*args, **kwargs)
        except TypeError as e:
            raise TypeError(f"sample_next cannot take these arguments: {e}") from None
        bound.apply_defaults()
        self.calls.append(dict(bound.arguments))
        if len(self.calls) > self.limit:
            raise TooManyTokens(len(self.calls))
        return self.real(*args, **kwargs)


@pytest.fixture
def spy(monkeypatch) -> SampleNextSpy:
    spy = SampleNextSpy()
    monkeypatch.setattr(M, "sample_next", spy)
    return spy


def sample(spy: SampleNextSpy, run, n: int, what: str):
    """``run()`` (a generate or a stream asked for ``n`` new tokens), failing in words if
    its loop does not stop."""
    spy.limit = len(spy.calls) + 10 * n + 20
    try:
        return run()
    except TooManyTokens:
        pytest.fail(f"{what}, asked for {n} new tokens, went on sampling (sample_next was called "
                    f"{10 * n + 20} times and more): its loop should stop after max_new_tokens "
                    "tokens; does it ever end?")


def test_stream_passes_its_settings_on_to_sample_next(spy):
    m = chain()
    prompt = torch.tensor([[0, 3], [5, 1]])
    g = torch.Generator().manual_seed(0)
    asked = {"temperature": 0.5, "top_k": 2, "generator": g}
    spy.limit = 40
    error = None
    try:
        list(m.stream(prompt, 3, **asked))
    except TooManyTokens:
        pass  # the loop does not end: the next tests say so
    except Exception as e:  # noqa: BLE001 (what the settings it got made sample_next do)
        error = e
    if not spy.calls:
        pytest.fail("stream should sample each new token with sample_next(logits, temperature, "
                    "top_k, generator), but it never called sample_next"
                    + (f" (it raised {type(error).__name__}: {error})" if error else ""))
    got = spy.calls[0]
    if (got["temperature"], got["top_k"]) == (2, 0.5):
        pytest.fail("stream passed temperature and top_k to sample_next the wrong way round "
                    "(sample_next got temperature=2 and top_k=0.5): sample_next(logits, "
                    "temperature, top_k, generator)")
    default = inspect.signature(M.LanguageModel.stream).parameters
    for name, want in asked.items():
        value = got[name]
        if value is want or (name != "generator" and value == want):
            continue
        if value is None or value == default[name].default:
            pytest.fail(f"stream(..., {name}={want!r}) should pass {name} on to sample_next, "
                        f"but sample_next got {name}={value!r}, its default: {name} was not "
                        "passed on")
        pytest.fail(f"stream(..., {name}={want!r}) should pass {name} on to sample_next, but "
                    f"sample_next got {name}={value!r}: the settings went to the wrong places "
                    "(sample_next(logits, temperature, top_k, generator))")
    logits = got["logits"]
    table = m.token_embedding_table.weight
    if tuple(logits.shape) != (2, V):
        pytest.fail(f"sample_next should get the logits of the last position only, (B, "
                    f"vocab_size) = (2, {V}), got {tuple(logits.shape)} (logits[:, -1, :])")
    first, last = table[prompt[:, 0]], table[prompt[:, -1]]
    if torch.allclose(logits, first) and not torch.allclose(logits, last):
        pytest.fail("sample_next got the logits of the first position, not of the last: only "
                    "the last position predicts the next token (logits[:, -1, :])")
    if error is not None:
        raise error


def test_greedy_follows_the_last_token(spy):
    m = chain()
    prompt = torch.tensor([[0, 3], [5, 1]])
    out = sample(spy, lambda: m.generate(prompt, 5, temperature=0), 5, "generate")
    want = torch.tensor([[0, 3, 4, 5, 0, 1, 2], [5, 1, 2, 3, 4, 5, 0]])
    grown = sum(range(3, 8))  # what 5 yields of the whole context, 3 to 7 tokens long, make
    assert out.shape == want.shape, (
        f"generate(prompt of (2, 2), 5 new) should give (2, 7), got {tuple(out.shape)}"
        + ("" if out.dim() != 2 or out.shape[0] != 2 else
           f": generate joins what stream yields, and stream yielded the whole context each "
           f"time ({grown} tokens in 5 yields): yield only the new (B, 1) token, idx_next"
           if out.shape[1] - 2 == grown else
           f": {out.shape[1] - 2} new tokens, not 5 (does the loop run max_new_tokens times?)"))
    assert torch.equal(out, want), (
        f"greedily (temperature 0) this bigram goes i -> i + 1 from the LAST token of the "
        f"context, growing it by each new token: from [0, 3] expected "
        f"{want[0].tolist()}, got {out[0].tolist()}")


def test_stream_yields_each_new_token_once(spy):
    m = chain()
    pieces = sample(spy, lambda: list(m.stream(torch.tensor([[2]]), 4, temperature=0)), 4,
                    "stream")
    assert len(pieces) == 4, f"stream(..., max_new_tokens=4) should yield 4 tokens, got {len(pieces)}"
    shapes = [tuple(p.shape) for p in pieces]
    assert all(s == (1, 1) for s in shapes), (
        f"each yielded token should be the new (B, 1) token only, got shapes {shapes}")
    assert [p.item() for p in pieces] == [3, 4, 5, 0], (
        f"from [2] greedily expected 3, 4, 5, 0, got {[p.item() for p in pieces]}")
    nothing = sample(spy, lambda: list(m.stream(torch.tensor([[2]]), 0)), 0, "stream")
    assert nothing == [], f"max_new_tokens=0 should yield nothing, got {len(nothing)} tokens"


def test_top_k_one_is_greedy_too(spy):
    m = chain()
    prompt = torch.zeros(8, 1, dtype=torch.long)
    out = sample(spy, lambda: m.generate(prompt, 12, temperature=1.0, top_k=1,
                                         generator=torch.Generator().manual_seed(0)),
                 12, "generate")
    want = torch.arange(13).remainder(V).expand(8, 13)
    assert torch.equal(out, want), (
        "with top_k=1 every step keeps only the likeliest token, so sampling is greedy: "
        f"expected {want[0].tolist()}, got {out[0].tolist()} (pass temperature and top_k "
        "on to sample_next)")


def test_the_generator_decides_the_sample(spy):
    m = chain(strength=0.5)
    prompt = torch.zeros(4, 1, dtype=torch.long)
    a = sample(spy, lambda: m.generate(prompt, 20, generator=torch.Generator().manual_seed(5)),
               20, "generate")
    torch.manual_seed(123)
    b = m.generate(prompt, 20, generator=torch.Generator().manual_seed(5))
    assert torch.equal(a, b), (
        "two generators with the same seed should give the same sample, whatever the global "
        "seed (pass generator on to sample_next)")


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_generate_keeps_the_prompt(spy, temperature):
    m = chain()
    prompt = torch.tensor([[4, 1, 2]])
    out = sample(spy, lambda: m.generate(prompt, 3, temperature=temperature,
                                         generator=torch.Generator().manual_seed(0)),
                 3, "generate")
    assert torch.equal(out[:, :3], prompt), (
        f"generate should return the prompt followed by the new tokens, got {out.tolist()}")


# --------------------------------------------------------------------------- 2.3 logits_grad


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and bool(torch.allclose(a, b, atol=1e-6))


def _rows(t: torch.Tensor) -> str:
    return "[" + ", ".join("[" + ", ".join(f"{x:.3f}" for x in row) + "]" for row in t.tolist()) + "]"


def test_logits_grad_is_softmax_minus_onehot_over_n():
    """dL/dlogits of the mean cross-entropy: (softmax(logits) - onehot(targets)) / N, the
    gradient autograd finds. N = 4 examples and V = 5 characters differ, so that each
    mistake of a dimension shows; the targets never name the last character."""
    N, V = 4, 5
    logits = torch.tensor([[1.0, -0.5, 0.3, 2.0, 0.0], [0.2, 0.2, -1.0, 0.5, 1.5],
                           [-0.3, 1.2, 0.8, -2.0, 0.1], [0.0, 0.4, -0.6, 1.1, -0.2]])
    targets = torch.tensor([1, 3, 0, 1])
    given = logits.clone()
    leaf = logits.clone().requires_grad_()
    F.cross_entropy(leaf, targets).backward()
    want = leaf.grad
    try:
        got = backward.logits_grad(logits, targets)
    except RuntimeError as e:
        if "must match the size" not in str(e):
            raise
        pytest.fail(f"logits_grad of (N, V) = ({N}, {V}) logits, with targets {targets.tolist()} "
                    f"that never name the last character, combined tensors of different shapes: "
                    f"is the one-hot of the targets narrower than V? F.one_hot(targets) is only "
                    f"as wide as the largest target + 1; F.one_hot(targets, num_classes=V) is V "
                    f"wide ({type(e).__name__}: {e})")
    if not torch.equal(logits, given):
        pytest.fail("logits_grad changed the logits it was given (an in-place operation on "
                    "them: exp_, -=, /= ...): the caller still needs them; compute on a new "
                    "tensor (F.softmax returns one)")
    if not isinstance(got, torch.Tensor) or tuple(got.shape) != (N, V):
        shape = tuple(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__
        pytest.fail(f"logits_grad of (N, V) = ({N}, {V}) logits should return a gradient of the "
                    f"same shape, one number per logit, got {shape}")
    if _close(got, want):
        return
    probs, onehot = F.softmax(logits, dim=-1), F.one_hot(targets, V).float()
    every = probs.clone()
    every[:, targets] -= 1
    argmax = probs.clone()
    argmax[torch.arange(N), logits.argmax(-1)] -= 1
    set_to = probs.clone()
    set_to[torch.arange(N), targets] = -1
    known = [
        (want * N, f"not divided by N: the loss is the mean over the N = {N} examples, so "
                   "each example's gradient is divided by N"),
        (want * N / V, f"divided by V = {V}, the number of characters, not by N = {N}, the "
                       "number of examples (logits.shape[0])"),
        (want / V, f"divided by N * V = {N * V}, every logit, not by N = {N}, the examples: "
                   "the loss is the mean over examples only"),
        (want / N, f"divided by N twice: once is the mean over the N = {N} examples"),
        (-want, "the sign is flipped: the gradient is softmax - onehot (a step against it "
                "raises the true character's logit), not onehot - softmax"),
        (probs / N, "the 1 at each example's true character is not subtracted: the gradient "
                    "is (softmax - onehot(targets)) / N"),
        ((F.softmax(logits, dim=0) - onehot) / N,
         "the softmax ran over the wrong dimension: over the N examples (dim 0), not over each "
         "example's V logits (dim=-1); each row of probabilities should sum to 1"),
        ((F.log_softmax(logits, dim=-1) - onehot) / N,
         "log_softmax, not softmax: the gradient holds the probabilities themselves, "
         "softmax(logits), minus the one-hot"),
        (every / N, "the 1 was subtracted in every row at every example's target "
                    "(grad[:, targets]), not only in row n at its own target y_n "
                    "(grad[torch.arange(N), targets])"),
        (argmax / N, "the 1 was subtracted at each example's likeliest character (the argmax "
                     "of its logits), not at its true one (targets)"),
        (set_to / N, "the true character's entry was set to -1 (= -1), not lowered by 1 "
                     "(-= 1): its probability p becomes p - 1"),
    ]
    said = next((words for value, words in known if _close(got, value)), None)
    if said:
        pytest.fail(f"logits_grad: {said}")
    sums = got.sum(-1)
    pytest.fail("logits_grad should be (softmax(logits) - onehot(targets)) / N, autograd's "
                f"gradient: for the example 0 (target {targets[0].item()}) expected "
                f"{_rows(want[:1])[1:-1]}, got {_rows(got[:1])[1:-1]}"
                + ("" if _close(sums, torch.zeros(N)) else
                   "; each row should sum to 0 (the probabilities sum to 1, minus the 1 at the "
                   f"target), yours sum to {[round(x, 3) for x in sums.tolist()]}"))


def test_logits_grad_of_large_logits_does_not_overflow():
    """A trained model's logits can be large: exp(300) is inf in float32, and inf / inf is
    nan. F.softmax subtracts each row's largest logit before exp, so it never overflows."""
    logits = torch.tensor([[300.0, 0.0, -50.0], [1.0, 2.0, 120.0]])
    targets = torch.tensor([1, 2])
    got = backward.logits_grad(logits.clone(), targets)
    want = (F.softmax(logits, dim=-1) - F.one_hot(targets, 3)) / 2
    if not torch.isfinite(got).all():
        pytest.fail("logits_grad of logits as large as 300 gave inf or nan: exp(300) is too big "
                    "for a float32 (it becomes inf, and inf / inf is nan); use F.softmax, which "
                    "subtracts each row's largest logit before exp (or subtract it yourself)")
    assert torch.allclose(got, want, atol=1e-6), (
        f"logits_grad of logits [[300, 0, -50], [1, 2, 120]], targets [1, 2] should be "
        f"{_rows(want)}, got {_rows(got)}")


@pytest.mark.parametrize("N, V", [(1, 2), (6, 3), (64, 65)])
def test_logits_grad_equals_autograd_for_any_batch(N, V):
    g = torch.Generator().manual_seed(N + V)
    logits = 2 * torch.randn(N, V, generator=g)
    targets = torch.randint(V, (N,), generator=g)
    leaf = logits.clone().requires_grad_()
    F.cross_entropy(leaf, targets).backward()
    got = backward.logits_grad(logits, targets)
    assert isinstance(got, torch.Tensor) and tuple(got.shape) == (N, V), (
        f"logits_grad of ({N}, {V}) logits should be ({N}, {V}), got "
        f"{tuple(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__}")
    assert torch.allclose(got, leaf.grad, atol=1e-6), (
        f"for N = {N} examples and V = {V} characters logits_grad differs from autograd's "
        f"gradient by up to {(got - leaf.grad).abs().max().item():.3g}: (softmax(logits) - "
        "onehot(targets)) / N, with N = logits.shape[0]")
