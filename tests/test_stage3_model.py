"""Stage 3: one causal self-attention head, position information, the heatmap.

What the stage teaches, checked as behaviour:

- the causal mask: no position's output depends on later tokens;
- the hand-written head is exactly scaled dot-product attention;
- without position information attention cannot tell order (permutation tests);
- the bigram's blind spot is gone: the same last character can get different predictions;
- the model trains, generates, and rejects bad input with ``UserError``;
- the attention heatmap is written, also for Chinese, and bad prompts are refused.
"""

from __future__ import annotations

import math
import warnings
from types import SimpleNamespace

import pytest
import torch
from torch.nn import functional as F

from stage3_attention import visualize
from stage3_attention.errors import UserError
from stage3_attention.model import (
    POSITIONS,
    Head,
    LanguageModel,
    ModelConfig,
    sinusoidal_positions,
)
from stage3_attention.plots import LABELS
from stage3_attention.prompts import default_prompt
from stage3_attention.report import param_breakdown
from stage3_attention.tokenizer import CharTokenizer
from stage3_attention.visualize import attention_figure, attention_layer_figures, attention_maps

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def make_model(pos: str = "learned", vocab_size: int = 11, block_size: int = 8, n_embd: int = 16,
               seed: int = 0, std: float | None = None) -> LanguageModel:
    """A small model; ``std`` re-initialises every parameter so that nothing is near zero."""
    torch.manual_seed(seed)
    model = LanguageModel(ModelConfig(vocab_size=vocab_size, block_size=block_size,
                                      n_embd=n_embd, pos=pos))
    if std is not None:
        with torch.no_grad():
            for p in model.parameters():
                p.normal_(0.0, std)
    return model.eval()


# --- causality --------------------------------------------------------------------------


@pytest.mark.parametrize("pos", POSITIONS)
def test_logits_on_a_shared_prefix_do_not_depend_on_what_follows(pos):
    model = make_model(pos, std=0.5)
    g = torch.Generator().manual_seed(1)
    prefix = torch.randint(11, (3, 5), generator=g)
    a = torch.cat([prefix, torch.randint(11, (3, 3), generator=g)], dim=1)
    b = torch.cat([prefix, torch.randint(11, (3, 3), generator=g)], dim=1)
    assert not torch.equal(a, b)
    la, _ = model(a)
    lb, _ = model(b)
    assert torch.allclose(la[:, :5], lb[:, :5], atol=1e-6)
    # ... and the suffix positions do see the different tokens.
    assert not torch.allclose(la[:, 5:], lb[:, 5:], atol=1e-3)
    # The prefix alone gives the same logits too.
    lp, _ = model(prefix)
    assert torch.allclose(la[:, :5], lp, atol=1e-6)


# --- attention weights ------------------------------------------------------------------


@pytest.mark.parametrize("pos", POSITIONS)
def test_attention_rows_sum_to_one_and_nothing_above_the_diagonal(pos):
    model = make_model(pos, std=0.5)
    idx = torch.randint(11, (2, 7), generator=torch.Generator().manual_seed(2))
    maps = model.attention_maps(idx)
    wei = model.sa_head.last_attention
    assert wei.shape == (2, 7, 7)
    assert maps.shape == (2, 1, 1, 7, 7)
    assert torch.equal(maps[:, 0, 0], wei)
    assert torch.allclose(wei.sum(-1), torch.ones(2, 7), atol=1e-6)
    upper = torch.triu(torch.ones(7, 7, dtype=torch.bool), diagonal=1)
    assert torch.all(wei[:, upper] == 0)
    assert torch.all(wei[:, ~upper] > 0)  # softmax: every allowed key gets some weight
    assert torch.allclose(wei[:, 0, 0], torch.ones(2))  # the first token can only see itself


def test_attention_maps_are_those_of_the_given_tokens():
    model = make_model(std=0.5)
    a, b = torch.tensor([[1, 2, 3, 4]]), torch.tensor([[4, 3, 2, 1]])
    assert not torch.equal(model.attention_maps(a), model.attention_maps(b))
    assert torch.equal(model.attention_maps(a), model.attention_maps(a))


def test_head_equals_torch_scaled_dot_product_attention():
    torch.manual_seed(3)
    # head_size != n_embd, so scaling by sqrt(n_embd) instead of sqrt(head_size) would fail.
    head = Head(n_embd=12, head_size=4, block_size=10)
    with torch.no_grad():
        for p in head.parameters():
            p.normal_(0.0, 0.7)
    x = torch.randn(3, 9, 12)
    out = head(x)
    assert out.shape == (3, 9, 4)
    q, k, v = head.query(x), head.key(x), head.value(x)
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert torch.allclose(out, expected, atol=1e-6)
    # Without the mask it is the plain (non-causal) attention.
    head.causal = False
    full = F.scaled_dot_product_attention(q, k, v, is_causal=False)
    assert torch.allclose(head(x), full, atol=1e-6)
    assert not torch.allclose(full, expected, atol=1e-3)


