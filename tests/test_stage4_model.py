"""Stage 4: multi-head attention in two forms, the MLP, residuals, LayerNorm, blocks, and
the variants of the block (variants.py).

What the stage teaches, checked as behaviour:

- a list of heads (variants.MultiHeadAttention) and one batched matmul (model.py's
  CausalSelfAttention) are the same computation once copy_heads_into_batched has copied
  the weights: the same output, attention and gradients, for a head and for a whole model;
- blocks keep the shape, stay causal, and a pre-LN block with silent branches is the identity;
- the parameter count follows the formula 12 C^2 + 10 C per block (harness.param_breakdown);
- LayerNorm gives zero mean and unit variance; dropout only acts while training, on the
  attention weights as well as on each branch's output;
- the model trains, and bad configurations are a ``UserError`` that says what is wrong;
- build_model gives the taught LanguageModel when no switch is set and a VariantModel
  otherwise, and each switch (--norm post/none, --no-residual, --no-mlp, --attention heads)
  changes exactly its part of the wiring.
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from torch.nn import functional as F

from stage4_block.errors import UserError
from stage4_block.model import (
    ACTIVATIONS,
    MLP,
    Block,
    CausalSelfAttention,
    LanguageModel,
    ModelConfig,
)
from stage4_block.report import param_breakdown
from stage4_block.variants import (
    ATTENTIONS,
    NORMS,
    Head,
    MultiHeadAttention,
    VariantBlock,
    VariantConfig,
    VariantModel,
    build_model,
    copy_heads_into_batched,
)


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny models run fastest on one thread, and do not fight parallel test runs."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def randomize(module: torch.nn.Module, std: float = 0.3, seed: int = 0) -> torch.nn.Module:
    """Every parameter (LayerNorm included) to random values, so no symmetry hides a bug."""
    torch.manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.normal_(0.0, std)
    return module


BASE = {"vocab_size": 11, "block_size": 8, "n_embd": 16, "n_head": 4, "n_layer": 2}


def config(**kw) -> VariantConfig:
    return VariantConfig(**{**BASE, **kw})


def plain_config(**kw) -> ModelConfig:
    return ModelConfig(**{**BASE, **kw})


COMBOS = list(itertools.product(NORMS, ATTENTIONS, ACTIVATIONS))
# Each switch of train.py alone, and the ablations of the stage-4 page together.
SWITCHES = [{"norm": "post"}, {"norm": "none"}, {"residual": False}, {"mlp": False},
            {"attention": "heads"}]
ABLATIONS = [{"norm": "none"}, {"residual": False}, {"mlp": False},
             {"residual": False, "norm": "post"}, {"mlp": False, "norm": "post"},
             {"norm": "none", "residual": False, "mlp": False}]


def make_block(**kw) -> torch.nn.Module:
    """The block build_model would build for this configuration."""
    return build_model(config(**kw)).transformer.h[0]


# --- the two multi-head forms -------------------------------------------------------------


def test_copy_heads_into_batched_gives_the_same_outputs_and_attention():
    cfg, T, nh = config(), 7, 4
    mha = randomize(MultiHeadAttention(cfg), seed=1)
    csa = randomize(CausalSelfAttention(cfg), seed=2)
    x = torch.randn(3, T, 16)
    assert not torch.allclose(mha(x), csa(x), atol=1e-3)  # different weights, different output
    copy_heads_into_batched(mha, csa)
    out_m, out_c = mha(x), csa(x)
    assert out_m.shape == out_c.shape == (3, T, 16)
    assert torch.allclose(out_m, out_c, atol=1e-6)
    assert mha.last_attention.shape == csa.last_attention.shape == (3, nh, T, T)
    assert torch.allclose(mha.last_attention, csa.last_attention, atol=1e-6)


def test_batched_weights_split_by_hand_into_separate_heads():
    """The inverse copy, written out in the test: c_attn rows are [q | k | v], head after head."""
    cfg = config(n_embd=12, n_head=3, block_size=6)
    C, nh = 12, 3
    hs = C // nh
    csa = randomize(CausalSelfAttention(cfg), seed=3)
    mha = MultiHeadAttention(cfg)
    W = csa.c_attn.weight  # (3C, C)
    with torch.no_grad():
        for h, head in enumerate(mha.heads):
            rows = slice(h * hs, (h + 1) * hs)
            head.query.weight.copy_(W[0:C][rows])
            head.key.weight.copy_(W[C : 2 * C][rows])
            head.value.weight.copy_(W[2 * C : 3 * C][rows])
        mha.c_proj.weight.copy_(csa.c_proj.weight)
        mha.c_proj.bias.copy_(csa.c_proj.bias)
    x = torch.randn(2, 6, C)
    assert torch.allclose(mha(x), csa(x), atol=1e-6)
    assert torch.allclose(mha.last_attention, csa.last_attention, atol=1e-6)
    # The heads really are different: swapping two of them changes the result.
    with torch.no_grad():
        q0 = mha.heads[0].query.weight.clone()
        mha.heads[0].query.weight.copy_(mha.heads[1].query.weight)
        mha.heads[1].query.weight.copy_(q0)
    assert not torch.allclose(mha(x), csa(x), atol=1e-3)


def test_one_head_is_scaled_dot_product_attention():
    head = randomize(Head(16, 4, block_size=8), seed=19)
    x = torch.randn(2, 6, 16)
    expected = F.scaled_dot_product_attention(head.query(x), head.key(x), head.value(x),
                                              is_causal=True)
    assert torch.allclose(head(x), expected, atol=1e-6)
    assert head.last_attention.shape == (2, 6, 6)


def test_each_head_of_the_batched_form_is_scaled_dot_product_attention():
    cfg, C, nh, T = config(), 16, 4, 6
    hs = C // nh
    csa = randomize(CausalSelfAttention(cfg), seed=4)
    x = torch.randn(2, T, C)
    q, k, v = csa.c_attn(x).split(C, dim=2)
    split = [t.view(2, T, nh, hs).transpose(1, 2) for t in (q, k, v)]
    y = F.scaled_dot_product_attention(*split, is_causal=True)  # (B, nh, T, hs)
    expected = csa.c_proj(y.transpose(1, 2).reshape(2, T, C))
    assert torch.allclose(csa(x), expected, atol=1e-6)


def test_heads_model_equals_the_batched_model_forward_and_backward():
    """A whole --attention heads model, copied into the taught model: the same logits,
    loss and gradients (c_attn's gradient is the heads' q, k, v gradients stacked)."""
    heads = randomize(build_model(config(attention="heads")), seed=20)
    plain = build_model(config())
    assert type(heads) is VariantModel and type(plain) is LanguageModel
    missing, unexpected = plain.load_state_dict(heads.state_dict(), strict=False)
    assert sorted(missing) == [f"transformer.h.{i}.attn.c_attn.weight" for i in range(2)]
    assert all(".attn.heads." in k for k in unexpected) and unexpected
    for mha_block, csa_block in zip(heads.transformer.h, plain.transformer.h, strict=True):
        copy_heads_into_batched(mha_block.attn, csa_block.attn)
    idx = torch.randint(11, (3, 8), generator=torch.Generator().manual_seed(20))
    targets = torch.roll(idx, -1, dims=1)
    la, loss_a = heads(idx, targets)
    lb, loss_b = plain(idx, targets)
    assert torch.allclose(la, lb, atol=1e-5)
    assert torch.allclose(loss_a, loss_b, atol=1e-6)
    assert torch.allclose(heads.attention_maps(idx), plain.attention_maps(idx), atol=1e-6)
    loss_a.backward()
    loss_b.backward()
    params_a = dict(heads.named_parameters())
    for name, p in plain.named_parameters():
        if name.endswith("attn.c_attn.weight"):  # rows: q of head 0..3, k of 0..3, v of 0..3
            prefix = name.removesuffix("c_attn.weight")
            expected = torch.cat([params_a[f"{prefix}heads.{h}.{w}.weight"].grad
                                  for w in ("query", "key", "value") for h in range(4)])
        else:
            expected = params_a[name].grad
        assert p.grad.abs().sum() > 0, name
        assert torch.allclose(p.grad, expected, atol=1e-6), name


# --- blocks: shape, causality, identity ---------------------------------------------------


@pytest.mark.parametrize(("norm", "attention", "activation"), COMBOS)
def test_block_keeps_shape_and_is_causal(norm, attention, activation):
    block = randomize(make_block(norm=norm, attention=attention, activation=activation),
                      seed=5).eval()
    g = torch.Generator().manual_seed(5)
    prefix = torch.randn(2, 4, 16, generator=g)
    a = torch.cat([prefix, torch.randn(2, 3, 16, generator=g)], dim=1)
    b = torch.cat([prefix, torch.randn(2, 3, 16, generator=g)], dim=1)
    ya, yb = block(a), block(b)
    assert ya.shape == a.shape == (2, 7, 16)
    assert torch.allclose(ya[:, :4], yb[:, :4], atol=1e-5)
    assert not torch.allclose(ya[:, 4:], yb[:, 4:], atol=1e-3)


@pytest.mark.parametrize(("norm", "attention", "activation"), COMBOS)
def test_language_model_is_causal(norm, attention, activation):
    model = randomize(build_model(config(norm=norm, attention=attention,
                                         activation=activation)), seed=6).eval()
    g = torch.Generator().manual_seed(6)
    prefix = torch.randint(11, (2, 5), generator=g)
    a = torch.cat([prefix, torch.randint(11, (2, 3), generator=g)], dim=1)
    b = torch.cat([prefix, (a[:, 5:] + 1) % 11], dim=1)  # every later token differs
    la, lb = model(a)[0], model(b)[0]
    assert la.shape == (2, 8, 11)
    assert torch.allclose(la[:, :5], lb[:, :5], atol=1e-5)
    assert not torch.allclose(la[:, 5:], lb[:, 5:], atol=1e-3)


def _silence_branches(block: torch.nn.Module) -> None:
    """Zero the last projection of both residual branches (weights and biases)."""
    proj, out = block.attn.c_proj, block.mlp.c_proj  # both attention forms call it c_proj
    assert isinstance(out, torch.nn.Linear) and out.out_features == proj.out_features
    with torch.no_grad():
        for layer in (proj, out):
            layer.weight.zero_()
            layer.bias.zero_()


@pytest.mark.parametrize("attention", ATTENTIONS)
def test_pre_ln_block_with_silent_branches_is_the_identity(attention):
    block = randomize(make_block(norm="pre", attention=attention), seed=7)
    _silence_branches(block)
    x = torch.randn(2, 6, 16) * 3 + 1
    assert torch.equal(block(x), x)  # the residual path carries x through untouched


@pytest.mark.parametrize("attention", ATTENTIONS)
def test_post_ln_block_with_silent_branches_still_normalizes(attention):
    block = randomize(make_block(norm="post", attention=attention), seed=8)
    _silence_branches(block)
    x = torch.randn(2, 6, 16) * 3 + 1
    y = block(x)
    assert torch.allclose(y, block.ln_2(block.ln_1(x)), atol=1e-6)
    assert not torch.allclose(y, x, atol=1e-2)


@pytest.mark.parametrize("attention", ATTENTIONS)
@pytest.mark.parametrize("norm", ["pre", "post"])
def test_block_is_the_residual_formula(norm, attention):
    """pre: x + attn(ln_1 x), then + mlp(ln_2 .); post: ln_1(x + attn x), then ln_2(. + mlp .)."""
    block = randomize(make_block(norm=norm, attention=attention), seed=16)  # LN affine too
    x = torch.randn(2, 6, 16)
    if norm == "pre":
        h = x + block.attn(block.ln_1(x))
        expected = h + block.mlp(block.ln_2(h))
    else:
        h = block.ln_1(x + block.attn(x))
        expected = block.ln_2(h + block.mlp(h))
    assert torch.allclose(block(x), expected, atol=1e-6)


# --- variants: build_model and each switch -------------------------------------------------


def test_build_model_is_the_plain_model_exactly_when_no_switch_is_set():
    model = build_model(config())
    assert type(model) is LanguageModel
    assert type(model.config) is ModelConfig  # the taught model, with the taught config
    assert model.config == plain_config()
    assert [type(b) for b in model.transformer.h] == [Block, Block]
    assert all(type(b.attn) is CausalSelfAttention and type(b.mlp) is MLP
               for b in model.transformer.h)
    assert config().plain
    # The same seed builds the same weights as LanguageModel itself.
    torch.manual_seed(0)
    a = build_model(config())
    torch.manual_seed(0)
    b = LanguageModel(plain_config())
    assert a.state_dict().keys() == b.state_dict().keys()
    assert all(torch.equal(a.state_dict()[k], b.state_dict()[k]) for k in a.state_dict())
    for kw in SWITCHES + ABLATIONS:
        cfg = config(**kw)
        assert not cfg.plain, kw
        variant = build_model(cfg)
        assert type(variant) is VariantModel and variant.config == cfg, kw
        assert all(type(b) is VariantBlock for b in variant.transformer.h), kw


@pytest.mark.parametrize("kw", SWITCHES, ids=str)
def test_each_switch_changes_its_part_of_the_wiring(kw):
    block = make_block(**kw)
    assert type(block.attn) is (MultiHeadAttention if kw.get("attention") == "heads"
                                else CausalSelfAttention)
    lns = [m for m in block.modules() if isinstance(m, torch.nn.LayerNorm)]
    assert len(lns) == {"none": 0}.get(kw.get("norm"), 1 if kw.get("mlp") is False else 2)
    assert (block.mlp is None) is (kw.get("mlp") is False)
    assert block.post_norm is (kw.get("norm") == "post")
    assert block.residual is kw.get("residual", True)


@pytest.mark.parametrize("attention", ATTENTIONS)
@pytest.mark.parametrize("kw", [{}, *ABLATIONS], ids=str)
def test_ablated_block_is_its_formula(kw, attention):
    """Each variant block computes its formula; with no switch the VariantBlock is the Block."""
    cfg = config(attention=attention, **kw)
    block = randomize(VariantBlock(cfg), seed=17)
    x = torch.randn(2, 6, 16)
    attn, mlp, ln_1, ln_2 = block.attn, block.mlp, block.ln_1, block.ln_2
    if kw.get("norm") == "none":  # no LayerNorm anywhere, the pre-LN wiring
        assert not any(isinstance(m, torch.nn.LayerNorm) for m in block.modules())
        ln_1 = ln_2 = torch.nn.Identity()
    post = kw.get("norm") == "post"
    if kw.get("mlp", True):
        assert isinstance(mlp, MLP)
        branches = [(attn, ln_1), (mlp, ln_2)]
    else:
        assert mlp is None and block.ln_2 is None  # and no parameters left for them
        assert not any(".mlp." in n or n.startswith(("mlp.", "ln_2.")) for n, _ in
                       block.named_parameters())
        branches = [(attn, ln_1)]
    h = x
    for f, ln in branches:
        if kw.get("residual", True):
            h = ln(h + f(h)) if post else h + f(ln(h))
        else:
            h = ln(f(h)) if post else f(ln(h))
    assert torch.allclose(block(x), h, atol=1e-6)
    # ... and, for a switch, not the whole block's formula (it did take something out).
    whole = VariantBlock(config(attention=attention, norm="post" if post else "pre"))
    whole.load_state_dict(block.state_dict(), strict=False)
    if kw:
        assert not torch.allclose(whole(x), h, atol=1e-3)
    else:
        assert torch.equal(whole(x), block(x))
        if attention == "batched":  # model.py's Block, with the same weights
            taught = Block(plain_config())
            taught.load_state_dict(block.state_dict())
            assert torch.allclose(taught(x), h, atol=1e-6)


def test_no_residual_block_forgets_its_input_when_branches_are_silent():
    """With x + f(x) a silent block is the identity; with f(x) alone it outputs zeros."""
    block = randomize(make_block(residual=False), seed=18)
    _silence_branches(block)
    assert torch.equal(block(torch.randn(2, 6, 16)), torch.zeros(2, 6, 16))


def test_pre_ln_block_is_not_the_identity_with_live_branches():
    block = randomize(make_block(norm="pre"), seed=9)
    x = torch.randn(2, 6, 16)
    assert not torch.allclose(block(x), x, atol=1e-3)


# --- parameter counts ---------------------------------------------------------------------


def block_params(C: int) -> int:
    # q,k,v (no bias) + output projection + MLP C->4C and 4C->C + two LayerNorms
    return 3 * C * C + (C * C + C) + (4 * C * C + 4 * C) + (4 * C * C + C) + 4 * C


def expected_parts(V: int, T: int, C: int, L: int, per_block: int) -> dict[str, int]:
    parts = {"transformer.wte": V * C, "transformer.wpe": T * C,
             "transformer.h": L * per_block, "lm_head": C * V + V}
    return {**parts, "total": sum(parts.values())}


@pytest.mark.parametrize("attention", ATTENTIONS)
def test_one_block_of_width_64_with_4_heads_has_49792_parameters(attention):
    block = make_block(n_embd=64, n_head=4, attention=attention)
    assert sum(p.numel() for p in block.parameters()) == 49_792 == block_params(64)


@pytest.mark.parametrize("attention", ATTENTIONS)
@pytest.mark.parametrize(("C", "nh"), [(8, 2), (12, 3), (48, 6), (30, 5)])
def test_block_parameter_count_formula(attention, C, nh):
    block = make_block(n_embd=C, n_head=nh, attention=attention)
    assert sum(p.numel() for p in block.parameters()) == block_params(C) == 12 * C * C + 10 * C


@pytest.mark.parametrize("attention", ATTENTIONS)
def test_model_parameter_count_formula(attention):
    V, T, C, L = 11, 8, 16, 3
    model = build_model(config(n_layer=L, attention=attention))
    assert param_breakdown(model) == expected_parts(V, T, C, L, block_params(C))
    assert param_breakdown(model)["total"] == sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize(("kw", "per_block"), [
    ({"norm": "none"}, lambda C: 12 * C * C + 6 * C),  # two LayerNorms fewer: 4C
    ({"norm": "post"}, lambda C: 12 * C * C + 10 * C),  # the same LayerNorms, elsewhere
    ({"residual": False}, lambda C: 12 * C * C + 10 * C),  # the "x +" has no weights
    ({"mlp": False}, lambda C: 4 * C * C + 3 * C),  # q, k, v, c_proj and ln_1 are left
    ({"mlp": False, "norm": "none"}, lambda C: 4 * C * C + C),  # q, k, v and c_proj
], ids=lambda v: str(v) if isinstance(v, dict) else "formula")  # the same ids in every process
def test_ablation_parameter_counts(kw, per_block):
    V, T, C, L = 11, 8, 16, 3
    model = build_model(config(n_layer=L, **kw))
    assert param_breakdown(model) == expected_parts(V, T, C, L, per_block(C))
    assert param_breakdown(model)["total"] == sum(p.numel() for p in model.parameters())


# --- LayerNorm and dropout ----------------------------------------------------------------


def test_layernorm_gives_zero_mean_and_unit_variance_per_position():
    block = Block(plain_config())
    assert torch.equal(block.ln_1.weight, torch.ones(16))
    assert torch.equal(block.ln_1.bias, torch.zeros(16))
    x = torch.randn(4, 7, 16) * 5 + 3
    y = block.ln_1(x)
    assert torch.allclose(y.mean(-1), torch.zeros(4, 7), atol=1e-5)
    assert torch.allclose(y.var(-1, unbiased=False), torch.ones(4, 7), atol=1e-3)
    # ... and it is the formula: (x - mean) / sqrt(var + eps).
    manual = (x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, keepdim=True, unbiased=False)
                                                        + block.ln_1.eps)
    assert torch.allclose(y, manual, atol=1e-5)


@pytest.mark.parametrize("attention", ATTENTIONS)
def test_dropout_acts_only_in_training_mode(attention):
    torch.manual_seed(10)
    model = build_model(config(dropout=0.3, attention=attention))
    idx = torch.randint(11, (2, 8))
    model.train()
    a, b = model(idx)[0], model(idx)[0]
    assert not torch.allclose(a, b, atol=1e-6)
    model.eval()
    c, d = model(idx)[0], model(idx)[0]
    assert torch.equal(c, d)


def test_dropout_also_acts_on_the_attention_weights():
    """Both forms drop attention links, not only the projected output."""
    torch.manual_seed(17)
    cfg = config(dropout=0.5)
    csa, mha = CausalSelfAttention(cfg), MultiHeadAttention(cfg)
    csa.resid_dropout.p = 0.0  # silence the output dropout: what is left is on the weights
    mha.resid_dropout.p = 0.0
    x = torch.randn(2, 8, 16)
    for attn in (csa, mha):
        attn.train()
        assert not torch.allclose(attn(x), attn(x), atol=1e-6)
        attn.eval()
        assert torch.equal(attn(x), attn(x))


@pytest.mark.parametrize("attention", ATTENTIONS)
def test_zero_dropout_trains_like_it_evaluates(attention):
    model = randomize(build_model(config(dropout=0.0, attention=attention)), seed=11)
    idx = torch.randint(11, (2, 8))
    model.train()
    a = model(idx)[0]
    model.eval()
    assert torch.equal(a, model(idx)[0])


# --- bad configurations -------------------------------------------------------------------


def test_n_embd_not_divisible_by_n_head_names_both_numbers():
    with pytest.raises(UserError) as e:
        ModelConfig(vocab_size=5, n_embd=30, n_head=4)
    msg = str(e.value)
    assert "n_embd=30" in msg and "n_head=4" in msg
    assert "[1, 2, 3, 5, 6" in msg  # and suggests heads that do divide 30


@pytest.mark.parametrize(
    ("kw", "fragment"),
    [
        ({"dropout": -0.1}, "dropout"),
        ({"dropout": 1.0}, "dropout"),
        ({"dropout": float("nan")}, "dropout"),
        ({"activation": "tanh"}, "tanh"),
        ({"n_head": 0}, "n_head"),
        ({"n_layer": 0}, "n_layer"),
        ({"n_embd": 0}, "n_embd"),
    ],
)
@pytest.mark.parametrize("cls", [ModelConfig, VariantConfig])
def test_bad_config_is_a_user_error(cls, kw, fragment):
    with pytest.raises(UserError, match=fragment):
        cls(**{**BASE, **kw})


@pytest.mark.parametrize(
    ("kw", "fragment"),
    [
        ({"norm": "middle"}, "norm must be one of pre, post, none, got 'middle'"),
        ({"attention": "flash"}, "attention must be one of batched, heads, got 'flash'"),
        ({"residual": "no"}, "residual must be True or False"),
        ({"mlp": 0}, "mlp must be True or False"),
    ],
)
def test_bad_variant_is_a_user_error(kw, fragment):
    with pytest.raises(UserError, match=fragment):
        config(**kw)


# --- training, attention maps, generation -------------------------------------------------


@pytest.mark.parametrize("attention", ATTENTIONS)
def test_initial_loss_is_close_to_ln_vocab_size(attention):
    V = 27
    torch.manual_seed(12)
    model = build_model(config(vocab_size=V, block_size=16, n_embd=32, attention=attention))
    g = torch.Generator().manual_seed(12)
    x, y = torch.randint(V, (8, 16), generator=g), torch.randint(V, (8, 16), generator=g)
    _, loss = model(x, y)
    assert abs(loss.item() - math.log(V)) < 0.1


def fit_one_batch(steps: int = 150, **kw) -> tuple[float, float]:
    """(first, last) loss of a small model trained on one random batch."""
    V = 13
    torch.manual_seed(13)
    model = build_model(config(vocab_size=V, n_embd=32, **kw))
    g = torch.Generator().manual_seed(13)
    x, y = torch.randint(V, (4, 8), generator=g), torch.randint(V, (4, 8), generator=g)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    first = model(x, y)[1].item()
    for _ in range(steps):
        _, loss = model(x, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return first, model(x, y)[1].item()


@pytest.mark.parametrize("kw", [{"norm": n} for n in NORMS] + [{"mlp": False},
                                                              {"attention": "heads"}], ids=str)
def test_overfits_one_batch(kw):
    first, last = fit_one_batch(**kw)
    assert last < 0.5 * first, (first, last)


@pytest.mark.parametrize("norm", ["pre", "post"])
def test_without_residuals_one_batch_is_much_harder_to_fit(norm):
    """The same model, the same start: x + f(x) fits the batch, f(x) alone lags far behind."""
    _, with_residual = fit_one_batch(norm=norm)
    _, without = fit_one_batch(norm=norm, residual=False)
    assert with_residual < 0.5 * without, (with_residual, without)


@pytest.mark.parametrize("attention", ATTENTIONS)
def test_attention_maps_shape_rows_and_mask(attention):
    model = randomize(build_model(config(n_layer=3, n_head=2, attention=attention)), seed=14)
    maps = model.attention_maps(torch.randint(11, (2, 6)))
    assert maps.shape == (2, 3, 2, 6, 6)  # (B, n_layer, n_head, T, T)
    assert torch.allclose(maps.sum(-1), torch.ones(2, 3, 2, 6), atol=1e-5)
    upper = torch.triu(torch.ones(6, 6, dtype=torch.bool), diagonal=1)
    assert torch.all(maps[..., upper] == 0)
    assert torch.all(maps[..., ~upper] > 0)
    # Layers and heads are distinct maps, not one map repeated.
    assert not torch.allclose(maps[:, 0], maps[:, 1], atol=1e-3)
    assert not torch.allclose(maps[:, :, 0], maps[:, :, 1], atol=1e-3)


@pytest.mark.parametrize("attention", ATTENTIONS)
def test_attention_maps_are_those_of_the_given_tokens(attention):
    model = randomize(build_model(config(attention=attention)), seed=3)
    a, b = torch.tensor([[1, 2, 3, 4]]), torch.tensor([[4, 3, 2, 1]])
    assert not torch.equal(model.attention_maps(a), model.attention_maps(b))
    assert torch.equal(model.attention_maps(a), model.attention_maps(a))


def test_multihead_has_no_attention_before_a_forward_pass():
    mha = MultiHeadAttention(config())
    assert mha.last_attention is None
    mha(torch.randn(1, 3, 16))
    assert mha.last_attention.shape == (1, 4, 3, 3)


@pytest.mark.parametrize("kw", [{}, {"attention": "heads"}], ids=str)
def test_forward_longer_than_block_size_is_a_user_error(kw):
    model = build_model(config(**kw))
    model(torch.zeros(1, 8, dtype=torch.long))  # exactly block_size is fine
    with pytest.raises(UserError, match="block_size=8"):
        model(torch.zeros(1, 9, dtype=torch.long))


def test_generate_crops_and_temperature_zero_is_greedy():
    model = randomize(build_model(config()), seed=15).eval()
    prompt = torch.randint(11, (2, 12), generator=torch.Generator().manual_seed(15))
    out = model.generate(prompt, 5, temperature=0.0)
    assert out.shape == (2, 17) and torch.equal(out[:, :12], prompt)
    for t in range(12, 17):
        logits, _ = model(out[:, t - 8 : t])
        assert torch.equal(out[:, t], logits[:, -1].argmax(-1))
