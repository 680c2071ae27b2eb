"""Figures draw Chinese with no font warnings, whichever CJK font is available, and
print the words of the labels dict they are given.

matplotlib reports font trouble on stderr, once per process: "findfont: Failed
to find font weight ..." (a logging message) when a family lacks the weight asked
for, and "Glyph ... missing from font(s)" (a warning) when it draws an empty box.
So every check runs in a fresh interpreter and reads its stderr.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO_ROOT, module_env

# argv: the stage, the output folder, "package" to hide the system's fonts.
CHILD = r"""
import json, shutil, sys
from pathlib import Path

stage, out, mode = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
if mode == "package":  # no fontconfig, and no system Noto Sans CJK that matplotlib found itself
    shutil.which = lambda *a, **k: None
import importlib
plots = importlib.import_module(stage + ".plots")
from matplotlib import font_manager
if mode == "package":
    font_manager.fontManager.ttflist = [
        f for f in font_manager.fontManager.ttflist if not f.name.startswith("Noto Sans CJK")]

family = plots.use_cjk_font()
print("family", family)
for weight in ("normal", "bold"):
    prop = font_manager.FontProperties(family=family, weight=weight)
    print(weight, font_manager.fontManager.findfont(prop, fallback_to_default=False))

figures, close = [], plots.plt.close
def keep(fig=None):  # look at each figure after the plot function closed it
    figures.append(fig)
    close(fig)
plots.plt.close = keep

zh = dict(plots.LABELS, step="步数", loss="交叉熵损失（奈特）", train="训练", val="验证")
if "key" in zh:
    zh.update(key="键 j（被关注）", query="查询 i（在它之后预测）", key_pos="键的位置 j",
              query_pos="查询的位置 i", weight="注意力权重")
seen = {}
history = [{"step": s, "train": 3.0 - s / 10, "val": 3.1 - s / 12} for s in range(0, 30, 10)]
plots.plot_losses(history, out / "loss.png", title="损失 loss", labels=zh)
ax = figures[-1].axes[0]
seen["loss"] = [ax.get_xlabel(), ax.get_ylabel(), ax.get_title(),
                [t.get_text() for t in ax.get_legend().get_texts()]]
if hasattr(plots, "plot_attention"):
    import torch
    maps = torch.softmax(torch.randn(2, 2, 5, 5), dim=-1)
    names = [["层 0 头 0", "层 0 头 1"], ["层 1 头 0", "层 1 头 1"]]
    plots.plot_attention(maps, out / "attention.png", "注意力", names, list("你好 \n🐍"), zh)
    fig = figures[-1]
    seen["attention"] = [fig._suptitle.get_text(), [a.get_title() for a in fig.axes[:4]],
                         fig.axes[2].get_xlabel(), fig.axes[0].get_ylabel(),
                         fig.axes[-1].get_ylabel(),
                         [t.get_text() for t in fig.axes[2].get_xticklabels()],
                         [t.get_text() for t in fig.axes[0].get_yticklabels()]]
    plots.plot_attention(maps, out / "overview.png", "概览", names, labels=zh)
    fig = figures[-1]
    seen["overview"] = [fig._supxlabel.get_text(), fig._supylabel.get_text(),
                        fig.axes[-1].get_ylabel()]
print("seen", json.dumps(seen, ensure_ascii=False))
fig = plots.plt.figure(figsize=(3, 2))
fig.text(0.1, 0.6, "粗体 bold", fontweight="bold")
fig.text(0.1, 0.2, "常规 normal", fontweight="normal")
fig.savefig(out / "weights.png")
"""


def draw(stage: str, out: Path, mode: str = "default") -> subprocess.CompletedProcess[str]:
    run = subprocess.run([sys.executable, "-c", CHILD, stage, str(out), mode], cwd=REPO_ROOT,
                         env=module_env(), capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode == 0, run.stderr
    assert "findfont" not in run.stderr, run.stderr
    assert "Glyph" not in run.stderr, run.stderr
    for name in ("loss.png", "weights.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    return run


def chosen(run: subprocess.CompletedProcess[str]) -> dict[str, str]:
    return dict(line.split(" ", 1) for line in run.stdout.splitlines())


@pytest.fixture(scope="module", params=["stage2_bigram", "stage3_attention"])
def drawn(request, tmp_path_factory) -> tuple[str, Path, subprocess.CompletedProcess[str]]:
    """Each stage's figures, drawn once in a fresh interpreter with the default fonts."""
    out = tmp_path_factory.mktemp(request.param)
    return request.param, out, draw(request.param, out)


def test_figures_print_no_font_warnings(drawn):
    stage, out, run = drawn  # draw() checked stderr
    assert chosen(run)["family"] == "Noto Sans CJK SC"
    if stage == "stage3_attention":
        for name in ("attention.png", "overview.png"):
            assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_figures_print_the_words_of_the_labels_they_are_given(drawn):
    """A labels dict (here Chinese) names every axis, legend entry and colour bar."""
    stage, _, run = drawn
    seen = json.loads(chosen(run)["seen"])
    assert seen["loss"] == ["步数", "交叉熵损失（奈特）", "损失 loss", ["训练", "验证"]]
    if stage == "stage2_bigram":
        assert set(seen) == {"loss"}
        return
    title, panels, xlabel, ylabel, colorbar, ticks, yticks = seen["attention"]
    assert title == "注意力" and panels == ["层 0 头 0", "层 0 头 1", "层 1 头 0", "层 1 头 1"]
    assert (xlabel, ylabel, colorbar) == ("键 j（被关注）", "查询 i（在它之后预测）", "注意力权重")
    assert ticks == yticks == ["你", "好", "␣", "⏎", "U+1F40D"]  # space, newline, emoji shown
    assert seen["overview"] == ["键的位置 j", "查询的位置 i", "注意力权重"]


def test_the_default_labels_are_english_and_cover_every_word(tmp_path):
    from stage2_bigram import plots as plots2
    from stage3_attention import plots as plots3

    assert plots2.LABELS == {"step": "step", "loss": "cross-entropy loss (nats)",
                             "train": "train", "val": "val"}
    assert plots3.LABELS.items() >= plots2.LABELS.items()
    assert {"key", "query", "key_pos", "query_pos", "weight", "grid", "panel", "head",
            "layer"} <= plots3.LABELS.keys()


@pytest.mark.skipif(importlib.util.find_spec("manimgx_fonts_cjk") is None,
                    reason="manimgx-fonts-cjk is not installed")
def test_the_packaged_variable_font_prints_no_font_warnings(tmp_path):
    """The variable font alone: matplotlib registers it as one Thin face, weight 100."""
    faces = chosen(draw("stage3_attention", tmp_path, "package"))
    assert faces["family"] == "Noto Sans CJK SC"
    assert Path(faces["normal"]).name == Path(faces["bold"]).name == "NotoSansCJK-VF.otf.ttc"


def _system_noto() -> list[str]:
    if not shutil.which("fc-list"):
        return []
    out = subprocess.run(["fc-list", ":family=Noto Sans CJK SC", "file"],
                         capture_output=True, text=True, check=False).stdout
    return out.splitlines()


@pytest.mark.skipif(not _system_noto(), reason="no system Noto Sans CJK (apt-get install fonts-noto-cjk)")
def test_the_system_font_is_preferred_for_its_static_weights(tmp_path):
    faces = chosen(draw("stage3_attention", tmp_path))
    assert faces["family"] == "Noto Sans CJK SC"
    assert "VF" not in Path(faces["normal"]).name  # a static face: really regular, really bold
    if any("Bold" in line for line in _system_noto()):
        assert faces["normal"] != faces["bold"]
