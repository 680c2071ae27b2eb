"""Stage 5: the GPT model itself: parameter counts, causality, its one attention path (and
the fused kernel a GPU runs instead), the traced intermediates, initialisation, and
generation with and without the KV cache."""

from __future__ import annotations

import math

import pytest
import torch
from torch.nn import functional as F

from stage5_gpt import model as model_module
from stage5_gpt.errors import UserError
from stage5_gpt.model import GPT, GPTConfig, sample_next
from stage5_gpt.report import param_breakdown


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny models run fastest on one thread, and do not fight parallel test runs."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def make(seed: int = 0, **kw) -> GPT:
    torch.manual_seed(seed)
    cfg = dict(vocab_size=11, block_size=16, n_layer=2, n_head=4, n_embd=32)
    cfg.update(kw)
    return GPT(GPTConfig(**cfg))


def unique_numel(model: torch.nn.Module) -> int:
    """Count each tensor once, even if two modules share it."""
    seen = {}
    for module in model.modules():
        for p in module.parameters(recurse=False):
            seen[id(p)] = p
    return sum(p.numel() for p in seen.values())


# --------------------------------------------------------------------------- parameters


def test_param_breakdown_worked_example():
    """The numbers quoted in the docs for V=73, T=32, C=64, 4 heads, 4 layers (GPT-2's
    layout: biases, and lm_head tied to wte, so it adds no parameter of its own)."""
    model = GPT(GPTConfig(vocab_size=73, block_size=32, n_embd=64, n_head=4, n_layer=4))
    parts = param_breakdown(model)
    assert parts == {
        "transformer.wte": 4_672,  # 73 * 64, also the output head
        "transformer.wpe": 2_048,  # 32 * 64
        "transformer.h": 4 * 49_984,
        "transformer.ln_f": 128,  # gain + bias
        "total": 206_784,
    }
    assert sum(p.numel() for p in model.parameters()) == 206_784
    # One block, counted from the module itself: 2 LayerNorms, q/k/v with their bias,
    # the attention projection, and the 4x MLP.
    for block in model.transformer.h:
        assert sum(p.numel() for p in block.parameters()) == 49_984
    assert sum(p.numel() for p in model.transformer.h[0].attn.parameters()) == (
        64 * 192 + 192 + 64 * 64 + 64)
    assert model.lm_head.bias is None and model.lm_head.weight is model.transformer.wte.weight


def test_an_untied_head_adds_its_own_v_by_c_matrix_and_never_a_bias():
    tied = GPT(GPTConfig(vocab_size=73, block_size=32, n_embd=64, n_head=4, n_layer=4))
    untied = GPT(GPTConfig(vocab_size=73, block_size=32, n_embd=64, n_head=4, n_layer=4,
                           tie_weights=False))
    assert untied.lm_head.weight is not untied.transformer.wte.weight
    parts = param_breakdown(untied)
    assert parts["lm_head"] == 73 * 64  # the matrix only: GPT-2's head has no bias
    assert parts["total"] == param_breakdown(tied)["total"] + 73 * 64 == unique_numel(untied)
    assert unique_numel(tied) == param_breakdown(tied)["total"]


def expected_parts(V: int, T: int, C: int, L: int, bias: bool, tie: bool) -> dict[str, int]:
    b = int(bias)
    ln = C + b * C  # LayerNorm gain (+ bias)
    attn = 3 * C * C + b * 3 * C + C * C + b * C  # q, k, v, then the output projection
    mlp = C * 4 * C + b * 4 * C + 4 * C * C + b * C
    parts = {
        "transformer.wte": V * C,
        "transformer.wpe": T * C,
        "transformer.h": L * (2 * ln + attn + mlp),
        "transformer.ln_f": ln,
        "lm_head": 0 if tie else V * C,  # never a bias
    }
    if parts["lm_head"] == 0:  # tied: lm_head has no parameter of its own
        del parts["lm_head"]
    parts["total"] = sum(parts.values())
    return parts


