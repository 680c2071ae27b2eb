"""Figures draw Chinese with no font warnings, whichever CJK font is available.

matplotlib reports font trouble on stderr, once per process: "findfont: Failed
to find font weight ..." (a logging message) when a family lacks the weight asked
for, and "Glyph ... missing from font(s)" (a warning) when it draws an empty box.
So every check runs in a fresh interpreter and reads its stderr.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO_ROOT, module_env

# argv: the stage, the output folder, "package" to hide the system's fonts.
CHILD = r"""
import shutil, sys
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

history = [{"step": s, "train": 3.0 - s / 10, "val": 3.1 - s / 12} for s in range(0, 30, 10)]
plots.plot_losses(history, out / "loss.png", title="损失 loss")
if hasattr(plots, "plot_attention"):
    import torch
    maps = torch.softmax(torch.randn(2, 2, 5, 5), dim=-1)
    plots.plot_attention(maps, list("你好 \n🐍"), out / "attention.png", title="注意力",
                         row_names=["层 0", "层 1"], col_names=["头 0", "头 1"])
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


@pytest.mark.parametrize("stage", ["stage2_bigram", "stage3_attention"])
def test_figures_print_no_font_warnings(stage, tmp_path):
    run = draw(stage, tmp_path)
    assert chosen(run)["family"] == "Noto Sans CJK SC"
    if stage == "stage3_attention":
        assert (tmp_path / "attention.png").is_file()


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