# --- position information and permutations ----------------------------------------------


def test_non_causal_head_is_permutation_equivariant():
    torch.manual_seed(4)
    head = Head(n_embd=8, head_size=8, block_size=6, causal=False)
    x = torch.randn(2, 6, 8)
    perm = torch.tensor([3, 0, 5, 1, 4, 2])
    assert torch.allclose(head(x[:, perm]), head(x)[:, perm], atol=1e-6)


def test_causal_head_is_not_permutation_equivariant():
    torch.manual_seed(4)
    head = Head(n_embd=8, head_size=8, block_size=6, causal=True)
    x = torch.randn(2, 6, 8)
    perm = torch.tensor([3, 0, 5, 1, 4, 2])
    assert not torch.allclose(head(x[:, perm]), head(x)[:, perm], atol=1e-3)


def _permuted_logits(model, idx, perm):
    with torch.no_grad():
        return model(idx[:, perm])[0], model(idx)[0][:, perm]


def test_without_positions_or_mask_the_model_cannot_see_order():
    model = make_model("none", std=0.5)
    model.sa_head.causal = False  # the non-causal view: every token sees every token
    idx = torch.tensor([[1, 2, 3, 4, 5, 6, 7, 8]])
    perm = torch.tensor([7, 2, 5, 0, 3, 6, 1, 4])
    permuted, expected = _permuted_logits(model, idx, perm)
    assert torch.allclose(permuted, expected, atol=1e-5)


@pytest.mark.parametrize("pos", ["learned", "sinusoidal"])
def test_with_positions_permuting_the_input_does_not_just_permute_the_logits(pos):
    model = make_model(pos, std=0.5)
    model.sa_head.causal = False  # so that only the positions can break the symmetry
    idx = torch.tensor([[1, 2, 3, 4, 5, 6, 7, 8]])
    perm = torch.tensor([7, 2, 5, 0, 3, 6, 1, 4])
    permuted, expected = _permuted_logits(model, idx, perm)
    assert not torch.allclose(permuted, expected, atol=1e-3)


def test_causal_without_positions_last_output_ignores_the_order_of_earlier_tokens():
    model = make_model("none", std=0.5)
    idx = torch.tensor([[1, 2, 3, 4, 5, 6, 7, 8]])
    shuffled = idx[:, torch.tensor([4, 0, 6, 2, 5, 1, 3, 7])]  # last token stays in place
    assert shuffled[0, -1] == idx[0, -1] and not torch.equal(shuffled, idx)
    with torch.no_grad():
        a, b = model(idx)[0], model(shuffled)[0]
    assert torch.allclose(a[:, -1], b[:, -1], atol=1e-5)
    assert not torch.allclose(a[:, 3], b[:, 3], atol=1e-3)  # earlier positions see other sets


@pytest.mark.parametrize("pos", ["learned", "sinusoidal"])
def test_causal_with_positions_last_output_depends_on_the_order(pos):
    model = make_model(pos, std=0.5)
    idx = torch.tensor([[1, 2, 3, 4, 5, 6, 7, 8]])
    shuffled = idx[:, torch.tensor([4, 0, 6, 2, 5, 1, 3, 7])]
    with torch.no_grad():
        a, b = model(idx)[0], model(shuffled)[0]
    assert not torch.allclose(a[:, -1], b[:, -1], atol=1e-3)


# --- sinusoidal table, buffers and parameters ---------------------------------------------


