"""gen_docs jobs for the Chinese edition: the generated prose fragments, in Chinese.

Some fragments the stage-5 page includes are sentences that read a figure or a
table out, written in English by the code that draws it (stage5_gpt/lens.py
through ``visualize``, tools/docs_course_stage5.py, tools/docs_presets.py). The
Chinese page (docs/zh/) cannot include English prose, so each fragment F.md gets a
Chinese twin F_zh.md, made here from the English one line by line: every line must
match one of the fixed sentence templates below, whose numbers and lists are
captured and put into the Chinese sentence unchanged. A line that matches no
template stops the job with a message naming the file and the line, so a change to
the English wording can never leave English on the Chinese page, or drift from it
silently: add the new template here.

    python tools/gen_docs.py --only zh_readings
    python tools/gen_docs.py --only zh_readings_shakespeare --shakespeare PATH
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

# A template: (pattern of one English line, its Chinese as a function of the match).
Template = tuple[re.Pattern, Callable[[re.Match], str]]

NUM = r"-?\d+(?:\.\d+)?"


def _t(pattern: str, render: Callable[[re.Match], str]) -> Template:
    return re.compile(pattern), render


def _row_name(name: str) -> str:
    """``x₁ after layer 0 (output)`` -> ``x₁ 第 0 层之后（输出）``."""
    m = re.fullmatch(r"(x[₀-₉]+) (embeddings|after layer (\d+))( \(output\))?", name)
    if not m:
        raise SystemExit(f"docs_zh_readings: unknown row name {name!r} in a logit-lens reading")
    what = "嵌入" if m.group(2) == "embeddings" else f"第 {m.group(3)} 层之后"
    return f"{m.group(1)} {what}" + ("（输出）" if m.group(4) else "")


def _gains(text: str) -> str:
    """``layer 0 +9, layer 1 +1`` -> ``第 0 层 +9，第 1 层 +1``."""
    parts = text.split(", ")
    out = []
    for part in parts:
        m = re.fullmatch(r"layer (\d+) ([+-]\d+)", part)
        if not m:
            raise SystemExit(f"docs_zh_readings: unknown per-layer change {part!r}")
        out.append(f"第 {m.group(1)} 层 {m.group(2)}")
    return "，".join(out)


BLANK: Template = _t(r"", lambda m: "")

# stage5_gpt/lens.py, layer_predictions_figure: the logit lens read out.
LAYER_PREDICTIONS: list[Template] = [
    BLANK,
    _t(r"Right guesses \(bold cells\) out of (\d+), row by row, the mean probability given to "
       r"the actual next character, and where the guess is right \(input → next\):",
       lambda m: f"逐行来看：{m[1]} 个位置中猜对了几个（图中的粗体格子），给真正的下一个字符的平均概率，"
                 "以及猜对的是哪些位置（输入 → 下一个字符）："),
    _t(rf"- \*\*(.+?)\*\*: (\d+) of (\d+), mean p ({NUM})(?:: (.+))?",
       lambda m: f"- **{_row_name(m[1])}**：{m[3]} 个中猜对 {m[2]} 个，平均 p {m[4]}"
                 + (f"：{m[5]}" if m[5] else "")),
    _t(r"Change in right guesses made by each layer: (.+?)\. Still wrong at the output: (.+)\.",
       lambda m: f"每一层让猜对的个数变化了多少：{_gains(m[1])}。到了输出仍然猜错的："
                 + ("没有" if m[2] == "none" else m[2]) + "。"),
]

# stage5_gpt/lens.py, position_similarity_figure: similarity by distance read out.
POSITION_SIMILARITY: list[Template] = [
    BLANK,
    _t(r"Mean cosine similarity of two positions \$d\$ apart \(the right-hand plot\), read out:",
       lambda m: "相距 $d$ 的两个位置的平均余弦相似度（右边的那幅图），读数如下："),
    _t(r"\| \$d\$ (?:\| \d+ )+\|", lambda m: m[0]),
    _t(r"\|---\|(?:---:\|)+", lambda m: m[0]),
    _t(rf"\| mean ((?:\| {NUM} )+\|)", lambda m: f"| 平均 {m[1]}"),
    _t(rf"It is largest at \$d = (\d+)\$ \(({NUM})\); (\d+) of the (\d+) distances have a "
       r"negative mean\. Over \$d = 1\.\.(\d+)\$ it (falls steadily with distance\.|does not "
       r"fall steadily: it goes up and down\.)",
       lambda m: f"它在 $d = {m[1]}$ 处最大（{m[2]}）；{m[4]} 个距离中有 {m[3]} 个的平均值为负。"
                 f"在 $d = 1..{m[5]}$ 范围内，"
                 + ("它随距离稳步下降。" if m[6].startswith("falls") else
                    "它并不随距离稳步下降，而是时升时降。")),
]


def _lr_label(label: str) -> str:
    if label == "defaults":
        return "默认设置"
    if re.fullmatch(r"--preset [\w.-]+", label):
        return f"`{label}`"
    raise SystemExit(f"docs_zh_readings: unknown settings label {label!r} in the lr table")


# tools/docs_course_stage5.py: the learning-rate schedule table.
LR_SCHEDULE: list[Template] = [
    BLANK,
    _t(r"\| settings \| `--warmup-iters` \| lr at step 0 \| peak `--lr` \| halfway \| "
       r"`--min-lr` \| steps \|",
       lambda m: "| 设置 | `--warmup-iters` | 第 0 步的学习率 | 峰值 `--lr` | 中点 | "
                 "`--min-lr` | 总步数 |"),
    _t(r"\|---\|(?:---:\|)+", lambda m: m[0]),
    _t(r"\| `(.+?)` \| (\d+) \| (\S+) \| (\S+) \| (\S+) \(step (\d+)\) \| (\S+) \| (\d+) \|",
       lambda m: f"| {_lr_label(m[1])} | {m[2]} | {m[3]} | {m[4]} | {m[5]}（第 {m[6]} 步） | "
                 f"{m[7]} | {m[8]} |"),
]

# tools/docs_presets.py: the presets on Tiny Shakespeare, val loss and seconds.
PRESETS: list[Template] = [
    BLANK,
    _t(rf"\| preset \| `--dtype` \| steps \| final val loss \| best val loss \| first eval at "
       rf"val <= ({NUM}) \| training loop \|",
       lambda m: f"| 预设 | `--dtype` | 步数 | 最终验证损失 | 最佳验证损失 | "
                 f"验证损失首次 <= {m[1]} 的评估 | 训练循环 |"),
    _t(r"\|---\|---\|(?:---:\|)+", lambda m: m[0]),
    _t(rf"\| (`[\w.-]+`) \| (\w+)(?: \((\w+)\))? \| (\d+) \| ({NUM}) \| ({NUM}) \| "
       rf"(?:(\d+) s|(not reached)) \| (\d+) s \|",
       lambda m: f"| {m[1]} | `{m[2]}`" + (f"（`{m[3]}`）" if m[3] else "")
                 + f" | {m[4]} | {m[5]} | {m[6]} | "
                 + (f"{m[7]} 秒" if m[7] else "未达到") + f" | {m[9]} 秒 |"),
]

# English fragment (relative to docs/generated/) -> its templates; F.md becomes F_zh.md.
FRAGMENTS: dict[str, list[Template]] = {
    "stage5_gpt_layer_predictions.md": LAYER_PREDICTIONS,
    "stage5_gpt_zh_layer_predictions.md": LAYER_PREDICTIONS,
    "stage5_gpt_position_similarity.md": POSITION_SIMILARITY,
    "stage5_gpt_zh_position_similarity.md": POSITION_SIMILARITY,
    "stage5_gpt_lr_schedule.md": LR_SCHEDULE,
}
# Written by the Tiny Shakespeare jobs: translated when those run (--shakespeare).
FRAGMENTS_SHAKESPEARE: dict[str, list[Template]] = {
    "stage5_gpt_presets.md": PRESETS,
}


def zh_name(name: str) -> str:
    """``stage5_gpt_lr_schedule.md`` -> ``stage5_gpt_lr_schedule_zh.md``."""
    return name[: -len(".md")] + "_zh.md"


def translate_line(line: str, templates: list[Template], where: str = "") -> str:
    """The Chinese of one line of a fragment; SystemExit when no template matches."""
    for pattern, render in templates:
        m = pattern.fullmatch(line)
        if m:
            return render(m)
    raise SystemExit(f"docs_zh_readings: {where or 'a fragment'} has a line that matches no "
                     f"known template, so it has no Chinese version:\n  {line}\n"
                     "add a template for it to tools/docs_zh_readings.py")


def translate(text: str, templates: list[Template], where: str = "") -> str:
    """The Chinese of a whole fragment, line by line."""
    return "\n".join(translate_line(line, templates, where)
                     for line in text.rstrip("\n").split("\n"))


def translate_files(gen: Path, fragments: dict[str, list[Template]], write) -> None:
    """Read each English fragment under ``gen`` and ``write(name, text)`` its Chinese twin."""
    for name, templates in fragments.items():
        path = gen / name
        if not path.is_file():
            raise SystemExit(f"docs_zh_readings: {path} is missing: run the job that writes it "
                             "first (python tools/gen_docs.py --list shows which)")
        write(zh_name(name), translate(path.read_text(encoding="utf-8"), templates, name))


def jobs(Job, gen_docs) -> list:
    here = "tools/docs_zh_readings.py"

    def zh_readings(work: Path, job) -> None:  # gen_docs calls action(work, job)
        translate_files(gen_docs.GEN, FRAGMENTS, gen_docs.write)

    def zh_readings_shakespeare(work: Path, job) -> None:
        translate_files(gen_docs.GEN, FRAGMENTS_SHAKESPEARE, gen_docs.write)

    return [
        Job("zh_readings", "the stage-5 page's generated readings, in Chinese", zh_readings,
            files=(here, *(f"docs/generated/{n}" for n in FRAGMENTS)),
            outputs=tuple(zh_name(n) for n in FRAGMENTS), seconds=1),
        Job("zh_readings_shakespeare", "the presets table (Tiny Shakespeare), in Chinese",
            zh_readings_shakespeare, params={"sha256": gen_docs.SHAKESPEARE_SHA256},
            files=(here, *(f"docs/generated/{n}" for n in FRAGMENTS_SHAKESPEARE)),
            outputs=tuple(zh_name(n) for n in FRAGMENTS_SHAKESPEARE), seconds=1,
            shakespeare=True),
    ]
