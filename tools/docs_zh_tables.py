"""gen_docs jobs for the Chinese edition: the compare page's generated tables, in Chinese.

tools/compare.py's ``markdown_table`` writes each comparison table (compare_en.md,
compare_budget_en.md, compare_payoff_en.md, compare_shakespeare.md) as a title line,
a table of numbers with English column headers and stage labels, a sentence, and
each stage's sample in a tab. The Chinese page (docs/zh/compare.md) includes a
Chinese twin of each, F.md -> F_zh.md, made here line by line: the headers, labels,
titles and the sentence are translated by the explicit mappings below; numbers and
the samples (program output, inside their code blocks) are kept as they are. A line
or a cell that no mapping knows stops the job with a message naming the file and
the line, so a change to the English tables can never leave English on the Chinese
page, or drift from it silently: add the new wording here.

The stage pages include Chinese twins too, made by the job zh_fragments the same way:
tools/gen_docs.py's ``variants_table`` (stage3_attention_positions.md,
stage4_block_variants.md: a flags column, then numbers) and its ``worked_examples``
(worked_attention.md: sentences between display-math blocks, the blocks kept as they
are, each sentence translated by an exact mapping or a template that keeps its numbers).

    python tools/gen_docs.py --only zh_tables
    python tools/gen_docs.py --only zh_tables_shakespeare --shakespeare PATH
    python tools/gen_docs.py --only zh_fragments
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

# The English tables (relative to docs/generated/); F.md becomes F_zh.md.
TABLES = ("compare_en.md", "compare_budget_en.md", "compare_payoff_en.md")
# Written by the Tiny Shakespeare jobs: translated when those run (--shakespeare).
TABLES_SHAKESPEARE = ("compare_shakespeare.md",)

# compare.COLUMNS, the column headers.
HEADERS = {
    "stage": "阶段",
    "parameters": "参数量",
    "steps": "步数",
    "batch × block": "批次 × 上下文",
    "train loss": "训练损失",
    "val loss": "验证损失",
    "best val (step)": "最佳验证损失（步）",
    "time (s)": "用时（秒）",
    "sample": "样本",
}
# The stage labels (compare.cells: "<number> (<package name after the underscore>)").
STAGE_NAMES = {"bigram": "二元模型", "attention": "注意力", "block": "Transformer 块",
               "gpt": "GPT"}
NUMERALS = {"1": "一", "2": "二", "3": "三", "4": "四", "5": "五"}
CORPORA = {"en": "内置英文语料", "zh": "内置中文语料"}
# Fixed sentences (compare.markdown_table).
SENTENCES = {
    "What each model writes after training, from a newline, with the same seed:":
        "每个模型训练之后写出的文字，都从一个换行符开始，随机种子相同：",
}
# The cells of a data row other than the stage label: numbers (kept as they are), or a
# sample preview in a code span (program output, kept as it is).
INT = r"\d{1,3}(?:,\d{3})*"
VALUE = re.compile(rf"{INT}|\d+ × \d+|\?|-?\d+\.\d+|-?\d+\.\d+ \({INT}\)|`` .* ``|`[^`]*`")
RULE = re.compile(r"\|(?:-{3}|-{2}:)(?:\|(?:-{3}|-{2}:))*\|")
TAB = re.compile(r'=== "(.+)"')
FENCE_OPEN = re.compile(r"    (`{3,})text")


def fail(where: str, n: int, line: str, why: str) -> SystemExit:
    return SystemExit(f"docs_zh_tables: {where}, line {n}: {why}, so it has no Chinese "
                      f"version:\n  {line}\nadd it to the mappings in tools/docs_zh_tables.py")


def stage(label: str) -> str:
    """``2 (bigram)`` -> ``第二步（二元模型）``; KeyError for an unknown one."""
    m = re.fullmatch(r"(\d) \((\w+)\)", label)
    if not m:
        raise KeyError(label)
    return f"第{NUMERALS[m[1]]}步（{STAGE_NAMES[m[2]]}）"


def stage_list(numbers: str) -> str:
    """``2, 3, 4, 5`` -> ``第二、三、四、五步``."""
    return "第" + "、".join(NUMERALS[n] for n in numbers.split(", ")) + "步"


def corpus(name: str) -> str:
    return f"{CORPORA[name]}（`{name}`）" if name in CORPORA else f"`{name}`"


# Title lines: tools/gen_docs.py's titles (compare_en, compare_shakespeare) and
# compare.title_for's same-budget title, as gen_docs' budget tables use it.
TITLES: list[tuple[re.Pattern, Callable[[re.Match], str]]] = [
    (re.compile(r"Each stage at its default settings, on the built-in English corpus "
                r"\(seed (\d+)\)"),
     lambda m: f"每个阶段都用自己的默认设置，在内置英文语料上训练（随机种子 {m[1]}）"),
    (re.compile(r"Stages ((?:\d, )+\d) at the same budget: (\d+) steps × batch (\d+) × "
                r"block (\d+) on (\S+), seed (\d+) \(model size, learning rate: each "
                r"stage's own\)"),
     lambda m: f"{stage_list(m[1])}用同样的预算：{m[2]} 步 × 批次 {m[3]} × 上下文 {m[4]}，"
               f"{corpus(m[5])}，随机种子 {m[6]}（模型规模和学习率：各阶段用自己的）"),
    (re.compile(r"Tiny Shakespeare: stages (\d)-(\d) at their defaults, stage (\d) in "
                r"nanoGPT's CPU configuration \((`[^`]+`)\)"),
     lambda m: f"Tiny Shakespeare：第{NUMERALS[m[1]]}到第{NUMERALS[m[2]]}步用各自的默认设置，"
               f"第{NUMERALS[m[3]]}步用 nanoGPT 的 CPU 配置（{m[4]}）"),
]


def cells(line: str) -> list[str] | None:
    """The cells of a table row ``| a | b |`` (``\\|`` inside a cell kept), else None."""
    if not (line.startswith("| ") and line.endswith(" |")):
        return None
    return [c.strip() for c in re.split(r"(?<!\\)\|", line[1:-1])]


def translate_line(line: str, where: str = "a table", n: int = 0) -> str:
    """The Chinese of one line outside the sample blocks; SystemExit when unknown."""
    if line == "" or RULE.fullmatch(line):
        return line
    if line in SENTENCES:
        return SENTENCES[line]
    for pattern, render in TITLES:
        m = pattern.fullmatch(line)
        if m:
            try:
                return render(m)
            except KeyError as e:
                raise fail(where, n, line, f"the title names an unknown {e}") from None
    if m := TAB.fullmatch(line):
        try:
            return f'=== "{stage(m[1])}"'
        except KeyError:
            raise fail(where, n, line, "an unknown stage label") from None
    row = cells(line)
    if row is None:
        raise fail(where, n, line, "a line that no mapping knows")
    if all(c in HEADERS for c in row):
        return "| " + " | ".join(HEADERS[c] for c in row) + " |"
    try:
        label = stage(row[0])
    except KeyError:
        raise fail(where, n, line, f"an unknown header or stage label {row[0]!r}") from None
    for cell in row[1:]:
        if not VALUE.fullmatch(cell):
            raise fail(where, n, line, f"a cell that is neither a number nor a sample: {cell!r}")
    return "| " + " | ".join([label, *row[1:]]) + " |"


def translate(text: str, where: str = "a table") -> str:
    """The Chinese of a whole table file. The samples' code blocks (4-space indented
    fences opened by ``    ```text``) are program output: kept line for line."""
    out, fence = [], None
    lines = text.rstrip("\n").split("\n")
    for n, line in enumerate(lines, 1):
        if fence is not None:
            out.append(line)
            if line == f"    {fence}":
                fence = None
            continue
        if m := FENCE_OPEN.fullmatch(line):
            fence = m[1]
            out.append(line)
            continue
        out.append(translate_line(line, where, n))
    if fence is not None:
        raise SystemExit(f"docs_zh_tables: {where}: a sample's code block is never closed")
    return "\n".join(out)


def zh_name(name: str) -> str:
    """``compare_en.md`` -> ``compare_en_zh.md``."""
    return name[: -len(".md")] + "_zh.md"


# ----------------------------------------------------------------------------- stage pages
# tools/gen_docs.py's variants_table: one row per run, its flags in a code span.
VARIANTS = ("stage3_attention_positions.md", "stage4_block_variants.md")
VARIANT_HEADERS = {"flags": "命令行选项",
                   **{h: HEADERS[h] for h in ("parameters", "train loss", "val loss", "time (s)")}}
FLAGS = re.compile(r"`--[a-z][a-z-]*(?: [^`\s-][^`\s]*)?(?: --[a-z][a-z-]*(?: [^`\s-][^`\s]*)?)*`")
DEFAULTS = {"`(defaults)`": "默认设置"}  # the row of a stage's own defaults: no flags
NUMBER = re.compile(rf"{INT}|-?\d+\.\d+")


def translate_variants(text: str, where: str = "a table") -> str:
    """The Chinese of a variants table: headers translated, flags and numbers kept."""
    out = []
    for n, line in enumerate(text.rstrip("\n").split("\n"), 1):
        row = cells(line)
        if line == "" or RULE.fullmatch(line):
            out.append(line)
        elif row is None:
            raise fail(where, n, line, "a line that no mapping knows")
        elif all(c in VARIANT_HEADERS for c in row):
            out.append("| " + " | ".join(VARIANT_HEADERS[c] for c in row) + " |")
        elif not (row[0] in DEFAULTS or FLAGS.fullmatch(row[0])):
            raise fail(where, n, line, f"an unknown header or flags cell {row[0]!r}")
        elif bad := [c for c in row[1:] if not NUMBER.fullmatch(c)]:
            raise fail(where, n, line, f"a cell that is not a number: {bad[0]!r}")
        else:
            out.append("| " + " | ".join([DEFAULTS.get(row[0], row[0]), *row[1:]]) + " |")
    return "\n".join(out)


# tools/gen_docs.py's worked_examples: paragraphs of prose between display-math blocks.
WORKED = ("worked_attention.md",)
# A paragraph (its lines joined by a space), exactly.
WORKED_SENTENCES = {
    "The causal mask adds $-\\infty$ above the diagonal (a token may not look ahead), and the "
    "softmax of each row turns scores into weights that sum to 1 ($e^{-\\infty} = 0$):":
        "因果掩码在对角线上方加上 $-\\infty$（词元不能往后看），再对每一行做 softmax，"
        "把分数变成和为 1 的权重（$e^{-\\infty} = 0$）：",
    "Each output row is a weighted sum of value vectors. For the last token:":
        "输出的每一行都是值向量的加权和。以最后一个词元为例：",
    "and all three at once:": "三行一起算：",
}
# A paragraph with numbers the example computes: the numbers are carried over.
WORKED_TEMPLATES: list[tuple[re.Pattern, Callable[[re.Match], str]]] = [
    (re.compile(r"Three tokens, head size \$d_k = (\d+)\$\. Queries, keys and values:"),
     lambda m: f"三个词元，头的大小 $d_k = {m[1]}$。查询、键和值："),
    (re.compile(r"Scores, then scaled by \$1/\\sqrt\{d_k\} = (\d+\.\d+)\$:"),
     lambda m: f"先算分数，再乘以 $1/\\sqrt{{d_k}} = {m[1]}$ 缩放："),
]


def translate_paragraph(par: str) -> str | None:
    if par in WORKED_SENTENCES:
        return WORKED_SENTENCES[par]
    for pattern, render in WORKED_TEMPLATES:
        if m := pattern.fullmatch(par):
            return render(m)
    return None


def translate_worked(text: str, where: str = "a worked example") -> str:
    """The Chinese of a worked example: each paragraph translated (a paragraph of several
    lines becomes one line: Chinese has no spaces to break at), the ``$$`` blocks kept."""
    lines = text.rstrip("\n").split("\n")
    out, i = [], 0
    while i < len(lines):
        if lines[i] == "":
            out.append("")
            i += 1
        elif lines[i] == "$$":
            end = next((j for j in range(i + 1, len(lines)) if lines[j] == "$$"), None)
            if end is None:
                raise SystemExit(f"docs_zh_tables: {where}, line {i + 1}: a $$ block is "
                                 "never closed")
            out += lines[i : end + 1]
            i = end + 1
        else:
            start = i
            while i < len(lines) and lines[i] not in ("", "$$"):
                i += 1
            par = " ".join(lines[start:i])
            zh = translate_paragraph(par)
            if zh is None:
                raise fail(where, start + 1, par, "a paragraph that no mapping knows")
            out.append(zh)
    return "\n".join(out)


FRAGMENTS: dict[str, Callable[[str, str], str]] = {
    **dict.fromkeys(VARIANTS, translate_variants), **dict.fromkeys(WORKED, translate_worked)}


def translate_files(gen: Path, names: tuple[str, ...], write) -> None:
    """Read each English file under ``gen`` and ``write(name, text)`` its Chinese twin
    (a stage page's fragment by its own translator, a compare table by ``translate``)."""
    for name in names:
        path = gen / name
        if not path.is_file():
            raise SystemExit(f"docs_zh_tables: {path} is missing: run the job that writes it "
                             "first (python tools/gen_docs.py --list shows which)")
        write(zh_name(name), FRAGMENTS.get(name, translate)(path.read_text(encoding="utf-8"),
                                                            name))


def jobs(Job, gen_docs) -> list:
    here = "tools/docs_zh_tables.py"

    def zh_tables(work: Path, job) -> None:  # gen_docs calls action(work, job)
        translate_files(gen_docs.GEN, TABLES, gen_docs.write)

    def zh_tables_shakespeare(work: Path, job) -> None:
        translate_files(gen_docs.GEN, TABLES_SHAKESPEARE, gen_docs.write)

    def zh_fragments(work: Path, job) -> None:
        translate_files(gen_docs.GEN, tuple(FRAGMENTS), gen_docs.write)

    return [
        Job("zh_tables", "the compare page's tables, in Chinese", zh_tables,
            files=(here, *(f"docs/generated/{n}" for n in TABLES)),
            outputs=tuple(zh_name(n) for n in TABLES), seconds=1),
        Job("zh_tables_shakespeare", "the compare page's Tiny Shakespeare table, in Chinese",
            zh_tables_shakespeare, params={"sha256": gen_docs.SHAKESPEARE_SHA256},
            files=(here, *(f"docs/generated/{n}" for n in TABLES_SHAKESPEARE)),
            outputs=tuple(zh_name(n) for n in TABLES_SHAKESPEARE), seconds=1,
            shakespeare=True),
        Job("zh_fragments", "the stage pages' generated tables and worked example, in Chinese",
            zh_fragments, files=(here, *(f"docs/generated/{n}" for n in FRAGMENTS)),
            outputs=tuple(zh_name(n) for n in FRAGMENTS), seconds=1),
    ]