@pytest.mark.parametrize("n_embd", [6, 7, 1, 16])
def test_sinusoidal_positions_match_the_formula(n_embd):
    block_size = 12
    pe = sinusoidal_positions(block_size, n_embd)
    assert pe.shape == (block_size, n_embd)
    for p in range(block_size):
        for j in range(n_embd):
            two_i = j - j % 2
            angle = p / 10000 ** (two_i / n_embd)
            expected = math.sin(angle) if j % 2 == 0 else math.cos(angle)
            assert pe[p, j].item() == pytest.approx(expected, abs=1e-5), (p, j)
    # Position 0 is (0, 1, 0, 1, ...).
    assert torch.equal(pe[0, 0::2], torch.zeros(len(range(0, n_embd, 2))))
    assert torch.equal(pe[0, 1::2], torch.ones(n_embd // 2))


def test_sinusoidal_table_is_a_buffer_not_a_parameter():
    model = make_model("sinusoidal")
    buffers = dict(model.named_buffers())
    assert "position_table" in buffers
    assert torch.equal(buffers["position_table"], sinusoidal_positions(8, 16))
    assert not any(p is buffers["position_table"] for p in model.parameters())
    assert not any("position" in name for name, _ in model.named_parameters())
    state = model.state_dict()
    assert "position_table" not in state  # persistent=False: rebuilt, not saved
    assert not any("tril" in k for k in state)
    # Training cannot change it: it gets no gradient.
    _, loss = model(torch.zeros(1, 8, dtype=torch.long), torch.zeros(1, 8, dtype=torch.long))
    loss.backward()
    assert buffers["position_table"].grad is None
    assert buffers["position_table"].requires_grad is False


def test_learned_positions_are_a_trained_parameter():
    model = make_model("learned")
    params = dict(model.named_parameters())
    assert params["position_embedding_table.weight"].shape == (8, 16)
    assert "position_embedding_table.weight" in model.state_dict()
    assert "position_table" not in dict(model.named_buffers())
    _, loss = model(torch.zeros(1, 8, dtype=torch.long), torch.zeros(1, 8, dtype=torch.long))
    loss.backward()
    assert params["position_embedding_table.weight"].grad.abs().sum() > 0


def test_pos_none_has_no_position_table_at_all():
    model = make_model("none")
    assert not any("position" in n for n, _ in model.named_parameters())
    assert not any("position" in n for n, _ in model.named_buffers())
    assert torch.equal(model.positions(5, torch.device("cpu")), torch.zeros(5, 16))


@pytest.mark.parametrize("pos", POSITIONS)
@pytest.mark.parametrize(("V", "T", "C"), [(11, 8, 16), (65, 32, 32), (3, 5, 7)])
def test_parameter_count_matches_the_formula(pos, V, T, C):
    model = LanguageModel(ModelConfig(vocab_size=V, block_size=T, n_embd=C, pos=pos))
    expected = V * C + 3 * C * C + C * V + V
    if pos == "learned":
        expected += T * C
    assert sum(p.numel() for p in model.parameters()) == expected
    # The harness's count by part (printed at the start of training), in the model's order.
    parts = {"token_embedding_table": V * C,
             **({"position_embedding_table": T * C} if pos == "learned" else {}),
             "sa_head": 3 * C * C,  # key, query, value: (C, C) each, no bias
             "lm_head": C * V + V}
    assert param_breakdown(model) == {**parts, "total": expected}
    assert list(param_breakdown(model)) == [*parts, "total"]


# --- what one head buys over the bigram ---------------------------------------------------


@pytest.mark.parametrize("pos", ["learned", "none"])
def test_same_last_character_can_get_different_predictions(pos):
    """After "ab" comes "x", after "cb" comes "y": a bigram cannot learn this, one head can."""
    from stage2_bigram.model import LanguageModel as Bigram
    from stage2_bigram.model import ModelConfig as BigramConfig

    tok = CharTokenizer.from_text("abcxy")
    a, b, c, x, y = (tok.stoi[ch] for ch in "abcxy")
    contexts = torch.tensor([[a, b], [c, b]])
    targets = torch.tensor([x, y])

    bigram = Bigram(BigramConfig(vocab_size=tok.vocab_size))
    bl, _ = bigram(contexts)
    assert torch.equal(bl[0, -1], bl[1, -1])  # the bigram only sees "b": identical guesses

    torch.manual_seed(5)
    model = LanguageModel(ModelConfig(vocab_size=tok.vocab_size, block_size=4, n_embd=16,
                                      pos=pos))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for _ in range(80):
        # Only the prediction after the second character counts: a value vector that also
        # had to predict "b" after "a" and "c" would teach the head to ignore them.
        logits, _ = model(contexts)
        loss = F.cross_entropy(logits[:, -1], targets)
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    logits, _ = model(contexts)
    assert not torch.allclose(logits[0, -1], logits[1, -1], atol=1e-2)
    assert logits[0, -1].argmax().item() == x
    assert logits[1, -1].argmax().item() == y


# --- training -----------------------------------------------------------------------------


@pytest.mark.parametrize("pos", POSITIONS)
def test_initial_loss_is_close_to_ln_vocab_size(pos):
    V = 27
    model = make_model(pos, vocab_size=V, block_size=16, n_embd=32)
    g = torch.Generator().manual_seed(6)
    x, y = torch.randint(V, (8, 16), generator=g), torch.randint(V, (8, 16), generator=g)
    _, loss = model(x, y)
    assert loss.ndim == 0
    assert abs(loss.item() - math.log(V)) < 0.1


@pytest.mark.parametrize("pos", ["learned", "sinusoidal"])
def test_overfits_one_batch(pos):
    V = 13
    torch.manual_seed(7)
    model = LanguageModel(ModelConfig(vocab_size=V, block_size=8, n_embd=32, pos=pos))
    g = torch.Generator().manual_seed(7)
    x, y = torch.randint(V, (4, 8), generator=g), torch.randint(V, (4, 8), generator=g)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    first = model(x, y)[1].item()
    for _ in range(200):
        _, loss = model(x, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    last = model(x, y)[1].item()
    assert last < 0.5 * first, (first, last)


# --- forward and generate -----------------------------------------------------------------


def test_forward_shapes_and_loss_matches_cross_entropy():
    model = make_model(std=0.3)
    g = torch.Generator().manual_seed(8)
    x, y = torch.randint(11, (3, 6), generator=g), torch.randint(11, (3, 6), generator=g)
    logits, loss = model(x, y)
    assert logits.shape == (3, 6, 11)
    assert torch.allclose(loss, F.cross_entropy(logits.reshape(-1, 11), y.reshape(-1)))


def test_forward_longer_than_block_size_is_a_user_error():
    model = make_model(block_size=8)
    model(torch.zeros(1, 8, dtype=torch.long))  # exactly block_size is fine
    with pytest.raises(UserError, match="block_size=8") as e:
        model(torch.zeros(1, 9, dtype=torch.long))
    assert "9 tokens" in str(e.value)


def test_generate_crops_a_long_prompt_and_appends_new_tokens():
    model = make_model(block_size=8, std=0.5)
    prompt = torch.randint(11, (2, 20), generator=torch.Generator().manual_seed(9))
    out = model.generate(prompt, 7, generator=torch.Generator().manual_seed(0))
    assert out.shape == (2, 27)
    assert torch.equal(out[:, :20], prompt)
    assert out.dtype == torch.long and out.min() >= 0 and out.max() < 11


def test_temperature_zero_is_deterministic_greedy():
    model = make_model(block_size=8, std=0.5)
    prompt = torch.randint(11, (2, 10), generator=torch.Generator().manual_seed(10))
    a = model.generate(prompt, 6, temperature=0.0, generator=torch.Generator().manual_seed(1))
    b = model.generate(prompt, 6, temperature=0.0, generator=torch.Generator().manual_seed(2))
    assert torch.equal(a, b)
    # Each new token is the argmax of the logits over the last block_size tokens.
    for t in range(10, 16):
        logits, _ = model(a[:, max(0, t - 8) : t])
        assert torch.equal(a[:, t], logits[:, -1].argmax(-1))


def test_sampling_is_reproducible_with_a_seeded_generator():
    model = make_model(block_size=8, std=0.5)
    prompt = torch.zeros(1, 1, dtype=torch.long)
    a = model.generate(prompt, 30, generator=torch.Generator().manual_seed(3))
    b = model.generate(prompt, 30, generator=torch.Generator().manual_seed(3))
    c = model.generate(prompt, 30, generator=torch.Generator().manual_seed(4))
    assert torch.equal(a, b)
    assert not torch.equal(a, c)


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"n_embd": 0}, "n_embd"),
        ({"block_size": 0}, "block_size"),
        ({"vocab_size": 0}, "vocab_size"),
        ({"pos": "bogus"}, "bogus"),
        ({"pos": "Learned"}, "learned, sinusoidal, none"),
    ],
)
def test_bad_config_is_a_user_error(kwargs, fragment):
    config = {"vocab_size": 5, "block_size": 4, "n_embd": 8, **kwargs}
    with pytest.raises(UserError, match=fragment):
        ModelConfig(**config)


