"""The build-up of the stage-3 page (tools/docs_course_stage3.py): the four ways of
mixing the past agree, and the readings the page prints are computed, not typed."""

from __future__ import annotations

import importlib.util
import math
import re
import sys
import types
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def course():
    spec = importlib.util.spec_from_file_location("docs_course_stage3",
                                                  ROOT / "tools" / "docs_course_stage3.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["docs_course_stage3"] = module
    spec.loader.exec_module(module)
    return module


def test_loop_matmul_and_masked_softmax_compute_the_same_averages(course):
    x = torch.randn(3, 7, 5)
    loop = course.average_loop(x)
    assert torch.allclose(course.average_matmul(x), loop, atol=1e-6)
    assert torch.allclose(course.average_softmax(x), loop, atol=1e-6)
    # Row t really is the mean of rows 0..t, and nothing after t.
    assert torch.allclose(loop[:, 3], x[:, :4].mean(dim=1))
    assert torch.allclose(loop[:, 0], x[:, 0])


def test_the_averaging_weights_are_one_over_t_plus_one_left_of_the_diagonal(course):
    T = 5
    expected = torch.tril(torch.ones(T, T)) / torch.arange(1, T + 1)[:, None]
    for form in (course.average_loop, course.average_matmul, course.average_softmax):
        assert torch.allclose(course.weights_of(form, T), expected), form.__name__


def test_self_attention_with_equal_scores_is_the_average_of_the_past(course):
    x = torch.randn(2, 6, 4)
    zero = torch.zeros(4, 4)
    out, wei = course.self_attention(x, zero, zero, torch.eye(4))
    assert torch.allclose(out, course.average_softmax(x), atol=1e-6)
    assert torch.allclose(wei[0], course.weights_of(course.average_matmul, 6))


def test_self_attention_weights_depend_on_the_data_and_never_on_the_future(course):
    torch.manual_seed(0)
    x = torch.randn(1, 6, 4)
    W_q, W_k, W_v = (torch.randn(4, 3) for _ in range(3))
    out, wei = course.self_attention(x, W_q, W_k, W_v)
    assert out.shape == (1, 6, 3) and wei.shape == (1, 6, 6)
    assert torch.allclose(wei.sum(-1), torch.ones(1, 6))
    assert (wei[0].triu(1) == 0).all()
    assert not torch.allclose(wei[0], course.weights_of(course.average_matmul, 6), atol=1e-3)
    # Changing the last position changes no earlier output.
    x2 = x.clone()
    x2[0, -1] += 10.0
    out2, _ = course.self_attention(x2, W_q, W_k, W_v)
    assert torch.allclose(out2[:, :-1], out[:, :-1])
    assert not torch.allclose(out2[:, -1], out[:, -1])


def test_self_attention_is_the_stage3_head_with_the_same_weights(course):
    from stage3_attention.model import Head

    torch.manual_seed(1)
    head = Head(n_embd=6, head_size=4, block_size=8)
    x = torch.randn(2, 8, 6)
    # nn.Linear keeps its weight as (out, in): x @ W.T is the layer.
    out, wei = course.self_attention(x, head.query.weight.T, head.key.weight.T,
                                     head.value.weight.T)
    with torch.no_grad():
        assert torch.allclose(out, head(x), atol=1e-6)
    assert torch.allclose(wei, head.last_attention, atol=1e-6)


def test_the_example_checks_fail_when_a_form_is_wrong(course, monkeypatch):
    course.example()  # the job's own checks pass on the real functions
    monkeypatch.setattr(course, "average_matmul", lambda x: x)  # "forgets" to average
    with pytest.raises(AssertionError, match="loop vs matmul"):
        course.example()


def test_the_trained_head_reading_counts_distances_and_heaviest_weights(course):
    # Row i puts 0.7 on itself and 0.3 on i - 1 (row 0: all on itself).
    T = 5
    maps = torch.diag(torch.full((T,), 0.7)) + torch.diag(torch.full((T - 1,), 0.3), -1)
    maps[0, 0] = 1.0
    r = course.attention_reading(maps, "ab cd")
    assert r["by_distance"][0] == pytest.approx((1.0 + 0.7 * 4) / 5)
    assert r["by_distance"][1] == pytest.approx(0.3)
    assert r["by_distance"][2] == 0.0
    assert r["top"] == [0] * T
    assert r["flat"] == 1 and r["flat_max"] == pytest.approx(0.7)
    log = [{"step": 0, "train": math.log(60), "val": math.log(60)},
           {"step": 100, "train": 2.0, "val": 2.1}]
    loss, head = course.reading_text(r, {"steps": 100}, {"val_loss": 2.1},
                                     log, {"val_loss": 2.3, "steps": 50}, 60)
    assert "2.1000" in loss and "2.3000" in loss and "0.2000 lower" in loss
    assert "0.76 at $d = 0$" in head and "5 times at $d = 0$" in head
    # A head that looks far back contradicts the page's sentence: the job stops.
    far = torch.zeros(T, T)
    far[:, 0] = 1.0
    with pytest.raises(AssertionError, match="mostly looks at the current character"):
        course.reading_text(course.attention_reading(far, "ab cd"), {"steps": 100},
                            {"val_loss": 2.1}, log, {"val_loss": 2.3, "steps": 50}, 60)


def _reading(course):
    """A head that puts 0.7 on the current character and 0.3 on the one before, and a
    log whose validation loss turns back up after step 100 (as on the small Chinese corpus)."""
    T = 5
    maps = torch.diag(torch.full((T,), 0.7)) + torch.diag(torch.full((T - 1,), 0.3), -1)
    maps[0, 0] = 1.0
    log = [{"step": 0, "train": math.log(315), "val": math.log(315)},
           {"step": 200, "train": 2.0, "val": 3.3}]
    metrics = {"steps": 200, "train_loss": 2.0, "val_loss": 3.3, "best_val_loss": 3.1,
               "best_val_step": 100, "params": 24571}
    bigram = {"steps": 300, "val_loss": 3.25, "best_val_loss": 3.05, "best_val_step": 90,
              "params": 99225}
    return course.attention_reading(maps, "小明\n上学"), log, metrics, bigram


def test_the_chinese_readings_carry_the_chinese_models_numbers(course):
    r, log, metrics, bigram = _reading(course)
    loss, head = course.reading_text_zh(r, metrics, log, bigram, 315, 32)
    # Overfitting is named, with the best and the last validation loss.
    assert "第 100 步降到最低的 3.1000" in loss and "回升到 3.3000" in loss and "过拟合" in loss
    # The attention model's best is above the bigram's here: the text must not claim otherwise.
    assert "反而比它高 0.0500" in loss and "99,225" in loss and "24,571" in loss
    assert "比它低" not in loss
    bigram_worse = {**bigram, "best_val_loss": 3.2}
    better, _ = course.reading_text_zh(r, metrics, log, bigram_worse, 315, 32)
    assert "比它低 0.1000" in better and "反而" not in better
    # The prompt is shown on one line, its newline as the figure's ⏎.
    assert "`小明⏎上学`（⏎ 表示换行）" in head and "共 5 个字符" in head
    assert "0.76（$d = 0$）" in head and "5 行落在 $d = 0$" in head
    # No English sentence: only code, math, terms in parentheses, "logits" and a link target.
    prose = re.sub(r"`[^`]*`|\$[^$]*\$|（[A-Za-z ]+）|\]\([^)]*\)|logits", "", loss + head)
    assert not re.search(r"[A-Za-z]{3,}", prose), prose


def test_the_chinese_reading_stops_when_the_head_looks_far_back(course):
    r, log, metrics, bigram = _reading(course)
    far = torch.zeros(5, 5)
    far[:, 0] = 1.0
    with pytest.raises(AssertionError, match="mostly looks at the current character"):
        course.reading_text_zh(course.attention_reading(far, "小明\n上学"), metrics, log,
                               bigram, 315, 32)


def test_both_editions_of_the_sinusoidal_reading_quote_the_same_numbers(course):
    n = {"T": 32, "C": 32, "w0": 6.283, "w8": 62.8, "w24": 6283.2, "wlast": 35333.0,
         "first": 1.0, "last": 0.99998, "near": 0.96, "low": 0.5, "d_low": 16, "slow": 0.99}
    table = ["| 1 | 0.96 |", "| 16 | 0.50 |"]
    en, zh = course.sinusoidal_text(n, table), course.sinusoidal_text_zh(n, table)
    numbers = re.compile(r"\d+(?:[.,]\d+)*")
    assert sorted(numbers.findall(en)) == sorted(numbers.findall(zh))
    assert "| 距离 $d$ | 平均余弦相似度 |" in zh and "| 16 | 0.50 |" in zh


def test_the_chinese_tables_count_the_chinese_vocabulary(course, tmp_path, monkeypatch):
    from stage3_attention.data import load_text
    from stage3_attention.tokenizer import CharTokenizer

    written = {}
    fake = types.SimpleNamespace(write=lambda name, text: written.__setitem__(name, text))
    course.shapes(fake, "zh")
    V = CharTokenizer.from_text(load_text("zh")).vocab_size
    assert set(written) == {"stage3_shapes_zh.md", "stage3_params_zh.md"}
    assert f"$V = {V}$（中文语料）" in written["stage3_shapes_zh.md"]
    assert f"`(4, 8, {V})`" in written["stage3_shapes_zh.md"]
    # The total is the one the Chinese training output reports on its first line.
    total = V * 32 + 32 * 32 + 3 * 32 * 32 + 32 * V + V
    assert f"| **合计** | | | **{total:,}** |" in written["stage3_params_zh.md"]


def test_a_reading_that_would_not_match_the_pages_run_stops_the_job(course, tmp_path):
    kept = "threads: 2 (ms per step: 1: 3.0, 2: 2.0)\nstep     0: train loss 5.7, val loss 5.7\n"
    (tmp_path / "t.txt").write_text(kept, encoding="utf-8")
    stale: list[str] = []
    fake = types.SimpleNamespace(GEN=tmp_path, stale_jobs=lambda h, m: stale,
                                 input_hashes=dict, read_manifest=dict)
    assert course.threads_of(fake, "t.txt") == "2"
    course.same_run(fake, "threads: 1\nstep     0: train loss 5.7, val loss 5.7\n", "t.txt", "j")
    other = "step     0: train loss 5.7, val loss 5.8\n"
    with pytest.raises(SystemExit, match="differ from t.txt"):
        course.same_run(fake, other, "t.txt", "j")
    stale.append("j")  # the page's run is about to be made again: only a note
    course.same_run(fake, other, "t.txt", "j")
