"""Stage 5: the figures (python -m stage5_gpt.visualize) and the head inspector
(python -m stage5_gpt.inspect).

What is checked, as behaviour:

- every figure function writes a real PNG, for an English and a Chinese prompt,
  without matplotlib's "Glyph ... missing from font(s)" warning;
- the logit lens's last row is exactly the model's own prediction, and the
  numbers written beside its figure (right guesses per row, and which) are the
  lens's own; the position-similarity numbers are the matrix's diagonals;
- the position similarity is a cosine-similarity matrix;
- the inspector's reading of the weights (largest weight on j = i-1 ...) counts right;
- explain_head's numbers are one consistent computation (scaled = scores / sqrt(hs),
  -inf exactly above the diagonal, softmax(masked) = weights, weights @ v = output);
- bad layer, head, prompt or log -> UserError; the CLIs run end to end on a tiny
  checkpoint and fail with ``error: ...`` and exit status 2.
"""

from __future__ import annotations

import json
import math
import warnings
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch
from conftest import assert_user_error, finish, module_env, start_module
from torch.nn import functional as F

from stage5_gpt.checkpoint import default_checkpoint
from stage5_gpt.errors import UserError
from stage5_gpt.inspect import explain_head, format_explanation
from stage5_gpt.lens import (
    layer_predictions_figure,
    logit_lens,
    position_similarity,
    position_similarity_figure,
)
from stage5_gpt.model import GPT, GPTConfig
from stage5_gpt.tokenizer import CharTokenizer
from stage5_gpt.train import main as train_main
from stage5_gpt.visualize import loss_figure, write_figures

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
# English and Chinese, nothing outside the fonts (no emoji): a missing glyph fails a test.
TEXT = "the cat sat on the mat.\n小猫坐在垫子上。\n你好，世界！hello\n" * 20
EN_PROMPT = "the cat sat"
ZH_PROMPT = "小猫坐在垫子上。你好"
MIXED_PROMPT = "小猫 sat on 垫子"  # Chinese, Latin and a space (drawn as ␣)
FIGURES = ["attention_grid.png", "attention_layer0.png", "attention_layer1.png", "loss.png",
           "position_similarity.png", "layer_predictions.png", "position_similarity.md",
           "layer_predictions.md"]


@pytest.fixture(scope="module")
def tiny() -> tuple[GPT, CharTokenizer]:
    """A random 2-layer, 2-head GPT; block_size 20 leaves room for the 16-character limit."""
    tok = CharTokenizer.from_text(TEXT)
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=tok.vocab_size, block_size=20, n_layer=2, n_head=2,
                          n_embd=16))
    return model.eval(), tok


