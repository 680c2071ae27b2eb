"""Stage 2: the bigram language model and sampling."""

from __future__ import annotations

import math

import pytest
import torch
from conftest import TINY_TEXT

from stage2_bigram.data import get_batch
from stage2_bigram.errors import UserError
from stage2_bigram.model import LanguageModel, ModelConfig, sample_next
from stage2_bigram.report import param_breakdown
from stage2_bigram.tokenizer import CharTokenizer


def make_model(vocab_size: int = 20, seed: int = 0) -> LanguageModel:
    torch.manual_seed(seed)
    return LanguageModel(ModelConfig(vocab_size=vocab_size))


def test_logits_shape_and_loss():
    model = make_model(20)
    idx = torch.randint(20, (3, 7))
    logits, loss = model(idx)
    assert logits.shape == (3, 7, 20)
    assert loss is None
    logits2, loss = model(idx, torch.randint(20, (3, 7)))
    assert torch.equal(logits, logits2)
    assert loss.shape == () and torch.isfinite(loss)


def test_loss_is_the_mean_cross_entropy_over_all_positions():
    model = make_model(10)
    idx, targets = torch.randint(10, (2, 5)), torch.randint(10, (2, 5))
    logits, loss = model(idx, targets)
    manual = -torch.log_softmax(logits, -1).gather(-1, targets[..., None]).mean()
    assert torch.allclose(loss, manual, atol=1e-6)


@pytest.mark.parametrize("vocab_size", [30, 65])
def test_initial_loss_is_close_to_uniform_guessing(vocab_size):
    # A fresh model should know nothing: about -ln(1/V) per character. (With
    # nn.Embedding's default N(0, 1) init it starts ~0.5 nats worse.)
    model = make_model(vocab_size, seed=1)
    g = torch.Generator().manual_seed(0)
    idx = torch.randint(vocab_size, (16, 32), generator=g)
    targets = torch.randint(vocab_size, (16, 32), generator=g)
    _, loss = model(idx, targets)
    assert abs(loss.item() - math.log(vocab_size)) < 0.1


def test_overfits_a_single_batch():
    tok = CharTokenizer.from_text(TINY_TEXT)
    data = torch.tensor(tok.encode(TINY_TEXT))
    x, y = get_batch(data, 4, 8, generator=torch.Generator().manual_seed(0))
    model = make_model(tok.vocab_size)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    first = model(x, y)[1].item()
    for _ in range(200):
        _, loss = model(x, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    last = model(x, y)[1].item()
    assert last < 0.5 * first


def test_same_seed_same_model_and_samples():
    a, b, c = make_model(15, seed=3), make_model(15, seed=3), make_model(15, seed=4)
    for (name, pa), (_, pb), (_, pc) in zip(
        a.state_dict().items(), b.state_dict().items(), c.state_dict().items(), strict=True
    ):
        assert torch.equal(pa, pb), name
        assert not torch.equal(pa, pc), name
    start = torch.zeros(2, 1, dtype=torch.long)
    sa = a.generate(start, 30, generator=torch.Generator().manual_seed(9))
    sb = b.generate(start, 30, generator=torch.Generator().manual_seed(9))
    sc = a.generate(start, 30, generator=torch.Generator().manual_seed(10))
    assert torch.equal(sa, sb)
    assert not torch.equal(sa, sc)


def test_generate_appends_tokens_and_keeps_the_prompt():
    model = make_model(12)
    idx = torch.randint(12, (3, 4))
    out = model.generate(idx, 6, generator=torch.Generator().manual_seed(0))
    assert out.shape == (3, 10)
    assert out.dtype == torch.long
    assert torch.equal(out[:, :4], idx)
    assert ((0 <= out) & (out < 12)).all()
    assert torch.equal(model.generate(idx, 0), idx)


def _greedy_path(model: LanguageModel, idx: torch.Tensor, n: int) -> torch.Tensor:
    for _ in range(n):
        logits, _ = model(idx)
        idx = torch.cat([idx, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    return idx


def test_temperature_zero_is_greedy_and_top_k_one_too():
    model = make_model(25, seed=5)
    idx = torch.tensor([[1], [7]])
    expected = _greedy_path(model, idx, 15)
    g = torch.Generator()
    for seed in (0, 1):
        assert torch.equal(model.generate(idx, 15, temperature=0.0,
                                          generator=g.manual_seed(seed)), expected)
        assert torch.equal(model.generate(idx, 15, top_k=1, generator=g.manual_seed(seed)),
                           expected)


def test_top_k_only_samples_among_the_k_most_likely():
    logits = torch.randn(4, 30, generator=torch.Generator().manual_seed(0))
    allowed = torch.topk(logits, 3).indices
    g = torch.Generator().manual_seed(1)
    seen = sample_next(logits.repeat(300, 1), temperature=2.0, top_k=3, generator=g)
    seen = seen.view(300, 4).T  # (4, 300): 300 draws for each row of logits
    for b in range(4):
        assert set(seen[b].tolist()) == set(allowed[b].tolist())  # all 3, never another


def test_top_k_larger_than_the_vocabulary_is_plain_sampling():
    logits = torch.randn(2, 5)
    a = sample_next(logits, top_k=50, generator=torch.Generator().manual_seed(3))
    b = sample_next(logits, generator=torch.Generator().manual_seed(3))
    assert torch.equal(a, b)


def test_low_temperature_concentrates_on_the_favourite():
    logits = torch.tensor([[2.0, 1.0, 0.0, 0.0]])
    g = torch.Generator().manual_seed(0)

    def share_of_favourite(temperature):
        picks = sample_next(logits.repeat(400, 1), temperature, generator=g)
        return (picks == 0).float().mean().item()

    assert share_of_favourite(0.2) > 0.95 > share_of_favourite(1.0) > 0.4 > share_of_favourite(5.0)


@pytest.mark.parametrize("kwargs, fragment", [
    ({"temperature": -0.5}, "temperature"),
    ({"top_k": 0}, "top_k"),
    ({"top_k": -3}, "top_k"),
])
def test_bad_sampling_settings_are_user_errors(kwargs, fragment):
    model = make_model(8)
    with pytest.raises(UserError, match=fragment):
        model.generate(torch.zeros(1, 1, dtype=torch.long), 3, **kwargs)


def test_nan_temperature_is_a_user_error():
    with pytest.raises(UserError, match="temperature"):
        sample_next(torch.zeros(1, 4), temperature=float("nan"))


def test_the_bigram_blind_spot():
    # Only the last character matters: different histories, same last character,
    # exactly the same prediction. Stage 3 exists to fix this.
    model = make_model(10, seed=2)
    a = torch.tensor([[1, 2, 3, 4, 7]])
    b = torch.tensor([[9, 9, 7]])
    c = torch.tensor([[1, 2, 3, 4, 8]])
    la, lb, lc = (model(t)[0][:, -1] for t in (a, b, c))
    assert torch.equal(la, lb)
    assert not torch.equal(la, lc)


@pytest.mark.parametrize("vocab_size", [1, 13, 65])
def test_param_breakdown_is_the_one_table(vocab_size):
    """The harness's count by part: one (V, V) table, nothing else."""
    parts = param_breakdown(make_model(vocab_size))
    assert parts == {"token_embedding_table": vocab_size * vocab_size,
                     "total": vocab_size * vocab_size}
