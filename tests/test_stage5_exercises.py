"""Stage 5's exercises, as the workbook grader sees them (tools/workbook.py: 5.1 GPT-2's
initialisation, 5.2 get_lr, 5.3 sample_next): one typical mistake per test, each failing
with a message in plain words, saying what was expected and what came instead."""

from __future__ import annotations

import math
from argparse import Namespace

import pytest
import torch
from torch.nn import functional as F

from stage5_gpt import train as T
from stage5_gpt.errors import UserError
from stage5_gpt.model import GPT, GPTConfig, sample_next

# --------------------------------------------------------------------------- 5.1 init


def gpt(seed: int = 0, **kw) -> GPT:
    torch.manual_seed(seed)
    return GPT(GPTConfig(**{"vocab_size": 64, "block_size": 32, "n_layer": 4, "n_head": 4,
                            "n_embd": 64, **kw}))


def test_residual_projections_are_scaled_down_by_sqrt_2_n_layer():
    model = gpt()
    want = 0.02 / math.sqrt(2 * 4)
    for name, p in model.named_parameters():
        if name.endswith("c_proj.weight"):
            got = p.std().item()
            assert abs(got - want) < 0.1 * want, (
                f"{name} should start with std 0.02 / sqrt(2 * n_layer) = 0.02 / sqrt(8) = "
                f"{want:.5f}, got {got:.5f} (every c_proj.weight, and only those)")


def test_other_weights_are_n_0_0_02_and_biases_zero():
    model = gpt(1)
    for name, p in model.named_parameters():
        if name.endswith("c_proj.weight"):
            continue
        if "ln_" in name:
            want = 1.0 if name.endswith("weight") else 0.0
            assert torch.all(p == want), f"{name} should start at {want:g} (LayerNorm's default)"
        elif name.endswith("bias"):
            assert torch.all(p == 0), (
                f"{name} should start at 0 (only weights are drawn), got values up to "
                f"{p.abs().max().item():.3g}")
        else:
            got = p.std().item()
            assert abs(got - 0.02) < 0.002, (
                f"{name} should start with std 0.02 (every matrix but the c_proj weights, the "
                f"embeddings too), got {got:.4f}")


@pytest.mark.parametrize("tie", [True, False])
def test_tie_weights_shares_one_matrix(tie):
    model = gpt(2, tie_weights=tie)
    shared = model.lm_head.weight is model.transformer.wte.weight
    assert shared == tie, (
        f"with tie_weights={tie}, lm_head.weight should {'be' if tie else 'not be'} the very "
        f"tensor transformer.wte.weight (self.lm_head.weight = self.transformer.wte.weight)")
    if tie:
        got = model.lm_head.weight.std().item()
        assert abs(got - 0.02) < 0.002, f"the tied matrix should start with std 0.02, got {got:.4f}"


# --------------------------------------------------------------------------- 5.2 get_lr


def lr_args(**kw) -> Namespace:
    return Namespace(**{"lr": 1e-3, "min_lr": 1e-4, "warmup_iters": 10, "lr_decay_iters": 100,
                        "max_iters": 200, **kw})


def test_warmup_climbs_linearly_from_the_first_step():
    args = lr_args()
    for step in (0, 1, 4, 9):
        want = 1e-3 * (step + 1) / 10
        got = T.get_lr(step, args)
        assert got == pytest.approx(want), (
            f"during warmup get_lr({step}) should be lr * ({step} + 1) / warmup_iters = "
            f"{want:.6g}, got {got:.6g} (step 0 already trains, so it gets lr / warmup_iters)")
    got = T.get_lr(10, args)
    assert got == pytest.approx(1e-3), (
        f"right after warmup (step 10) the rate should be the peak --lr 1e-3, got {got:.6g}")


def test_cosine_runs_from_lr_to_min_lr():
    args = lr_args()
    for step, want, what in (
            (55, (1e-3 + 1e-4) / 2, "halfway through the cosine: halfway between lr and min_lr"),
            (32.5, 1e-4 + 0.5 * (1 + math.cos(math.pi / 4)) * 9e-4, "a quarter of the way"),
            (99, 1e-4 + 0.5 * (1 + math.cos(math.pi * 89 / 90)) * 9e-4, "one step before the end"),
            (100, 1e-4, "at --lr-decay-iters: --min-lr"),
            (150, 1e-4, "after --lr-decay-iters: --min-lr")):
        got = T.get_lr(step, args)
        assert got == pytest.approx(want, rel=1e-6), (
            f"get_lr({step}) ({what}) should be {want:.6g}, got {got:.6g}; the cosine goes "
            "min_lr + 0.5 * (1 + cos(pi * progress)) * (lr - min_lr), progress = (step - "
            "warmup_iters) / (lr_decay_iters - warmup_iters)")