@contextmanager
def glyphs_must_exist():
    """matplotlib warns "Glyph ... missing from font(s)" when it draws an empty box."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        yield


def assert_png(path: Path) -> None:
    data = Path(path).read_bytes()
    assert data[:8] == PNG_MAGIC, path
    assert len(data) > 5000, f"{path} is suspiciously small ({len(data)} bytes)"


def write_log(path: Path) -> Path:
    rows = [{"step": s, "train": 4.0 - s / 10, "val": 4.1 - s / 12, "lr": 1e-3, "time": s}
            for s in range(0, 30, 10)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


# --- figures -----------------------------------------------------------------------------


def test_every_figure_is_a_png_with_every_glyph(tiny, tmp_path):
    model, tok = tiny
    log = write_log(tmp_path / "log.jsonl")
    with glyphs_must_exist():
        paths = write_figures(model, tok, MIXED_PROMPT, tmp_path / "fig", log_path=log)
    assert paths == [tmp_path / "fig" / name for name in FIGURES]
    for p in paths:
        if p.suffix == ".png":
            assert_png(p)


def test_per_layer_attention_figures_are_readable_at_page_width(tiny, tmp_path):
    """One figure per layer, heads two to a row, 6.4 inches wide (about 690 px on the page)."""
    from PIL import Image

    model, tok = tiny
    write_figures(model, tok, EN_PROMPT, tmp_path / "fig")
    for name in ("attention_grid.png", "attention_layer0.png", "attention_layer1.png"):
        w, h = Image.open(tmp_path / "fig" / name).size
        assert w == 1024, (name, w)  # 6.4 in at 160 dpi: shown at ~0.67x, fonts stay >= 9 px
        assert h < 1.6 * w, (name, h)


def test_logit_lens_last_row_is_the_models_own_prediction(tiny):
    model, tok = tiny
    lens = logit_lens(model, tok, ZH_PROMPT)
    idx = torch.tensor([tok.encode(ZH_PROMPT)])
    T, V = idx.shape[1], tok.vocab_size
    assert lens["probs"].shape == (3, T, V)  # embeddings + 2 layers
    # Row l reads x_l, the stream after l blocks; layers are named by their index in h.
    assert lens["row_names"] == ["x₀ embeddings", "x₁ after layer 0", "x₂ after layer 1"]
    with torch.no_grad():
        logits, _ = model(idx)  # the fast path, as generate() runs it
    assert torch.allclose(lens["probs"][-1], F.softmax(logits[0], dim=-1), atol=1e-6)
    assert torch.equal(lens["top1"][-1], logits[0].argmax(dim=-1))
    # target_probs[l, t] is the probability of the character at t + 1; the last position has none.
    assert lens["target_probs"].shape == (3, T - 1)
    for t in range(T - 1):
        assert lens["target_probs"][1, t] == lens["probs"][1, t, idx[0, t + 1]]
    # The rows differ: each block changes the prediction.
    assert not torch.allclose(lens["probs"][0], lens["probs"][-1])


def test_lens_numbers_beside_the_figure_are_the_lens_own(tiny, tmp_path):
    model, tok = tiny
    prompt = "the cat sat on"
    png = layer_predictions_figure(model, tok, prompt, tmp_path / "layer_predictions.png")
    lines = png.with_suffix(".md").read_text(encoding="utf-8").splitlines()
    lens = logit_lens(model, tok, prompt)
    ids = lens["ids"]
    right = lens["top1"][:, :-1] == ids[1:]  # (L + 1, T - 1)
    rows = [line for line in lines if line.startswith("- **")]
    names = ["x₀ embeddings", "x₁ after layer 0", "x₂ after layer 1 (output)"]
    assert len(rows) == 3
    label = {" ": "␣"}
    for r, (row, name) in enumerate(zip(rows, names, strict=True)):
        assert row.startswith(f"- **{name}**: {int(right[r].sum())} of {len(prompt) - 1}, "
                              f"mean p {lens['target_probs'][r].mean():.2f}")
        pairs = [f"`{label.get(prompt[c], prompt[c])}→{label.get(prompt[c + 1], prompt[c + 1])}`"
                 for c in range(len(prompt) - 1) if right[r, c]]
        assert row.endswith(": " + " ".join(pairs) if pairs else "")
    gains = ", ".join(f"layer {r - 1} {int(right[r].sum() - right[r - 1].sum()):+d}"
                      for r in (1, 2))
    assert f"Change in right guesses made by each layer: {gains}." in lines[-1]


def test_position_numbers_beside_the_figure_are_the_diagonal_means(tiny, tmp_path):
    model, _ = tiny
    png = position_similarity_figure(model, tmp_path / "position_similarity.png")
    text = png.with_suffix(".md").read_text(encoding="utf-8")
    sim = position_similarity(model)
    means = [sim.diagonal(d).mean().item() for d in range(1, 20)]
    row = next(line for line in text.splitlines() if line.startswith("| mean |"))
    assert row == "| mean | " + " | ".join(f"{v:.2f}" for v in means[:8]) + " |"
    peak = max(range(19), key=means.__getitem__)
    assert f"largest at $d = {peak + 1}$ ({means[peak]:.2f})" in text
    assert f"{sum(v < 0 for v in means)} of the 19 distances have a negative mean" in text
    steady = all(a >= b for a, b in zip(means[:8], means[1:8], strict=False))
    assert ("falls steadily" in text) == steady


def test_position_similarity_is_cosine_similarity(tiny):
    model, _ = tiny
    sim = position_similarity(model)
    assert sim.shape == (20, 20)
    assert torch.allclose(sim.diagonal(), torch.ones(20), atol=1e-5)
    assert torch.allclose(sim, sim.T)
    w = model.transformer.wpe.weight
    assert math.isclose(sim[2, 5].item(), F.cosine_similarity(w[2], w[5], dim=0).item(),
                        abs_tol=1e-5)


@pytest.mark.parametrize(
    ("prompt", "fragment"),
    [("", "empty"), ("the cat sat on the mat.", "block_size=20"), ("the dog", "'d'"),
     ("t", "at least 2 characters")],
)
def test_bad_prompt_for_the_figures_is_a_user_error(tiny, tmp_path, prompt, fragment):
    model, tok = tiny
    with pytest.raises(UserError, match=fragment):
        write_figures(model, tok, prompt, tmp_path / "fig")
    assert not (tmp_path / "fig").exists()  # nothing half-drawn


def test_missing_or_broken_log_is_a_user_error(tiny, tmp_path):
    model, tok = tiny
    with pytest.raises(UserError, match="no training log"):
        write_figures(model, tok, EN_PROMPT, tmp_path / "fig", log_path=tmp_path / "log.jsonl")
    (tmp_path / "log.jsonl").write_text('{"step": 0, "train": 4.1}\n', encoding="utf-8")
    with pytest.raises(UserError, match="line 1"):
        loss_figure(tmp_path / "log.jsonl", tmp_path / "loss.png")
    assert not (tmp_path / "fig").exists()


def test_checkpoint_falls_back_from_best_to_latest(tmp_path):
    best = tmp_path / "best.pt"
    assert default_checkpoint(best) == best  # neither exists: load_model will say so
    (tmp_path / "ckpt.pt").touch()
    assert default_checkpoint(best) == tmp_path / "ckpt.pt"
    best.touch()
    assert default_checkpoint(best) == best


# --- explain_head ------------------------------------------------------------------------


@pytest.mark.parametrize(("layer", "head", "prompt"), [(0, 0, "the cat"), (1, 1, "小猫坐 cat")])
def test_explain_head_is_one_consistent_computation(tiny, layer, head, prompt):
    model, tok = tiny
    r = explain_head(model, tok, prompt, layer, head)
    T, hs = len(prompt), 8
    assert r["tokens"] == list(prompt) and r["ids"].tolist() == tok.encode(prompt)
    assert r["x"].shape == (T, 16) and r["head_size"] == hs
    for name in ("q", "k", "v", "heads_out"):
        assert r[name].shape == (T, hs)
    # x is the input of this layer's attention: projecting it gives this head's q, k, v.
    W = model.transformer.h[layer].attn.c_attn.weight.detach()  # (3C, C): q, k, v rows
    for n, name in enumerate(("q", "k", "v")):
        rows = slice(n * 16 + head * hs, n * 16 + (head + 1) * hs)
        assert torch.allclose(r["x"] @ W[rows].T, r[name], atol=1e-5), name
    assert torch.allclose(r["scores"], r["q"] @ r["k"].T, atol=1e-5)
    assert torch.allclose(r["scaled"], r["scores"] / math.sqrt(hs))
    above = torch.ones(T, T, dtype=torch.bool).triu(1)
    assert torch.isneginf(r["masked"][above]).all()
    assert torch.isfinite(r["masked"][~above]).all()
    assert torch.equal(r["masked"][~above], r["scaled"][~above])
    assert torch.allclose(F.softmax(r["masked"], dim=-1), r["weights"])
    assert torch.allclose(r["weights"].sum(dim=-1), torch.ones(T))
    assert torch.allclose(r["weights"] @ r["v"], r["heads_out"], atol=1e-6)
    # The same weights the attention figures draw.
    maps = model.attention_maps(torch.tensor([tok.encode(prompt)]))
    assert torch.allclose(maps[0, layer, head], r["weights"])


def test_format_explanation_shows_every_step(tiny):
    model, tok = tiny
    text = format_explanation(explain_head(model, tok, "小猫 cat", 1, 0), dims=4)
    for fragment in ("layer 1, head 0", "x = ln_1", "q = x @ W_q", "k = x @ W_k", "v = x @ W_v",
                     "scores = q @ k^T", "scaled = scores / sqrt(hs)", "masked", "-inf",
                     "weights = softmax", "row sum", "output = weights @ v",
                     "first 4 of 8 dims shown", "query position i", "key position j",
                     "i=0 小", "i=2 ␣"):
        assert fragment in text, fragment
    rows = [line for line in text.splitlines() if line.startswith("  i=")]
    assert sum(line.count("-inf") for line in rows) == 6 * 5 // 2  # above the diagonal, 6 x 6


def test_format_explanation_reads_where_each_row_looks(tiny):
    model, tok = tiny
    r = explain_head(model, tok, "the cat", 1, 1)
    w = r["weights"]
    w[1:] = 0.0  # rows 1..6: on j = i-1 in rows 1, 2, 3; on j = i in 4, 5; on j = 0 in 6
    for i, j in ((1, 0), (2, 1), (3, 2), (4, 4), (5, 5), (6, 0)):
        w[i, j] = 1.0
    w[2, 0] = 0.25
    text = format_explanation(r)
    assert ("the largest weight of row i (i = 1..6) is on j = i-1 (the previous character) in "
            "3 rows, on j = i (itself) in 2, elsewhere in 1;") in text
    assert "weights on j = i-1: 1.00 1.00 1.00 0.00 0.00 0.00" in text


@pytest.mark.parametrize(
    ("layer", "head", "prompt", "fragment"),
    [(2, 0, "the", "use --layer 0..1"), (-1, 0, "the", "--layer -1"), (0, 2, "the", "2 heads"),
     (0, 0, "the cat sat on the mat.", "block_size=20"), (0, 0, "the cat sat on the", "16"),
     (0, 0, "the dog", "'d'"), (0, 0, "", "empty")],
)
def test_explain_head_bad_input_is_a_user_error(tiny, layer, head, prompt, fragment):
    model, tok = tiny
    with pytest.raises(UserError, match=fragment):
        explain_head(model, tok, prompt, layer, head)


# --- the command lines, end to end -------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("stage5_vis")
    data = out / "tiny.txt"
    data.write_text(TEXT, encoding="utf-8")
    train_main(["--data", str(data), "--max-iters", "20", "--n-layer", "1", "--n-embd", "16",
                "--n-head", "2", "--block-size", "8", "--batch-size", "4", "--eval-iters", "1",
                "--eval-interval", "10", "--sample-tokens", "5", "--device", "cpu",
                "--out-dir", str(out / "run")])
    return out / "run" / "best.pt"


@pytest.mark.slow
def test_clis_end_to_end(tiny_checkpoint):
    run = tiny_checkpoint.parent
    # Start all three first: their torch imports overlap. One thread each: they share the cores.
    env = module_env(OMP_NUM_THREADS="1")
    vis = start_module("stage5_gpt.visualize", "--ckpt", tiny_checkpoint, "--device", "cpu",
                       env=env)
    ins = start_module("stage5_gpt.inspect", "--ckpt", tiny_checkpoint, "--prompt", "小猫 cat",
                       "--layer", "0", "--head", "1", "--device", "cpu", env=env)
    bad_head = start_module("stage5_gpt.inspect", "--ckpt", tiny_checkpoint, "--head", "7",
                            env=env)

    r = finish(vis)
    assert r.returncode == 0, r.stderr
    assert "missing from font" not in r.stderr
    printed = [Path(line.strip()) for line in r.stdout.splitlines() if line.endswith((".png", ".md"))]
    assert sorted(p.name for p in printed) == sorted(n for n in FIGURES if n != "attention_layer1.png")
    for p in printed:
        assert p.parent == run / "figures"
        if p.suffix == ".png":
            assert_png(p)
        else:
            assert "of 7, mean p" in p.read_text(encoding="utf-8") or "| mean |" in p.read_text(
                encoding="utf-8")

    r = finish(ins)
    assert r.returncode == 0, r.stderr
    assert "layer 0, head 1" in r.stdout and "i=0 小" in r.stdout and "row sum" in r.stdout

    r = finish(bad_head)
    assert r.returncode == 2
    assert_user_error(r.stderr, "--head 7", "0..1")