@pytest.mark.parametrize(
    "V,T,C,H,L,bias,tie",
    [
        (5, 4, 8, 2, 1, True, False),
        (31, 10, 48, 6, 3, True, True),
        (73, 32, 64, 4, 4, False, False),
        (17, 8, 24, 3, 2, False, True),
    ],
)
def test_param_breakdown_formula(V, T, C, H, L, bias, tie):
    model = GPT(GPTConfig(vocab_size=V, block_size=T, n_embd=C, n_head=H, n_layer=L,
                          bias=bias, tie_weights=tie))
    assert param_breakdown(model) == expected_parts(V, T, C, L, bias, tie)
    assert param_breakdown(model)["total"] == unique_numel(model)
    if not bias:
        assert all(not n.endswith(".bias") for n, _ in model.named_parameters())


# --------------------------------------------------------------------------- causality


@pytest.mark.parametrize("path", ["plain", "traced"])
def test_causal_prefix_logits_do_not_see_the_future(path):
    model = make(seed=1).eval()
    g = torch.Generator().manual_seed(1)
    T = 12
    idx = torch.randint(11, (2, T), generator=g)

    def logits_of(x):
        with torch.no_grad():
            return model(x, trace=[] if path == "traced" else None)[0]

    base = logits_of(idx)
    for t in (0, 4, T - 2):
        other = idx.clone()
        other[:, t + 1 :] = (idx[:, t + 1 :] + 1 + torch.randint(9, (2, T - t - 1), generator=g)) % 11
        assert not torch.equal(other[:, t + 1 :], idx[:, t + 1 :])
        changed = logits_of(other)
        torch.testing.assert_close(changed[:, : t + 1], base[:, : t + 1], atol=1e-6, rtol=0)
        # The positions that did see the change must differ (else the test is vacuous).
        assert not torch.allclose(changed[:, t + 1 :], base[:, t + 1 :], atol=1e-4)


# --------------------------------------------------------------------------- one path
#
# CausalSelfAttention computes its math in one place, and a trace records those very
# tensors. On a GPU (FLASH_DEVICES) the same math runs as PyTorch's fused kernel; the
# tests put the CPU in FLASH_DEVICES to check that the two compute the same.


def grads(model: torch.nn.Module) -> list[torch.Tensor]:
    out = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    return out


def test_training_on_a_cpu_runs_the_written_math_not_the_fused_kernel(monkeypatch):
    calls = []
    monkeypatch.setattr(model_module.F, "scaled_dot_product_attention",
                        lambda *a, **k: calls.append(1))
    model = make(seed=2, dropout=0.1).train()
    idx = torch.randint(11, (2, 9), generator=torch.Generator().manual_seed(2))
    model(idx, idx)[1].backward()
    assert calls == [] and model_module.FLASH_DEVICES == ("cuda",)