# --- the attention heatmap ---------------------------------------------------------------


@pytest.fixture
def tiny_model_and_tokenizer():
    tok = CharTokenizer.from_text("the cat sat on the mat.\n你好，世界！")
    torch.manual_seed(11)
    model = LanguageModel(ModelConfig(vocab_size=tok.vocab_size, block_size=12, n_embd=8))
    return model, tok


def test_attention_figure_writes_a_png(tiny_model_and_tokenizer, tmp_path):
    model, tok = tiny_model_and_tokenizer
    path = attention_figure(model, tok, "the cat", tmp_path / "sub" / "att.png")
    assert path == tmp_path / "sub" / "att.png"
    assert path.read_bytes()[:8] == PNG_MAGIC
    assert model.sa_head.last_attention.shape == (1, 7, 7)  # it ran the prompt once


def test_attention_maps_are_the_heads_weights_for_the_prompt(tiny_model_and_tokenizer):
    model, tok = tiny_model_and_tokenizer
    maps = attention_maps(model, tok, "the cat")
    assert maps.shape == (1, 1, 7, 7)  # (n_layer, n_head, T, T)
    idx = torch.tensor([tok.encode("the cat")])
    assert torch.equal(maps, model.attention_maps(idx)[0])
    assert not model.training  # figures show the model as it samples


