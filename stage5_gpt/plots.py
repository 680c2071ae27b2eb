"""Figures as PNG files, with fonts that can draw Chinese.

matplotlib's default font (DejaVu Sans) has no Chinese glyphs and draws empty
boxes. We register Noto Sans CJK, which the ``manimgx-fonts-cjk`` package ships,
so a fresh ``pip install`` is all a reader needs; a system font found by
fontconfig is the fallback.
"""

from __future__ import annotations

import functools
import importlib.resources
import shutil
import subprocess
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no window: works on servers and in tests
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib import font_manager  # noqa: E402

CJK_FAMILY = "Noto Sans CJK SC"


@functools.cache
def use_cjk_font() -> str | None:
    """Register a CJK font and put it first in matplotlib's list. Returns its family."""
    candidates = []
    try:
        candidates.append(importlib.resources.files("manimgx_fonts_cjk") / "NotoSansCJK-VF.otf.ttc")
    except ModuleNotFoundError:
        pass
    if shutil.which("fc-match"):
        out = subprocess.run(["fc-match", "-f", "%{file}", ":lang=zh-cn"],
                             capture_output=True, text=True, check=False).stdout
        if out:
            candidates.append(Path(out))
    for path in candidates:
        if not Path(str(path)).is_file():
            continue
        font_manager.fontManager.addfont(str(path))
        names = {f.name for f in font_manager.fontManager.ttflist if f.fname == str(path)}
        family = CJK_FAMILY if CJK_FAMILY in names else next(
            (n for n in sorted(names) if n.endswith(" SC")), None)
        if family:
            # DejaVu Sans first keeps Latin text looking as usual; CJK falls through to Noto.
            plt.rcParams["font.family"] = ["DejaVu Sans", family]
            plt.rcParams["axes.unicode_minus"] = False
            return family
    return None


def plot_losses(history: list[dict], path: str | Path, title: str = "loss") -> Path:
    """Train and val loss against the step; ``history`` rows have step/train/val."""
    use_cjk_font()
    fig, ax = plt.subplots(figsize=(6, 4), dpi=120)
    steps = [h["step"] for h in history]
    ax.plot(steps, [h["train"] for h in history], label="train")
    ax.plot(steps, [h["val"] for h in history], label="val")
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy loss (nats)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


def token_label(ch: str) -> str:
    """Make invisible characters visible on an axis; name those the font lacks (emoji)."""
    if ord(ch) > 0xFFFF:  # outside the Basic Multilingual Plane: Noto CJK has no glyph
        return f"U+{ord(ch):X}"
    return {"\n": "⏎", " ": "␣", "\t": "⇥"}.get(ch, ch)


# --8<-- [start:plot_attention]
def plot_attention(maps, labels: list[str], path: str | Path, title: str = "attention",
                   row_names: list[str] | None = None, col_names: list[str] | None = None) -> Path:
    """A grid of attention heatmaps on one shared color scale (0 to 1).

    ``maps`` is (rows, cols, T, T), e.g. (n_layer, n_head, T, T); entry [i, j] is
    how much query position i (row, y axis) attends to key position j (x axis).
    """
    use_cjk_font()
    maps = maps.detach().float().cpu()
    R, Cn, T, _ = maps.shape
    labels = [token_label(c) for c in labels]
    size = 1.2 + 0.22 * T
    fig, axes = plt.subplots(R, Cn, figsize=(size * Cn + 1.2, size * R + 0.6), dpi=110,
                             squeeze=False, constrained_layout=True)
    for r in range(R):
        for c in range(Cn):
            ax = axes[r][c]
            im = ax.imshow(maps[r, c].numpy(), cmap="viridis", vmin=0.0, vmax=1.0)
            ax.set_xticks(range(T), labels, fontsize=8)
            ax.set_yticks(range(T), labels, fontsize=8)
            ax.tick_params(length=0)
            name = " ".join(n for n in ((row_names or [""] * R)[r], (col_names or [""] * Cn)[c]) if n)
            if name:
                ax.set_title(name, fontsize=9)
            if r == R - 1:
                ax.set_xlabel("key (attended to)", fontsize=8)
            if c == 0:
                ax.set_ylabel("query (predicting after)", fontsize=8)
    fig.colorbar(im, ax=axes, shrink=0.8, label="attention weight")
    fig.suptitle(title)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path
# --8<-- [end:plot_attention]