def test_a_trace_records_the_tensors_the_forward_pass_computes():
    """With or without a trace, the same lines run: the logits are equal to the bit."""
    model = make(seed=2, dropout=0.0).eval()
    idx = torch.randint(11, (3, 16), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        plain = model(idx)[0]
        trace: list[dict] = []
        traced = model(idx, trace=trace)[0]
    assert torch.equal(plain, traced) and len(trace) == 2


@pytest.mark.parametrize("dropout", [0.0, 0.3])
def test_the_flash_kernel_computes_the_written_math_forward_and_backward(dropout, monkeypatch):
    """Where it runs (FLASH_DEVICES), F.scaled_dot_product_attention is the same attention:
    eval mode (dropout off whatever its rate), and training without dropout, gradients too."""
    model = make(seed=5, dropout=dropout)
    idx = torch.randint(11, (3, 13), generator=torch.Generator().manual_seed(5))
    results = {}
    for devices in ((), ("cpu",)):
        monkeypatch.setattr(model_module, "FLASH_DEVICES", devices)
        model.eval()
        with torch.no_grad():
            evaluated = model(idx, idx)
        model.train()
        if dropout == 0:
            logits, loss = model(idx, idx)
            loss.backward()
            results[devices] = evaluated, logits, grads(model)
        else:
            results[devices] = evaluated, None, None
    (e1, l1, g1), (e2, l2, g2) = results.values()
    torch.testing.assert_close(e1[0], e2[0], atol=1e-5, rtol=0)
    torch.testing.assert_close(e1[1], e2[1], atol=1e-5, rtol=0)
    if dropout == 0:
        torch.testing.assert_close(l1, l2, atol=1e-5, rtol=0)
        for a, b in zip(g1, g2, strict=True):
            assert a.abs().sum() > 0
            torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("past", [1, 5, 11])
def test_the_cached_path_equals_the_whole_sequence_forward_and_backward(past):
    """One attention layer fed a prompt of ``past`` tokens, then the rest with the KV cache
    (fewer queries than keys): the attention of the whole sequence, and its gradients."""
    model = make(seed=24)
    attn = model.transformer.h[0].attn
    x = torch.randn(2, 12, 32, generator=torch.Generator().manual_seed(24), requires_grad=True)
    cache: dict = {}
    first = attn(x[:, :past], cache=cache)
    assert cache["k"].shape == (2, 4, past, 8)
    rest = attn(x[:, past:], cache=cache)  # 12 - past queries, 12 keys
    assert cache["k"].shape == (2, 4, 12, 8)
    cached = torch.cat([first, rest], dim=1)
    whole = attn(x)
    torch.testing.assert_close(cached, whole, atol=1e-5, rtol=0)
    r = torch.randn(2, 12, 32, generator=torch.Generator().manual_seed(0))
    (gx_cached,) = torch.autograd.grad((cached * r).sum(), x)
    (gx_whole,) = torch.autograd.grad((whole * r).sum(), x)
    torch.testing.assert_close(gx_cached, gx_whole, atol=1e-5, rtol=1e-4)


def test_attention_dropout_drops_p_of_the_weights_and_keeps_the_expectation():
    """Dropout acts on the softmax weights (a trace records them before it): a fraction p of
    the links is cut, the rest scaled by 1 / (1 - p), nothing above the diagonal."""
    p, T = 0.3, 16
    model = make(seed=7, dropout=p, block_size=T)
    attn = model.transformer.h[0].attn.train()
    x = torch.randn(64, T, 32, generator=torch.Generator().manual_seed(7))
    seen = {}

    def keep(module, args, out):
        seen["dropped"] = out
    attn.attn_dropout.register_forward_hook(keep)
    trace: dict = {}
    torch.manual_seed(0)
    attn(x, trace=trace)
    weights, dropped = trace["weights"], seen["dropped"]
    above = torch.ones(T, T, dtype=torch.bool).triu(1)
    assert torch.equal(weights[..., above], torch.zeros_like(weights[..., above]))
    torch.testing.assert_close(weights.sum(-1), torch.ones(weights.shape[:-1]))
    zeros = (dropped[..., ~above] == 0).float().mean().item()
    assert abs(zeros - p) < 0.015, zeros
    kept = dropped != 0
    torch.testing.assert_close(dropped[kept], weights[kept] / (1 - p), atol=1e-6, rtol=1e-5)
    assert trace["heads_out"].shape == (64, 4, T, 8)


def test_the_fused_kernels_dropout_has_the_statistics_of_the_written_math(monkeypatch):
    """With attention dropout on, the flash kernel is still the math in expectation: the mean
    over many draws is the dropout-free output, and one draw scatters as much."""
    model = make(seed=25, dropout=0.3)
    attn = model.transformer.h[0].attn
    attn.resid_dropout.p = 0.0  # only the attention weights are dropped
    with torch.no_grad():
        for w in attn.parameters():
            w.normal_(0.0, 0.3)
    x = torch.randn(4, 12, 32, generator=torch.Generator().manual_seed(25))
    with torch.no_grad():
        reference = attn.eval()(x)
        attn.train()
        torch.manual_seed(1)
        written = torch.stack([attn(x) for _ in range(200)])
        monkeypatch.setattr(model_module, "FLASH_DEVICES", ("cpu",))
        torch.manual_seed(2)
        fused = torch.stack([attn(x) for _ in range(200)])
    for draws in (written, fused):
        error = (draws.mean(0) - reference).abs().mean() / reference.abs().mean()
        assert error < 0.1, error.item()
    assert written.std(0).mean() > 0.2 * reference.abs().mean()  # dropout did act
    assert fused.std(0).mean() == pytest.approx(written.std(0).mean().item(), rel=0.1)


def test_dropout_is_active_in_train_mode_and_off_in_eval():
    model = make(seed=4, dropout=0.5)
    names = [n for n, m in model.named_modules() if type(m) is torch.nn.Dropout]
    # The embeddings' dropout, and per block: attention weights, attention output, MLP.
    assert len(names) == 1 + 2 * 3
    idx = torch.randint(11, (2, 8), generator=torch.Generator().manual_seed(4))
    model.train()
    a, b = model(idx)[0], model(idx)[0]
    assert not torch.allclose(a, b)
    model.eval()
    torch.testing.assert_close(model(idx)[0], model(idx)[0], atol=0, rtol=0)


# --------------------------------------------------------------------------- traced path


def test_trace_intermediates_are_consistent():
    B, T, C, nh, L = 2, 7, 32, 4, 3
    hs = C // nh
    model = make(seed=5, n_layer=L, n_head=nh, n_embd=C).eval()
    idx = torch.randint(11, (B, T), generator=torch.Generator().manual_seed(5))
    trace: list[dict] = []
    with torch.no_grad():
        logits, _ = model(idx, trace=trace)
    assert len(trace) == L
    above = torch.ones(T, T, dtype=torch.bool).triu(1)
    x = model.transformer.wte(idx) + model.transformer.wpe(torch.arange(T))
    with torch.no_grad():
        for layer, (block, tr) in enumerate(zip(model.transformer.h, trace, strict=True)):
            for name in ("q", "k", "v", "heads_out"):
                assert tr[name].shape == (B, nh, T, hs), name
            for name in ("scores", "scaled", "masked", "weights"):
                assert tr[name].shape == (B, nh, T, T), name
            assert tr["resid"].shape == (B, T, C)

            # q, k, v really are this layer's projections of its input.
            q, k, v = block.attn.c_attn(block.ln_1(x)).split(C, dim=2)
            torch.testing.assert_close(tr["q"], q.view(B, T, nh, hs).transpose(1, 2))
            torch.testing.assert_close(tr["k"], k.view(B, T, nh, hs).transpose(1, 2))
            torch.testing.assert_close(tr["v"], v.view(B, T, nh, hs).transpose(1, 2))

            torch.testing.assert_close(tr["scores"], tr["q"] @ tr["k"].transpose(-2, -1))
            torch.testing.assert_close(tr["scaled"], tr["scores"] / math.sqrt(hs))
            masked = tr["masked"]
            assert torch.isneginf(masked[..., above]).all(), f"layer {layer}: not -inf above"
            assert torch.isfinite(masked[..., ~above]).all()
            assert torch.equal(masked[..., ~above], tr["scaled"][..., ~above])
            w = tr["weights"]
            torch.testing.assert_close(w, F.softmax(masked, dim=-1))
            assert torch.equal(w[..., above], torch.zeros_like(w[..., above]))
            torch.testing.assert_close(w.sum(-1), torch.ones(B, nh, T))
            assert (w >= 0).all()
            torch.testing.assert_close(tr["heads_out"], w @ tr["v"])

            # The residual stream after the block, rebuilt from the traced heads.
            merged = tr["heads_out"].transpose(1, 2).reshape(B, T, C)
            x = x + block.attn.c_proj(merged)
            x = x + block.mlp(block.ln_2(x))
            torch.testing.assert_close(tr["resid"], x, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(
            logits, model.lm_head(model.transformer.ln_f(trace[-1]["resid"])))
    # The first token can only look at itself.
    assert torch.equal(trace[0]["weights"][..., 0, 0], torch.ones(B, nh))


def test_attention_maps_shape_and_content():
    model = make(seed=6, n_layer=3, n_head=2, n_embd=16).eval()
    idx = torch.randint(11, (2, 5), generator=torch.Generator().manual_seed(6))
    maps = model.attention_maps(idx)
    assert maps.shape == (2, 3, 2, 5, 5)  # (B, n_layer, n_head, T, T)
    trace: list[dict] = []
    with torch.no_grad():
        model(idx, trace=trace)
    for layer in range(3):
        torch.testing.assert_close(maps[:, layer], trace[layer]["weights"])
    assert not maps.requires_grad


# --------------------------------------------------------------------------- init


def test_initialisation_follows_gpt2():
    L = 4
    model = GPT(GPTConfig(vocab_size=73, block_size=32, n_embd=64, n_head=4, n_layer=L))
    std_proj = 0.02 / math.sqrt(2 * L)
    seen = set()
    for name, p in model.named_parameters():
        p = p.detach()
        if name.startswith("transformer.ln_") or ".ln_" in name:
            expected = torch.ones_like(p) if name.endswith("weight") else torch.zeros_like(p)
            assert torch.equal(p, expected), name
            seen.add("norm")
        elif name.endswith(".bias"):
            assert torch.equal(p, torch.zeros_like(p)), name
            seen.add("bias")
        elif name.endswith("c_proj.weight"):
            assert p.std().item() == pytest.approx(std_proj, rel=0.15), name
            assert abs(p.mean().item()) < 0.1 * std_proj, name
            seen.add("c_proj")
        else:
            assert p.dim() == 2, name
            assert p.std().item() == pytest.approx(0.02, rel=0.15), name
            assert abs(p.mean().item()) < 0.002, name
            seen.add("weight")
    assert seen == {"norm", "bias", "c_proj", "weight"}


def test_initial_loss_is_near_uniform():
    V = 73
    torch.manual_seed(7)
    model = GPT(GPTConfig(vocab_size=V, block_size=32, n_embd=64, n_head=4, n_layer=4))
    g = torch.Generator().manual_seed(7)
    x, y = torch.randint(V, (8, 32), generator=g), torch.randint(V, (8, 32), generator=g)
    with torch.no_grad():
        _, loss = model(x, y)
    assert abs(loss.item() - math.log(V)) < 0.15


def test_overfits_one_batch():
    model = make(seed=8, vocab_size=20, n_layer=2, n_embd=32, n_head=4)
    g = torch.Generator().manual_seed(8)
    x, y = torch.randint(20, (4, 16), generator=g), torch.randint(20, (4, 16), generator=g)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    first = None
    for _ in range(40):
        _, loss = model(x, y)
        first = first if first is not None else loss.item()
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert first > 2.5
    assert loss.item() < 0.1


# --------------------------------------------------------------------------- generation


def test_greedy_generation_is_deterministic_and_equals_argmax_by_hand():
    model = make(seed=9, block_size=8).eval()
    prompt = torch.tensor([[1, 2, 3], [4, 4, 0]])
    out1 = model.generate(prompt, 12, temperature=0, use_cache=False)  # slides past block_size
    out2 = model.generate(prompt, 12, temperature=0, use_cache=False)
    assert torch.equal(out1, out2)
    assert out1.shape == (2, 3 + 12)
    assert torch.equal(out1[:, :3], prompt)

    idx = prompt
    with torch.no_grad():
        for _ in range(12):
            logits, _ = model(idx[:, -8:])
            idx = torch.cat([idx, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    assert torch.equal(out1, idx)

    # top_k=1 leaves one candidate: sampling at any temperature is greedy.
    g = torch.Generator().manual_seed(0)
    assert torch.equal(model.generate(prompt, 12, temperature=1.5, top_k=1, generator=g,
                                      use_cache=False), out1)


# --------------------------------------------------------------------------- KV cache


def sharp(seed: int, **kw) -> GPT:
    """A model with large random weights: its greedy choices depend on the whole context."""
    model = make(seed=seed, **kw).eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2:  # matrices; biases and LayerNorm gains keep their init
                p.normal_(0.0, 0.5)
    return model


@pytest.mark.parametrize("prompt_len", [1, 5, 10])
def test_kv_cache_greedy_output_equals_the_no_cache_path(prompt_len):
    model = sharp(20, block_size=16)
    prompt = torch.randint(11, (3, prompt_len), generator=torch.Generator().manual_seed(1))
    new = 16 - prompt_len + 1  # up to the first token predicted from a full block_size window
    cached = model.generate(prompt, new, temperature=0, use_cache=True)
    plain = model.generate(prompt, new, temperature=0, use_cache=False)
    assert torch.equal(cached, plain)
    assert len(set(cached[:, prompt_len:].flatten().tolist())) > 2, "a degenerate test"


def test_kv_cache_logits_equal_a_full_forward_at_every_step():
    model = sharp(21, block_size=16)
    idx = torch.randint(11, (2, 12), generator=torch.Generator().manual_seed(2))
    full, _ = model(idx)  # (2, 12, V)
    cache = [{} for _ in model.transformer.h]
    first, _ = model(idx[:, :4], cache=cache)  # a prompt of 4, then one token at a time
    steps = [first] + [model(idx[:, t : t + 1], cache=cache)[0] for t in range(4, 12)]
    assert torch.allclose(torch.cat(steps, dim=1), full, atol=1e-5)
    assert cache[0]["k"].shape == (2, 4, 12, 8)  # (B, n_head, tokens so far, head_size)


def test_kv_cache_refills_from_the_last_half_window_with_correct_positions():
    """Past block_size a full cache restarts from the last block_size // 2 tokens (learned
    positions cannot slide): every token must be the argmax of a plain forward pass over
    exactly the context the cache holds, with positions counted from 0 again."""
    T = 8
    model = sharp(22, block_size=T)
    prompt = torch.randint(11, (1, 3), generator=torch.Generator().manual_seed(3))
    out = model.generate(prompt, 20, temperature=0, use_cache=True)
    start = 0  # where the cached context begins
    with torch.no_grad():
        for t in range(3, 23):  # predict out[:, t] from out[:, start:t]
            if t - start > T:
                start = t - T // 2
            logits, _ = model(out[:, start:t])
            assert out[0, t] == logits[0, -1].argmax(), f"token {t}"
    assert start > 0, "the test never refilled the cache"


def test_a_cache_cannot_grow_past_block_size():
    model = make(block_size=8).eval()
    cache = [{} for _ in model.transformer.h]
    model(torch.zeros(1, 6, dtype=torch.long), cache=cache)
    with pytest.raises(UserError, match="block_size=8"):
        model(torch.zeros(1, 3, dtype=torch.long), cache=cache)


def test_seeded_sampling_is_the_same_with_and_without_the_cache():
    model = sharp(23, block_size=16)
    prompt = torch.tensor([[1, 2]])
    a = model.generate(prompt, 14, generator=torch.Generator().manual_seed(5), use_cache=True)
    b = model.generate(prompt, 14, generator=torch.Generator().manual_seed(5), use_cache=False)
    assert torch.equal(a, b)


def test_sampling_with_a_seeded_generator_is_reproducible():
    model = make(seed=10).eval()
    prompt = torch.tensor([[0]])
    a = model.generate(prompt, 30, generator=torch.Generator().manual_seed(3))
    b = model.generate(prompt, 30, generator=torch.Generator().manual_seed(3))
    c = model.generate(prompt, 30, generator=torch.Generator().manual_seed(4))
    assert torch.equal(a, b)
    assert not torch.equal(a, c)


def test_stream_yields_one_token_per_step():
    model = make(seed=11).eval()
    prompt = torch.tensor([[3, 1], [2, 2]])
    pieces = list(model.stream(prompt, 7, temperature=0))
    assert len(pieces) == 7
    assert all(p.shape == (2, 1) and p.dtype == torch.long for p in pieces)
    assert torch.equal(torch.cat([prompt, *pieces], dim=1), model.generate(prompt, 7, temperature=0))
    assert list(model.stream(prompt, 0)) == []


def test_forward_longer_than_block_size_is_a_user_error():
    model = make(block_size=8)
    model(torch.zeros(1, 8, dtype=torch.long))  # exactly block_size is fine
    with pytest.raises(UserError, match="block_size=8"):
        model(torch.zeros(1, 9, dtype=torch.long))


@pytest.mark.parametrize("use_cache", [True, False])
def test_generate_crops_a_long_prompt_to_block_size(use_cache):
    model = make(seed=12, block_size=8).eval()
    long = torch.randint(11, (1, 20), generator=torch.Generator().manual_seed(12))
    out = model.generate(long, 5, temperature=0, use_cache=use_cache)
    assert out.shape == (1, 25)
    assert torch.equal(out[:, :20], long)
    # Only the last block_size tokens matter.
    short = model.generate(long[:, -8:], 5, temperature=0, use_cache=use_cache)
    assert torch.equal(out[:, 20:], short[:, 8:])


def test_kv_cache_and_no_cache_crop_a_long_prompt_alike():
    """A prompt longer than block_size: both paths read its last block_size tokens, so the
    first new token is the same (after it the full cache restarts from half a window, see
    test_kv_cache_refills_from_the_last_half_window_with_correct_positions)."""
    model = sharp(26, block_size=8)
    long = torch.randint(11, (4, 20), generator=torch.Generator().manual_seed(26))
    cached = model.generate(long, 1, temperature=0, use_cache=True)
    plain = model.generate(long, 1, temperature=0, use_cache=False)
    assert torch.equal(cached, plain)
    with torch.no_grad():
        assert torch.equal(cached[:, -1], model(long[:, -8:])[0][:, -1].argmax(-1))
        assert not torch.equal(cached[:, -1], model(long[:, :8])[0][:, -1].argmax(-1))


def test_sample_next_top_k_keeps_only_the_k_best():
    logits = torch.tensor([[0.0, 3.0, 1.0, 2.9, -1.0]]).repeat(400, 1)
    got = sample_next(logits, temperature=2.0, top_k=2, generator=torch.Generator().manual_seed(0))
    assert got.shape == (400, 1)
    assert set(got.flatten().tolist()) == {1, 3}
    assert torch.equal(sample_next(logits[:2], temperature=0), torch.tensor([[1], [1]]))


@pytest.mark.parametrize("kwargs,match", [
    (dict(temperature=-0.5), "temperature"),
    (dict(top_k=0), "top_k"),
])
def test_sample_next_rejects_bad_settings(kwargs, match):
    with pytest.raises(UserError, match=match):
        sample_next(torch.zeros(1, 4), **kwargs)


# --------------------------------------------------------------------------- config


def test_config_n_embd_not_divisible_by_n_head():
    with pytest.raises(UserError) as e:
        GPTConfig(vocab_size=10, n_embd=30, n_head=4)
    assert "n_embd=30" in str(e.value) and "n_head=4" in str(e.value)


@pytest.mark.parametrize("dropout", [-0.1, 1.0, 1.5, float("nan")])
def test_config_dropout_out_of_range(dropout):
    with pytest.raises(UserError, match="dropout"):
        GPTConfig(vocab_size=10, dropout=dropout)


def test_config_bad_activation():
    with pytest.raises(UserError, match="tanh"):
        GPTConfig(vocab_size=10, activation="tanh")


@pytest.mark.parametrize("field", ["vocab_size", "block_size", "n_layer", "n_head", "n_embd"])
def test_config_sizes_must_be_positive(field):
    with pytest.raises(UserError, match=field):
        GPTConfig(**{"vocab_size": 10, field: 0})


def test_relu_and_gelu_models_differ():
    idx = torch.randint(11, (1, 6), generator=torch.Generator().manual_seed(13))
    gelu = make(seed=13, activation="gelu").eval()
    relu = make(seed=13, activation="relu").eval()
    relu.load_state_dict(gelu.state_dict())
    assert isinstance(relu.transformer.h[0].mlp.act, torch.nn.ReLU)
    assert isinstance(gelu.transformer.h[0].mlp.act, torch.nn.GELU)
    with torch.no_grad():
        assert not torch.allclose(gelu(idx)[0], relu(idx)[0])
