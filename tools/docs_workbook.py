"""gen_docs job: the "Your turn" box of every stage page, from the workbook's exercise table.

Each stage page includes docs/generated/your_turn_stageN.md; it lists the exercises
that ``python tools/workbook.py make --stage N`` cuts out (tools/workbook.py's
``EXERCISES``), so the box and the workbook cannot disagree.

    python tools/gen_docs.py --only your_turn
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
TABLE = "workbook_exercises.md"
TABLE_ZH = "workbook_exercises_zh.md"  # the same table for docs/zh/workbook.md
# The Chinese edition's boxes (your_turn_stageN_zh.md): each exercise's title in Chinese;
# the section to read is named by the heading of docs/zh/<stage>.md with the same anchor.
TITLES_ZH = {
    "1.1": "把文本编码成 id", "1.2": "把 id 解码回文本", "1.3": "随机取一批 (x, y) 窗口",
    "2.1": "二元模型的 logits 和损失", "2.2": "采样：一次生成一个词元",
    "3.1": "正弦位置编码", "3.2": "一个因果自注意力头", "3.3": "前向传播",
    "4.1": "批量计算的多头注意力", "4.2": "前馈网络", "4.3": "前置层归一化的块（含残差连接）",
    "5.1": "GPT-2 的初始化", "5.2": "先预热，再余弦衰减", "5.3": "温度与 top-k 采样",
}


def load_workbook():
    """tools/workbook.py as a module."""
    if "workbook" in sys.modules:
        return sys.modules["workbook"]
    spec = importlib.util.spec_from_file_location("workbook", HERE / "workbook.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["workbook"] = module
    spec.loader.exec_module(module)
    return module


def your_turn(W, stage: int) -> str:
    """The box for stage ``stage`` (Markdown, admonition syntax), from ``W.EXERCISES``."""
    rows = [f"    | {ex.id} | {ex.title} | `{ex.file}`: `{ex.qualname}`"
            + (f" (the lines between its `{ex.snippet}` markers)" if ex.snippet else "")
            + f" | [{ex.read}](#{ex.anchor}) |" for ex in W.exercises(stage)]
    return "\n".join([
        f'!!! example "Your turn: write the heart of stage {stage} yourself"',
        "",
        "    Make a copy of this stage with these pieces cut out, fill them in, and let the",
        "    stage's own tests grade them, exercise by exercise ([how it works](workbook.md)):",
        "",
        "    ```bash",
        f"    make workbook STAGE={stage}    # or: python tools/workbook.py make --stage {stage}",
        f"    make grade STAGE={stage}       # or: python tools/workbook.py grade --stage {stage}",
        "    ```",
        "",
        "    | Exercise | What you write | Where | Read first |",
        "    |---|---|---|---|",
        *rows,
    ]) + "\n"


def zh_headings(package: str) -> dict[str, str]:
    """anchor -> heading text of the Chinese page (``## 标题 {#anchor}``)."""
    path = ROOT / "docs" / "zh" / f"{package}.md"
    found = re.findall(r"^#{1,6}\s+(.*?)\s*\{\s*#([\w-]+)\s*\}\s*$",
                       path.read_text(encoding="utf-8"), re.M)
    return {anchor: text for text, anchor in found}


def zh_read(ex) -> str:
    """The heading of docs/zh/<stage>.md that exercise ``ex`` reads first (by its anchor)."""
    read = zh_headings(ex.package).get(ex.anchor)
    if read is None:
        raise SystemExit(f"docs/zh/{ex.package}.md has no heading {{#{ex.anchor}}} "
                         f"(exercise {ex.id} reads it)")
    return read


def your_turn_zh(W, stage: int) -> str:
    """The Chinese edition's box for stage ``stage``."""
    rows = []
    for ex in W.exercises(stage):
        read = zh_read(ex)
        rows.append(f"    | {ex.id} | {TITLES_ZH[ex.id]} | `{ex.file}`：`{ex.qualname}`"
                    + (f"（其中 `{ex.snippet}` 标记之间的几行）" if ex.snippet else "")
                    + f" | [{read}](#{ex.anchor}) |")
    return "\n".join([
        f'!!! example "轮到你了：亲手写出第 {stage} 步的核心"',
        "",
        "    复制一份这一步的代码，把下面这些部分挖空，由你来补上，再让这一步自己的测试",
        "    逐个练习地给你打分（[具体做法](workbook.md)）：",
        "",
        "    ```bash",
        f"    make workbook STAGE={stage}    # 或者：python tools/workbook.py make --stage {stage}",
        f"    make grade STAGE={stage}       # 或者：python tools/workbook.py grade --stage {stage}",
        "    ```",
        "",
        "    | 练习 | 你要写的 | 位置 | 先读 |",
        "    |---|---|---|---|",
        *rows,
    ]) + "\n"


def table(W) -> str:
    """Every stage's exercises, for the "Build it yourself" page."""
    rows = [f"| {ex.id} | {ex.title} | `{ex.package}/{ex.file}`: `{ex.qualname}`"
            + (f" (its `{ex.snippet}` section)" if ex.snippet else "")
            + f" | [{ex.read}]({ex.package}.md#{ex.anchor}) |" for ex in W.EXERCISES]
    return "\n".join(["| Exercise | What you write | Where | Read first |",
                      "|---|---|---|---|", *rows]) + "\n"


def table_zh(W) -> str:
    """The same table for the Chinese edition: Chinese titles, docs/zh/ headings."""
    rows = [f"| {ex.id} | {TITLES_ZH[ex.id]} | `{ex.package}/{ex.file}`：`{ex.qualname}`"
            + (f"（其中的 `{ex.snippet}` 一段）" if ex.snippet else "")
            + f" | [{zh_read(ex)}]({ex.package}.md#{ex.anchor}) |" for ex in W.EXERCISES]
    return "\n".join(["| 练习 | 你要写的 | 位置 | 先读 |",
                      "|---|---|---|---|", *rows]) + "\n"


def your_turn_job(work: Path, job, gen_docs) -> None:
    W = load_workbook()
    for stage in sorted(W.STAGES):
        gen_docs.write(f"your_turn_stage{stage}.md", your_turn(W, stage))
        gen_docs.write(f"your_turn_stage{stage}_zh.md", your_turn_zh(W, stage))
    gen_docs.write(TABLE, table(W))
    gen_docs.write(TABLE_ZH, table_zh(W))


def jobs(Job, gen_docs) -> list:
    def your_turn_boxes(work: Path, job) -> None:
        your_turn_job(work, job, gen_docs)

    return [Job(
        "your_turn", "the 'Your turn' box of every stage page, from tools/workbook.py's exercises",
        your_turn_boxes, files=("tools/docs_workbook.py", "tools/workbook.py",
                                *(f"docs/zh/{p}.md" for p in STAGE_PAGES)),
        outputs=(*(f"your_turn_stage{n}.md" for n in range(1, 6)),
                 *(f"your_turn_stage{n}_zh.md" for n in range(1, 6)), TABLE, TABLE_ZH),
        seconds=1)]


STAGE_PAGES = ("stage1_data", "stage2_bigram", "stage3_attention", "stage4_block", "stage5_gpt")