def test_attention_figures_pass_their_labels_to_the_plot(tiny_model_and_tokenizer, tmp_path,
                                                         monkeypatch):
    model, tok = tiny_model_and_tokenizer
    calls = []

    def spy(maps, path, title, names, chars=None, labels=None):
        calls.append(SimpleNamespace(maps=maps, path=path, title=title, names=names,
                                     chars=chars, labels=labels))
        return path

    monkeypatch.setattr(visualize, "plot_attention", spy)
    zh = {**LABELS, "grid": "{stage}：{prompt} 的注意力", "head": "头 {j}",
          "layer": "第 {i} 层（共 0..{last} 层）：{prompt}"}
    grid = attention_figure(model, tok, "你好\n世界", tmp_path / "grid.png", labels=zh)
    layers = attention_layer_figures(model, tok, "你好\n世界", tmp_path / "figs", labels=zh)
    assert grid == tmp_path / "grid.png"
    assert layers == [tmp_path / "figs" / "attention_layer0.png"]  # one layer, one file
    first, second = calls
    assert first.title == 'stage3_attention：“你好⏎世界” 的注意力'  # a newline as on the axes
    assert first.names == [[""]] and first.chars == list("你好\n世界")  # one panel: characters
    assert second.title == '第 0 层（共 0..0 层）：“你好⏎世界”'
    assert second.names == [["头 0"]] and second.chars == list("你好\n世界")
    assert first.labels is zh and second.labels is zh
    assert torch.equal(first.maps, second.maps) and first.maps.shape == (1, 1, 5, 5)


def test_attention_layer_figures_write_one_png_per_layer(tiny_model_and_tokenizer, tmp_path):
    model, tok = tiny_model_and_tokenizer
    paths = attention_layer_figures(model, tok, "the cat", tmp_path / "figs")
    assert paths == [tmp_path / "figs" / "attention_layer0.png"]
    assert paths[0].read_bytes()[:8] == PNG_MAGIC
    assert sorted(p.name for p in (tmp_path / "figs").iterdir()) == ["attention_layer0.png"]


@pytest.mark.parametrize(
    ("prompt", "fragment"),
    [
        ("", "empty"),
        ("the cat sat on", "block_size=12"),  # 14 characters
        ("the dog", "'d'"),  # 'd' and 'g' are not in the vocabulary
    ],
)
def test_attention_figure_bad_prompt_is_a_user_error(tiny_model_and_tokenizer, tmp_path, prompt,
                                                     fragment):
    model, tok = tiny_model_and_tokenizer
    with pytest.raises(UserError, match=fragment):
        attention_figure(model, tok, prompt, tmp_path / "att.png")
    assert not (tmp_path / "att.png").exists()


def test_attention_figure_draws_chinese_without_missing_glyphs(tiny_model_and_tokenizer,
                                                               tmp_path):
    model, tok = tiny_model_and_tokenizer
    with warnings.catch_warnings():
        # matplotlib warns "Glyph ... missing from font(s)" when it draws an empty box.
        warnings.simplefilter("error", UserWarning)
        path = attention_figure(model, tok, "你好，世界！the", tmp_path / "zh.png")
    assert path.read_bytes()[:8] == PNG_MAGIC


def test_default_prompt_is_a_line_from_the_held_out_tail():
    lines = [f"line {i:03d} of the text" for i in range(100)]
    text = "\n".join(lines) + "\n"
    held_out = text[int(len(text) * 0.9) :]
    prompt = default_prompt(text, 12)
    assert len(prompt) == 12
    assert prompt in held_out
    assert prompt.startswith("line ")  # starts at the beginning of a line
    start = text.index(prompt)
    assert text[start - 1] == "\n"
    assert default_prompt(text, 200).startswith(prompt)


def test_default_prompt_of_a_text_without_newlines():
    text = "abcdefghij" * 10
    prompt = default_prompt(text, 5)
    assert len(prompt) == 5 and prompt in text[90:]
