"""Stage 5: the figures (python -m stage5_gpt.visualize), what the GPT learned
(python -m stage5_gpt.lens) and the head inspector (python -m stage5_gpt.inspect).

What is checked, as behaviour:

- every figure function writes a real PNG, for an English and a Chinese prompt,
  without matplotlib's "Glyph ... missing from font(s)" warning;
- the logit lens's last row is exactly the model's own prediction, and the numbers the
  lens CLI prints (right guesses per row, similarity by distance) are the lens's own;
- the lens figures print the words of the labels dict they are given (another language);
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
import re
import warnings
from contextlib import contextmanager
from pathlib import Path

import matplotlib.text
import pytest
import torch
from conftest import assert_user_error, finish, module_env, start_module
from torch.nn import functional as F

from stage5_gpt import lens
from stage5_gpt.checkpoint import default_checkpoint
from stage5_gpt.errors import UserError
from stage5_gpt.inspect import explain_head, format_explanation
from stage5_gpt.lens import (
    LABELS,
    layer_predictions_figure,
    logit_lens,
    position_similarity,
    position_similarity_figure,
    similarity_by_distance,
)
from stage5_gpt.model import GPT, GPTConfig
from stage5_gpt.tokenizer import CharTokenizer
from stage5_gpt.train import main as train_main
from stage5_gpt.visualize import loss_figure, write_figures
from tools.docs.pages.stage5 import LENS_ZH  # the lens's words in Chinese: the docs' labels

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
# English and Chinese, nothing outside the fonts (no emoji): a missing glyph fails a test.
TEXT = "the cat sat on the mat.\n小猫坐在垫子上。\n你好，世界！hello\n" * 20
EN_PROMPT = "the cat sat"
ZH_PROMPT = "小猫坐在垫子上。你好"
MIXED_PROMPT = "小猫 sat on 垫子"  # Chinese, Latin and a space (drawn as ␣)
FIGURES = ["attention_grid.png", "attention_layer0.png", "attention_layer1.png", "loss.png"]
LENS_FIGURES = ["layer_predictions.png", "position_similarity.png"]


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


def test_every_figure_is_a_png_with_every_glyph(tiny, tmp_path, capsys):
    model, tok = tiny
    log = write_log(tmp_path / "log.jsonl")
    with glyphs_must_exist():
        paths = write_figures(model, tok, MIXED_PROMPT, tmp_path / "fig", log_path=log)
        lens_paths = lens.write_figures(model, tok, MIXED_PROMPT, tmp_path / "lens")
    assert paths == [tmp_path / "fig" / name for name in FIGURES]
    assert lens_paths == [tmp_path / "lens" / name for name in LENS_FIGURES]
    assert sorted(p.name for p in (tmp_path / "fig").iterdir()) == sorted(FIGURES)
    for p in paths + lens_paths:
        assert_png(p)
    assert "right guesses" in capsys.readouterr().out


def test_per_layer_attention_figures_are_readable_at_page_width(tiny, tmp_path):
    """One figure per layer, heads two to a row, 6.4 inches wide (about 690 px on the page)."""
    from PIL import Image

    model, tok = tiny
    write_figures(model, tok, EN_PROMPT, tmp_path / "fig")
    for name in ("attention_grid.png", "attention_layer0.png", "attention_layer1.png"):
        w, h = Image.open(tmp_path / "fig" / name).size
        assert w == 1024, (name, w)  # 6.4 in at 160 dpi: shown at ~0.67x, fonts stay >= 9 px
        assert h < 1.6 * w, (name, h)


@pytest.fixture
def drawn(monkeypatch) -> dict[str, list[str]]:
    """Every text of each lens figure (titles, axis labels, ticks, cells), by file name."""
    figures: dict[str, list[str]] = {}
    save = lens._save

    def spy(fig, path):
        figures[Path(path).name] = [t.get_text() for t in fig.findobj(matplotlib.text.Text)
                                    if t.get_text()]
        return save(fig, path)

    monkeypatch.setattr(lens, "_save", spy)
    return figures


def test_logit_lens_last_row_is_the_models_own_prediction(tiny, tmp_path, drawn):
    model, tok = tiny
    lens_out = logit_lens(model, tok, ZH_PROMPT)
    idx = torch.tensor([tok.encode(ZH_PROMPT)])
    T, V = idx.shape[1], tok.vocab_size
    assert lens_out["probs"].shape == (3, T, V)  # embeddings + 2 layers
    with torch.no_grad():
        logits, _ = model(idx)  # the fast path, as generate() runs it
    assert torch.allclose(lens_out["probs"][-1], F.softmax(logits[0], dim=-1), atol=1e-6)
    assert torch.equal(lens_out["top1"][-1], logits[0].argmax(dim=-1))
    assert torch.equal(lens_out["ids"], idx[0])
    # target_probs[l, t] is the probability of the character at t + 1; the last position has none.
    assert lens_out["target_probs"].shape == (3, T - 1)
    for t in range(T - 1):
        assert lens_out["target_probs"][1, t] == lens_out["probs"][1, t, idx[0, t + 1]]
    assert torch.equal(lens_out["right"], lens_out["top1"][:, :-1] == idx[0, 1:])
    # Row 0 reads the embeddings x_0 through ln_f and lm_head.
    t = model.transformer
    with torch.no_grad():
        x0 = t.wte(idx[0]) + t.wpe(torch.arange(T))
        torch.testing.assert_close(lens_out["probs"][0],
                                   F.softmax(model.lm_head(t.ln_f(x0)), dim=-1))
    # The rows differ: each block changes the prediction.
    assert not torch.allclose(lens_out["probs"][0], lens_out["probs"][-1])
    # Row l reads x_l, the stream after l blocks; layers are named by their index in h.
    layer_predictions_figure(model, tok, ZH_PROMPT, tmp_path / "layer_predictions.png")
    texts = drawn["layer_predictions.png"]
    for name in ("x₀ embeddings", "x₁ after layer 0", "x₂ after layer 1 (output)"):
        assert name in texts, name
    assert LABELS["input"] in texts and LABELS["next"] in texts  # the default labels


def test_lens_figures_print_the_words_of_the_labels_they_are_given(tiny, tmp_path, drawn):
    model, tok = tiny
    marked = {k: f"[{k}] {v}" for k, v in LABELS.items()}  # every word traceable to its key
    layer_predictions_figure(model, tok, EN_PROMPT, tmp_path / "lens.png", marked)
    position_similarity_figure(model, tmp_path / "positions.png", marked)
    used = {"lens.png": ("input", "next", "x0", "after", "output", "p", "lens"),
            "positions.png": ("i", "j", "cos", "cosine", "distance", "mean", "by_distance",
                              "positions")}
    for name, keys in used.items():
        text = "\n".join(drawn[name])
        for key in keys:
            assert f"[{key}]" in text, (name, key)
    positions = "\n".join(drawn["positions.png"])
    assert "learned position embeddings (block_size=20)" in positions  # {T} filled in
    assert "stage5_gpt: [positions]" not in positions  # {stage} filled in, in the label
    # Another language is a dict with the same keys (the default, LABELS, is English).
    with glyphs_must_exist():
        layer_predictions_figure(model, tok, ZH_PROMPT, tmp_path / "zh.png", LENS_ZH)
        position_similarity_figure(model, tmp_path / "zh_pos.png", LENS_ZH)
    assert "输入的字符" in drawn["zh.png"] and LABELS["input"] not in drawn["zh.png"]
    assert "x₁ 第 0 层之后" in drawn["zh.png"]
    # The title's colon and the bracket are the language's own: full width, no space before.
    assert "stage5_gpt：学到的位置嵌入（block_size=20）" in "\n".join(drawn["zh_pos.png"])
    assert "stage5_gpt：预测如何一层层变得清楚" in "\n".join(drawn["zh.png"])
    assert "x₂ 第 1 层之后（输出）" in drawn["zh.png"]
    assert set(LENS_ZH) == set(LABELS)


def test_lens_cli_prints_the_lens_own_numbers(tiny_checkpoint, capsys):
    """python -m stage5_gpt.lens draws both figures beside the checkpoint and prints what
    they show: right guesses per row, and the mean similarity of positions d apart."""
    lens.main(["--ckpt", str(tiny_checkpoint), "--prompt", "the cat", "--device", "cpu"])
    out = capsys.readouterr().out
    figures = tiny_checkpoint.parent / "figures"
    for name in LENS_FIGURES:
        assert_png(figures / name)
        assert f"  {figures / name}" in out.splitlines()
    from stage5_gpt.checkpoint import load_model

    model, tok, _ = load_model(tiny_checkpoint)
    right = logit_lens(model, tok, "the cat")["right"].sum(dim=1).tolist()
    assert len(right) == 2  # x0 and the one block
    assert (f"right guesses of the next character, after each block (x0 .. x1): {right} of 6"
            in out)
    near = similarity_by_distance(position_similarity(model))
    assert len(near) == 7  # block_size 8: distances 1..7
    line = next(li for li in out.splitlines() if li.startswith("mean position similarity"))
    assert line == ("mean position similarity at distance 1..8: "
                    + " ".join(f"{v:.2f}" for v in near))
    assert "prompt:     'the cat'" in out


def test_similarity_by_distance_is_the_mean_of_each_diagonal():
    sim = torch.tensor([[1.0, 0.5, -0.2, 0.1],
                        [0.5, 1.0, 0.3, 0.0],
                        [-0.2, 0.3, 1.0, 0.7],
                        [0.1, 0.0, 0.7, 1.0]])
    assert similarity_by_distance(sim) == pytest.approx([0.5, -0.1, 0.1])


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
    [("", "empty"), ("the cat sat on the mat.", "block_size=20"), ("the dog", "'d'")],
)
def test_bad_prompt_for_the_figures_is_a_user_error(tiny, tmp_path, prompt, fragment):
    model, tok = tiny
    with pytest.raises(UserError, match=fragment):
        write_figures(model, tok, prompt, tmp_path / "fig")
    assert not (tmp_path / "fig").exists()  # nothing half-drawn


@pytest.mark.parametrize(
    ("prompt", "fragment"),
    [("", "at least one character"), ("t", "at least 2 characters"),
     ("the cat sat on the mat.", "block_size=20"), ("the dog", "'d'")],
)
def test_bad_prompt_for_the_lens_is_a_user_error(tiny, tmp_path, prompt, fragment):
    model, tok = tiny
    with pytest.raises(UserError, match=fragment):
        logit_lens(model, tok, prompt)
    with pytest.raises(UserError, match=fragment):
        lens.write_figures(model, tok, prompt, tmp_path / "fig")
    assert not (tmp_path / "fig").exists()  # nothing half-drawn


def test_a_one_character_prompt_still_draws_the_attention(tiny, tmp_path):
    model, tok = tiny
    paths = write_figures(model, tok, "t", tmp_path / "fig")
    assert [p.name for p in paths] == FIGURES[:3]


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
    assert ("where each row looks: the largest weight of row i (i = 1..6) is on j = i-1 in 3 "
            "rows, j = i in 2 rows, j = i-6 in 1 row; most often i-1 (the previous character)"
            ) in text  # every offset named (a two-back head is no longer "elsewhere")
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
                       "--out-dir", run / "vis", env=env)
    lens_run = start_module("stage5_gpt.lens", "--ckpt", tiny_checkpoint, "--device", "cpu",
                            "--out-dir", run / "lens", env=env)
    ins = start_module("stage5_gpt.inspect", "--ckpt", tiny_checkpoint, "--prompt", "小猫 cat",
                       "--layer", "0", "--head", "1", "--device", "cpu", env=env)

    r = finish(vis)
    assert r.returncode == 0, r.stderr
    assert "missing from font" not in r.stderr
    printed = [Path(line.strip()) for line in r.stdout.splitlines() if line.endswith(".png")]
    # One layer: no attention_layer1; log.jsonl beside the checkpoint: loss.png.
    assert [p.name for p in printed] == ["attention_grid.png", "attention_layer0.png",
                                         "loss.png"]
    for p in printed:
        assert p.parent == run / "vis"
        assert_png(p)
    assert sorted(p.name for p in (run / "vis").iterdir()) == sorted(p.name for p in printed)

    r = finish(lens_run)
    assert r.returncode == 0, r.stderr
    assert "missing from font" not in r.stderr and "Traceback" not in r.stderr
    printed = [Path(line.strip()) for line in r.stdout.splitlines() if line.endswith(".png")]
    assert [p.name for p in printed] == LENS_FIGURES
    for p in printed:
        assert p.parent == run / "lens"
        assert_png(p)
    assert re.search(r"^right guesses of the next character, after each block \(x0 \.\. x1\): "
                     r"\[\d+, \d+\] of 7$", r.stdout, re.M), r.stdout  # an 8-character prompt
    assert re.search(r"^mean position similarity at distance 1\.\.8:( -?\d\.\d\d){7}$",
                     r.stdout, re.M), r.stdout

    r = finish(ins)
    assert r.returncode == 0, r.stderr
    assert "layer 0, head 1" in r.stdout and "i=0 小" in r.stdout and "row sum" in r.stdout


def test_inspect_cli_bad_head_is_a_clean_error(tiny_checkpoint, capsys):
    from stage5_gpt.inspect import main as inspect_main

    with pytest.raises(SystemExit) as e:
        inspect_main(["--ckpt", str(tiny_checkpoint), "--head", "7", "--device", "cpu"])
    assert e.value.code == 2
    assert_user_error(capsys.readouterr().err, "--head 7", "0..1")