def test_decay_ends_at_max_iters_without_lr_decay_iters():
    for unset in (None, 0):
        args = lr_args(lr_decay_iters=unset, max_iters=50)
        got = T.get_lr(30, args)
        want = 1e-4 + 0.5 * (1 + math.cos(math.pi * 20 / 40)) * 9e-4
        assert got == pytest.approx(want, rel=1e-6), (
            f"with --lr-decay-iters {unset} the cosine should end at --max-iters (50): "
            f"get_lr(30) should be {want:.6g}, got {got:.6g}")
    args = lr_args(lr_decay_iters=60, max_iters=1000)
    assert T.get_lr(60, args) == pytest.approx(1e-4), (
        f"with --lr-decay-iters 60 the rate should reach --min-lr at step 60, got "
        f"{T.get_lr(60, args):.6g}")


def test_no_warmup_starts_at_the_peak():
    args = lr_args(warmup_iters=0)
    got = T.get_lr(0, args)
    assert got == pytest.approx(1e-3), f"without warmup get_lr(0) should be --lr 1e-3, got {got:.6g}"


# --------------------------------------------------------------------------- 5.3 sample_next


def frequencies(logits: torch.Tensor, n: int = 6000, **kw) -> torch.Tensor:
    """How often each token is drawn from the one row of ``logits``."""
    got = sample_next(logits.expand(n, -1).clone(), generator=torch.Generator().manual_seed(0), **kw)
    assert tuple(got.shape) == (n, 1), f"sample_next of ({n}, V) logits should be ({n}, 1), got {tuple(got.shape)}"
    return torch.bincount(got.flatten(), minlength=logits.size(-1)).double() / n


def test_top_k_none_samples_from_every_token():
    logits = torch.zeros(200, 5)
    for kwargs in ({}, {"top_k": None}):
        try:
            got = sample_next(logits, generator=torch.Generator().manual_seed(0), **kwargs)
        except Exception as e:  # noqa: BLE001
            pytest.fail(f"sample_next(logits{', top_k=None' if kwargs else ''}) should sample "
                        f"from every token (top_k=None: no top-k), got {type(e).__name__}: {e}")
        assert tuple(got.shape) == (200, 1), (
            f"sample_next of (200, 5) logits should be (200, 1) ids, got {tuple(got.shape)}")
        seen = sorted(set(got.flatten().tolist()))
        assert seen == [0, 1, 2, 3, 4], (
            f"with top_k=None and 5 equal logits every token should be drawn in 200 draws, "
            f"got only {seen}")


@pytest.mark.parametrize("temperature", [0.5, 2.0])
def test_temperature_divides_the_logits_before_the_softmax(temperature):
    logits = torch.tensor([[0.0, 1.0, 2.0]])
    want = F.softmax(logits[0] / temperature, dim=-1)
    got = frequencies(logits, temperature=temperature)
    assert (got - 1 / 3).abs().max() > 0.03, (
        f"every token of logits [0, 1, 2] came about as often, {[round(p, 2) for p in got.tolist()]}, "
        f"at temperature {temperature}: is the softmax taken over the vocabulary (the last "
        "dimension of the (B, V) logits)?")
    assert (got - want).abs().max() < 0.03, (
        f"at temperature {temperature} the tokens of logits [0, 1, 2] should come "
        f"{[round(p, 2) for p in want.tolist()]} of the time (softmax(logits / temperature)), "
        f"came {[round(p, 2) for p in got.tolist()]}; the temperature divides the logits, "
        "before the softmax")


def test_top_k_keeps_exactly_the_k_likeliest():
    logits = torch.tensor([[0.0, 3.0, 1.0, 2.5, -1.0]])
    got = frequencies(logits, temperature=1.0, top_k=2)
    kept = F.softmax(torch.tensor([3.0, 2.5]), dim=-1)
    want = torch.tensor([0.0, kept[0], 0.0, kept[1], 0.0], dtype=torch.float64)
    drawn = [i for i in range(5) if got[i] > 0]
    assert drawn == [1, 3], (
        f"with top_k=2 only the two likeliest tokens (1 and 3) may be drawn, got {drawn} "
        "(keep the top_k largest logits, set every other one to -inf)")
    assert (got - want).abs().max() < 0.03, (
        f"with top_k=2 tokens 1 and 3 should come {[round(p, 2) for p in kept.tolist()]} of the "
        f"time (the softmax of the two kept logits), came {[round(got[1].item(), 2), round(got[3].item(), 2)]}")
    for k in (1, 5, 50):
        try:
            picks = frequencies(logits, n=200, temperature=1.0, top_k=k)
        except Exception as e:  # noqa: BLE001
            pytest.fail(f"top_k={k} with 5 tokens should work, got {type(e).__name__}: {e}")
        if k == 1:
            assert picks[1] == 1.0, "top_k=1 should always draw the likeliest token"


