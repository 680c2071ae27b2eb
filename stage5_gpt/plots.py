"""Figures as PNG files, with fonts that can draw Chinese.

matplotlib's default font (DejaVu Sans) has no Chinese glyphs and draws empty
boxes. We use Noto Sans CJK: the static faces of the system's font (Debian's
``fonts-noto-cjk``, found by fontconfig) when there are any, else the variable
font that the ``manimgx-fonts-cjk`` package ships, so a fresh ``pip install`` is
all a reader needs; another Simplified Chinese font found by fontconfig is the
last resort.
"""

from __future__ import annotations

import dataclasses
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
# Every word the figures print: pass another dict (same keys) to label them in another language.
LABELS = {"step": "step", "loss": "cross-entropy loss (nats)", "train": "train", "val": "val",
          "key": "key j (attended to)", "query": "query i (predicting after)",
          "key_pos": "key position j (attended to)", "query_pos": "query position i",
          "weight": "attention weight", "grid": "{stage}: attention for\n{prompt}",
          "panel": "layer {i}, head {j}", "head": "head {j}",
          "layer": "layer {i} of 0..{last}: attention for\n{prompt}"}


def _fontconfig(command: str, pattern: str) -> list[Path]:
    """The font files ``fc-list`` or ``fc-match`` names for ``pattern``; [] without fontconfig."""
    if not shutil.which(command):
        return []
    out = subprocess.run([command, "-f", "%{file}\n", pattern],
                         capture_output=True, text=True, check=False).stdout
    return sorted({Path(line) for line in out.splitlines() if line})


def _packaged() -> list[Path]:
    try:
        return [Path(str(importlib.resources.files("manimgx_fonts_cjk") / "NotoSansCJK-VF.otf.ttc"))]
    except ModuleNotFoundError:
        return []


def _weight(face: font_manager.FontEntry) -> int:
    w = face.weight
    return w if isinstance(w, int) else font_manager.weight_dict.get(w, 400)


def _add_missing_weights(family: str) -> None:
    """Give ``family`` a normal (400) and a bold (700) face if it lacks them.

    matplotlib warns "findfont: Failed to find font weight normal" each time it
    looks for a weight that a family does not have. The variable font registers
    as one face of weight 100: matplotlib can only draw a variable font's default
    instance, which for Noto Sans CJK is Thin. That face stands in for normal and
    bold text too (Chinese looks the same in both), and nothing is printed.
    """
    faces = [f for f in font_manager.fontManager.ttflist if f.name == family]
    for weight in (400, 700):
        if faces and all(_weight(f) != weight for f in faces):
            nearest = min(faces, key=lambda f: abs(_weight(f) - weight))
            font_manager.fontManager.ttflist.append(dataclasses.replace(nearest, weight=weight))


def _register(paths: list[Path]) -> str | None:
    """Add the font files to matplotlib; the Simplified Chinese family among them, if any."""
    files = [str(p) for p in paths if p.is_file()]
    known = {f.fname for f in font_manager.fontManager.ttflist}
    for file in list(files):
        if file not in known:
            try:
                font_manager.fontManager.addfont(file)
            except (RuntimeError, OSError):  # matplotlib < 3.11 cannot read the variable font
                files.remove(file)  # collection ("SFNT font table missing"): the next source
    names = {f.name for f in font_manager.fontManager.ttflist if f.fname in files}
    family = CJK_FAMILY if CJK_FAMILY in names else next(
        (n for n in sorted(names) if n.endswith(" SC")), None)
    if family:
        _add_missing_weights(family)
    return family


@functools.cache
def use_cjk_font() -> str | None:
    """Register a CJK font and put it after DejaVu Sans in matplotlib's list. Returns its family."""
    sources = (
        lambda: _fontconfig("fc-list", f":family={CJK_FAMILY}"),  # static weights, if installed
        _packaged,  # the variable font from PyPI: Thin only, to matplotlib
        lambda: _fontconfig("fc-match", ":lang=zh-cn"),  # whatever else the system has
    )
    for source in sources:
        family = _register(source())
        if family:
            # DejaVu Sans first keeps Latin text looking as usual; CJK falls through to Noto.
            plt.rcParams["font.family"] = ["DejaVu Sans", family]
            plt.rcParams["axes.unicode_minus"] = False
            return family
    return None


def plot_losses(history: list[dict], path: str | Path, title: str = "loss",
                labels: dict[str, str] = LABELS) -> Path:
    """Train and val loss against the step; ``history`` rows have step/train/val."""
    use_cjk_font()
    fig, ax = plt.subplots(figsize=(6, 4), dpi=120)
    steps = [h["step"] for h in history]
    ax.plot(steps, [h["train"] for h in history], label=labels["train"])
    ax.plot(steps, [h["val"] for h in history], label=labels["val"])
    ax.set_xlabel(labels["step"])
    ax.set_ylabel(labels["loss"])
    # Title and legend at the top left, above the curves: a phone shows the left part of a
    # wide figure first, and no line runs under the legend.
    ax.set_title(title, x=0, ha="left", pad=22)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower left", bbox_to_anchor=(0, 1), ncols=2, frameon=False, borderaxespad=0.2,
              borderpad=0, handlelength=1.5, columnspacing=1.2)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


def token_label(token: str) -> str:
    """Make invisible characters visible on an axis; name those the font lacks (emoji).
    A token is one character here, and a piece of a word in GPT-2's BPE."""
    return "".join(f"U+{ord(c):X}" if ord(c) > 0xFFFF  # Noto CJK has no glyph out there
                   else {"\n": "⏎", " ": "␣", "\t": "⇥"}.get(c, c) for c in token)


def quoted(text: str) -> str:
    """Text in curly quotes (a prompt may hold straight ones) for a figure's title, each
    newline shown as ⏎, as on the axes."""
    return "“" + text.replace("\n", token_label("\n")) + "”"


# Figures 6.4 inches wide, shown in the docs' ~690 px column: 1 pt of text is about 1.5 px.
WIDTH = 6.4


def plot_attention(maps, path: str | Path, title: str, names: list[list[str]],
                   chars: list[str] | None = None, labels: dict[str, str] = LABELS) -> Path:
    """A grid of attention heatmaps on one shared colour scale, 0 to 1.

    ``maps`` is (rows, cols, T, T), e.g. (n_layer, n_head, T, T); panel [r][c] is
    titled ``names[r][c]``, and its entry [i, j] is how much query position i
    (y axis) attends to key position j (x axis). ``chars``: one tick per
    character; None: a few position numbers, for an overview of many panels.
    """
    use_cjk_font()
    maps = maps.detach().float().cpu()
    R, Cn, T, _ = maps.shape
    fig, axes = plt.subplots(R, Cn, figsize=(WIDTH, WIDTH / Cn * R * 0.9 + 0.9), dpi=160,
                             squeeze=False, sharex=True, sharey=True, constrained_layout=True)
    ticks = range(T) if chars else range(0, T, max(1, -(-T // 3)))
    tick_labels = [token_label(chars[j]) for j in ticks] if chars else None
    for r in range(R):
        for c in range(Cn):
            ax = axes[r][c]
            im = ax.imshow(maps[r, c].numpy(), cmap="viridis", vmin=0.0, vmax=1.0)
            ax.set_title(names[r][c], fontsize=12 if chars else 10)
            ax.set_xticks(ticks, tick_labels)
            ax.set_yticks(ticks, tick_labels)
            ax.tick_params(length=0, labelsize=min(9.5, 150 / T) if chars else 9)  # no overlap at T = 24
    if chars:
        for ax in axes[-1]:
            ax.set_xlabel(labels["key"], fontsize=10)
        for row in axes:
            row[0].set_ylabel(labels["query"], fontsize=10)
    else:  # small panels: one label for the whole grid
        fig.supxlabel(labels["key_pos"], fontsize=10)
        fig.supylabel(labels["query_pos"], fontsize=10)
    fig.colorbar(im, ax=axes, shrink=0.8).set_label(labels["weight"], fontsize=10)
    fig.suptitle(title, fontsize=12)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path