def test_temperature_zero_is_greedy():
    logits = torch.tensor([[0.0, 3.0, 1.0], [5.0, -1.0, 4.9], [0.0, 0.0, 0.1]])
    try:
        got = sample_next(logits, temperature=0)
    except Exception as e:  # noqa: BLE001
        pytest.fail(f"temperature 0 should pick the likeliest token (argmax), got "
                    f"{type(e).__name__}: {e}")
    assert got.tolist() == [[1], [0], [2]], (
        f"temperature 0 should pick each row's likeliest token [[1], [0], [2]], got {got.tolist()}")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_a_tiny_temperature_is_greedy_and_never_overflows(dtype):
    """logits / temperature overflows for a tiny temperature: a number too big for its float
    becomes inf, inf - inf is nan, and torch.multinomial refuses nan. Shifting the logits so
    that the largest is 0, and capping 1 / temperature at the largest float, does not. (A
    forward pass in 16-bit floats, torch.autocast, hands sample_next 16-bit logits; float16's
    largest is 65504.)"""
    logits = torch.tensor([[0.0, 3.0, 1.0], [5.0, -1.0, 4.9], [-2.0, -2.0, -1.9]], dtype=dtype)
    kind = str(dtype).removeprefix("torch.")
    for temperature in (1e-30, 1e-40, 1e-50, 5e-324):
        at = f"at temperature {temperature:g} ({kind} logits) sampling should be greedy"
        try:
            got = sample_next(logits, temperature=temperature,
                              generator=torch.Generator().manual_seed(0))
        except RuntimeError as e:
            if "probability tensor contains" not in str(e):
                raise
            pytest.fail(f"{at}, but dividing the logits by it overflowed (a number too big for "
                        "its float becomes inf, inf - inf is nan, and torch.multinomial refuses "
                        "nan): shift the logits so that the largest is 0, and cap 1 / "
                        "temperature at torch.finfo(logits.dtype).max")
        assert got.tolist() == [[1], [0], [2]], (
            f"{at}, [[1], [0], [2]], got {got.tolist()} (did the logits overflow to inf or nan?)")


def test_each_row_is_sampled_from_its_own_distribution():
    logits = torch.tensor([[4.0, 0.0], [0.0, 4.0]]).repeat(3000, 1)
    got = sample_next(logits, generator=torch.Generator().manual_seed(1)).flatten()
    share = [(got[0::2] == 0).double().mean().item(), (got[1::2] == 1).double().mean().item()]
    want = F.softmax(torch.tensor([4.0, 0.0]), dim=-1)[0].item()
    assert all(abs(s - want) < 0.03 for s in share), (
        f"each row of (B, V) logits is its own distribution: token 0 of row [4, 0] and token 1 "
        f"of row [0, 4] should each come {want:.2f} of the time, came {[round(s, 2) for s in share]}"
        " (softmax over the last dimension, the vocabulary)")


def test_the_generator_decides_the_sample():
    logits = torch.zeros(50, 5)
    torch.manual_seed(0)
    a = sample_next(logits, generator=torch.Generator().manual_seed(3))
    torch.manual_seed(1)
    b = sample_next(logits, generator=torch.Generator().manual_seed(3))
    assert torch.equal(a, b), (
        "two generators with the same seed should give the same sample, whatever the global "
        "seed (pass generator= to torch.multinomial)")


@pytest.mark.parametrize("kwargs,name", [(dict(temperature=-1.0), "temperature"),
                                         (dict(temperature=float("nan")), "temperature"),
                                         (dict(top_k=0), "top_k")])
def test_bad_settings_are_user_errors(kwargs, name):
    given = ", ".join(f"{k}={v}" for k, v in kwargs.items())
    nan = any(v != v for v in kwargs.values())
    why = (" (nan fails every comparison, so `temperature < 0` lets it through: check `not "
           "temperature >= 0`)" if nan else "")
    try:
        sample_next(torch.zeros(2, 4), **kwargs)
    except UserError as e:
        assert name in str(e), f"the error for {given} should name {name}, got: {e}"
    except Exception as e:  # noqa: BLE001
        if nan and "probability tensor contains" in str(e):
            pytest.fail(f"sample_next({given}) should be a UserError naming {name}, but the nan "
                        f"went on into the logits and made every probability nan{why}")
        pytest.fail(f"sample_next({given}) should be a UserError naming {name}, got "
                    f"{type(e).__name__}: {e}")
    else:
        pytest.fail(f"sample_next({given}) should be a UserError naming {name}, got no error{why}")
