"""tools/docs_zh_tables.py: the Chinese twins of the compare page's generated tables and
of the stage pages' generated fragments (variants tables, the worked attention example),
and tools/docs_course_compare.py's Chinese reading of the same-budget tables.

Every line of the English tables as compare.py writes them must translate: each
header, title, label and sentence has its Chinese, the numbers come out unchanged
and the samples (program output) byte for byte; a line or a cell no mapping knows
must stop the job with the file and the line, not pass through in English.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GEN = ROOT / "docs" / "generated"


def load(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "tools" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


zt = load("docs_zh_tables")
course = load("docs_course_compare")

CJK = re.compile(r"[\u4e00-\u9fff]")
# Names that stay as they are in Chinese text.
PROPER = {"Tiny", "Shakespeare", "nanoGPT", "GPT", "Transformer", "CPU"}
# A table as compare.markdown_table writes it: a title, numbers, then the samples in tabs
# (one of them with a backtick inside, so a longer fence).
TABLE = """Stages 2, 3 at the same budget: 2000 steps × batch 16 × block 32 on en, seed 1337 \
(model size, learning rate: each stage's own)

| stage | parameters | steps | batch × block | train loss | val loss | best val (step) | time (s) |
|---|--:|--:|---|--:|--:|--:|--:|
| 2 (bigram) | 3,600 | 2,000 | 16 × 32 | 2.2492 | 2.2852 | 2.2852 (1,600) | 4.8 |
| 3 (attention) | 7,996 | 2,000 | 16 × 32 | 2.2258 | 2.2849 | ? | 34.2 |

What each model writes after training, from a newline, with the same seed:

=== "2 (bigram)"

    ```text
    | stage | the model's own words: What each model writes |
    ```

=== "3 (attention)"

    ````text
    a ``` inside

    STUDENT: 12 steps
    ````"""


def english_tables() -> list[str]:
    return [n for n in (*zt.TABLES, *zt.TABLES_SHAKESPEARE) if (GEN / n).is_file()]


def split_samples(text: str) -> tuple[list[str], list[str]]:
    """The lines outside the samples' code blocks, and those inside (fences included)."""
    outside, inside, fence = [], [], None
    for line in text.split("\n"):
        if fence is not None:
            inside.append(line)
            fence = None if line == f"    {fence}" else fence
        elif m := zt.FENCE_OPEN.fullmatch(line):
            fence = m[1]
            inside.append(line)
        else:
            outside.append(line)
    return outside, inside


def numbers(lines: list[str], english: bool) -> list[str]:
    """Every number, in order; in English, without the stage numbers that Chinese writes
    as words (``2 (bigram)`` -> 第二步, ``Stages 2, 3`` -> 第二、三步, ``stages 2-4``)."""
    text = "\n".join(lines)
    if english:
        text = re.sub(r"\b\d \((?:bigram|attention|block|gpt)\)", "", text)
        text = re.sub(r"stages (?:\d, )+\d|stages \d-\d|stage \d", "", text, flags=re.I)
    return re.findall(r"\d[\d,]*(?:\.\d+)?", text)


def english_words(lines: list[str]) -> list[str]:
    text = re.sub(r"`[^`]*`", "", "\n".join(lines))
    return [w for w in re.findall(r"[A-Za-z]{3,}", text) if w not in PROPER]


def test_a_table_translates_line_for_line():
    zh = zt.translate(TABLE, "t.md")
    assert len(zh.split("\n")) == len(TABLE.split("\n"))
    assert zh.split("\n")[0] == ("第二、三步用同样的预算：2000 步 × 批次 16 × 上下文 32，内置英文语料"
                                 "（`en`），随机种子 1337（模型规模和学习率：各阶段用自己的）")
    assert "| 阶段 | 参数量 | 步数 | 批次 × 上下文 | 训练损失 | 验证损失 | 最佳验证损失（步） | 用时（秒） |" in zh
    assert "| 第二步（二元模型） | 3,600 | 2,000 | 16 × 32 | 2.2492 | 2.2852 | 2.2852 (1,600) | 4.8 |" in zh
    assert "| 第三步（注意力） | 7,996 | 2,000 | 16 × 32 | 2.2258 | 2.2849 | ? | 34.2 |" in zh
    assert '=== "第三步（注意力）"' in zh
    # The samples are program output: kept byte for byte, even where they look like a header.
    (outside_en, inside_en), (outside_zh, inside_zh) = split_samples(TABLE), split_samples(zh)
    assert len(inside_en) == 8 and inside_zh == inside_en
    assert english_words(outside_zh) == []
    assert numbers(outside_zh, False) == numbers(outside_en, True)


@pytest.mark.parametrize("name", english_tables())
def test_every_current_table_translates_keeping_numbers_and_samples(name):
    en = (GEN / name).read_text(encoding="utf-8").rstrip("\n")
    zh = zt.translate(en, name)
    assert len(zh.split("\n")) == len(en.split("\n"))
    (outside_en, inside_en), (outside_zh, inside_zh) = split_samples(en), split_samples(zh)
    # Outside the samples every non-blank line changed (no English line passed through)
    # except the tables' alignment rows; no English word is left, and the numbers survive.
    for a, b in zip(outside_en, outside_zh, strict=True):
        assert a == b == "" or a != b or zt.RULE.fullmatch(a), a
    assert english_words(outside_zh) == [], name
    assert numbers(outside_zh, False) == numbers(outside_en, True), name
    # Inside the samples nothing changed.
    assert inside_zh == inside_en
    header = next(line for line in outside_en if line.startswith("| stage |"))
    assert all(cell in zt.HEADERS for cell in zt.cells(header))


def test_the_files_on_disk_are_the_translations_of_the_english_ones():
    for name in english_tables():
        twin = GEN / zt.zh_name(name)
        if twin.is_file():
            assert twin.read_text(encoding="utf-8").rstrip("\n") == zt.translate(
                (GEN / name).read_text(encoding="utf-8"), name), (
                f"{twin.name} is not the translation of {name}: python tools/gen_docs.py "
                "--only zh_tables (zh_tables_shakespeare for Tiny Shakespeare)")


@pytest.mark.parametrize(("line", "why"), [
    ("Each stage at its default settings, on the built-in French corpus (seed 1)",
     "no mapping"),                                                          # reworded title
    ("| stage | parameters | tokens/s |", "unknown header"),                 # a new column
    ("| 6 (moe) | 1,000 | 2,000 | 16 × 32 | 2.1 | 2.2 | 2.2 (9) | 1.0 |", "stage label"),
    ("| 2 (bigram) | 3,600 | n/a | 16 × 32 | 2.1 | 2.2 | 2.2 (9) | 1.0 |", "neither"),
    ('=== "2 (unigram)"', "stage label"),
    ("What each model writes before training:", "no mapping"),              # a new sentence
    ("Stages 2, 7 at the same budget: 2000 steps × batch 16 × block 32 on en, seed 1 "
     "(model size, learning rate: each stage's own)", "unknown"),
])
def test_an_unknown_line_stops_the_job_naming_file_and_line(line, why):
    text = TABLE.replace("What each model writes after training, from a newline, with the "
                         "same seed:", line)
    n = text.split("\n").index(line) + 1
    with pytest.raises(SystemExit, match=rf"docs_zh_tables: x\.md, line {n}: .*{why}"):
        zt.translate(text, "x.md")


def test_an_unclosed_sample_stops_the_job():
    with pytest.raises(SystemExit, match="never closed"):
        zt.translate(TABLE.rsplit("\n", 1)[0], "x.md")


def test_a_missing_table_stops_the_job(tmp_path):
    with pytest.raises(SystemExit, match="missing"):
        zt.translate_files(tmp_path, ("compare_en.md",), lambda name, text: None)


def test_the_jobs_read_the_english_tables_and_write_the_twins_the_page_includes():
    import sys
    sys.path.insert(0, str(ROOT / "tools"))
    import gen_docs

    by_name = {j.name: j for j in gen_docs.JOBS}
    for job, names in (("zh_tables", zt.TABLES), ("zh_tables_shakespeare", zt.TABLES_SHAKESPEARE)):
        assert {f"docs/generated/{n}" for n in names} <= set(by_name[job].files)
        assert set(by_name[job].outputs) == {zt.zh_name(n) for n in names}
    assert by_name["zh_tables_shakespeare"].shakespeare
    fragments = by_name["zh_fragments"]
    assert {f"docs/generated/{n}" for n in zt.FRAGMENTS} <= set(fragments.files)
    assert set(fragments.outputs) == {zt.zh_name(n) for n in zt.FRAGMENTS}
    # The English fragments are written by gen_docs' own jobs, which run before this one.
    names = [j.name for j in gen_docs.JOBS]
    for n in zt.FRAGMENTS:
        writer = next(j.name for j in gen_docs.JOBS if n in j.outputs)
        assert names.index(writer) < names.index("zh_fragments")
    assert course.READING_ZH in by_name["compare_reading_en"].outputs
    # Every generated _zh file the Chinese compare page includes is written by a job.
    page = "".join((ROOT / "docs" / "zh" / p).read_text(encoding="utf-8")
                   for p in ("compare.md", "stage3_attention.md", "stage4_block.md"))
    included = re.findall(r'--8<-- "docs/generated/([^"]+_zh\.md)"', page)
    written = {o for j in gen_docs.JOBS for o in j.outputs}
    assert included and set(included) <= written


# ----------------------------------------------------------------------------- stage pages
# A variants table as gen_docs.variants_table writes it.
VARIANTS = """| flags | parameters | train loss | val loss | time (s) |
|---|--:|--:|--:|--:|
| `(defaults)` | 159,164 | 1.1578 | 1.4664 | 58.0 |
| `--n-head 1` | 159,164 | 1.2710 | 1.5138 | 57.3 |
| `--norm post --activation gelu` | 1,234,567 | 0.9 | 10.0500 | 164.7 |"""


def current(names: tuple[str, ...]) -> list[str]:
    return [n for n in names if (GEN / n).is_file()]


def test_a_variants_table_translates_keeping_flags_and_numbers():
    zh = zt.translate_variants(VARIANTS, "v.md").split("\n")
    assert zh == ["| 命令行选项 | 参数量 | 训练损失 | 验证损失 | 用时（秒） |",
                  "|---|--:|--:|--:|--:|",
                  "| 默认设置 | 159,164 | 1.1578 | 1.4664 | 58.0 |",
                  "| `--n-head 1` | 159,164 | 1.2710 | 1.5138 | 57.3 |",
                  "| `--norm post --activation gelu` | 1,234,567 | 0.9 | 10.0500 | 164.7 |"]


@pytest.mark.parametrize("name", current(zt.VARIANTS))
def test_every_current_variants_table_translates(name):
    en = (GEN / name).read_text(encoding="utf-8").rstrip("\n").split("\n")
    zh = zt.translate_variants("\n".join(en), name).split("\n")
    assert len(zh) == len(en) >= 3
    assert zt.cells(en[0])[0] == "flags" and zh[0] != en[0] and CJK.search(zh[0])
    # The flags (what a reader types) stay; each row keeps its numbers, cell for cell.
    for a, b in zip(en[2:], zh[2:], strict=True):
        ca, cb = zt.cells(a), zt.cells(b)
        assert ca[1:] == cb[1:] and (ca[0] == cb[0] or ca[0] in zt.DEFAULTS), a
    assert english_words(zh) == [], name
    assert numbers(zh, False) == numbers(en, False)


MATH_BLOCK = re.compile(r"^\$\$\n.*?\n\$\$$", re.S | re.M)


def prose(text: str) -> list[str]:
    """The paragraphs outside the ``$$`` blocks, each on one line."""
    return [" ".join(p.split("\n")) for p in re.split(r"\n\n+", MATH_BLOCK.sub("", text))
            if p.strip()]


@pytest.mark.parametrize("name", current(zt.WORKED))
def test_every_current_worked_example_translates_keeping_math_and_numbers(name):
    en = (GEN / name).read_text(encoding="utf-8").rstrip("\n")
    zh = zt.translate_worked(en, name)
    # The formulas are the computation: byte for byte, in order.
    assert MATH_BLOCK.findall(zh) == MATH_BLOCK.findall(en) != []
    # Each paragraph is translated, with the numbers of its own (inline math included).
    pairs = list(zip(prose(en), prose(zh), strict=True))
    assert len(pairs) >= 5
    for a, b in pairs:
        assert CJK.search(b), a
        assert numbers([b], False) == numbers([a], False), a
        assert set(english_words([re.sub(r"\$[^$]*\$", "", b)])) <= {"softmax"}, b


def test_the_worked_template_carries_the_computed_numbers():
    text = ("Three tokens, head size $d_k = 16$. Queries, keys and values:\n\n$$\nQ\n$$\n\n"
            "Scores, then scaled by $1/\\sqrt{d_k} = 0.250$:")
    assert zt.translate_worked(text, "w.md").split("\n") == [
        "三个词元，头的大小 $d_k = 16$。查询、键和值：", "", "$$", "Q", "$$", "",
        "先算分数，再乘以 $1/\\sqrt{d_k} = 0.250$ 缩放："]


@pytest.mark.parametrize(("line", "why"), [
    ("| flags | parameters | tokens/s |", "unknown header"),                 # a new column
    ("| lr 0.1 | 7,996 | 1.9 | 2.0 | 9.4 |", "flags cell"),                  # not a flag
    ("| `--pos none` | 6,972 | n/a | 2.2267 | 13.0 |", "not a number"),
    ("Trained on the English corpus:", "no mapping"),                         # a new sentence
])
def test_an_unknown_variants_line_stops_the_job_naming_file_and_line(line, why):
    text = VARIANTS.replace("| `--n-head 1` | 159,164 | 1.2710 | 1.5138 | 57.3 |", line)
    n = text.split("\n").index(line) + 1
    with pytest.raises(SystemExit, match=rf"docs_zh_tables: v\.md, line {n}: .*{why}"):
        zt.translate_variants(text, "v.md")


WORKED_TEXT = """Three tokens, head size $d_k = 2$. Queries, keys and values:

$$
Q = 1
$$

The causal mask adds $-\\infty$ above the diagonal (a token may not look ahead), and the
softmax of each row turns scores into weights that sum to 1 ($e^{-\\infty} = 0$):

and all three at once:"""


@pytest.mark.parametrize(("old", "new"), [
    ("Three tokens", "Four tokens"),                                # a changed number word
    ("and all three at once:", "and all three at once, by one product:"),
    ("the diagonal (a token", "the diagonal (so a token"),         # second paragraph, reworded
])
def test_an_unknown_worked_paragraph_stops_the_job_naming_file_and_line(old, new):
    text = WORKED_TEXT.replace(old, new)
    n = next(i for i, line in enumerate(text.split("\n"), 1) if new in line)  # its first line
    with pytest.raises(SystemExit, match=rf"docs_zh_tables: w\.md, line {n}: .*no mapping"):
        zt.translate_worked(text, "w.md")


def test_an_unclosed_math_block_stops_the_job():
    assert zt.translate_worked(WORKED_TEXT, "w.md").count("$$") == 2
    with pytest.raises(SystemExit, match=r"w\.md, line 3: a \$\$ block is never closed"):
        zt.translate_worked(WORKED_TEXT.replace("Q = 1\n$$", "Q = 1"), "w.md")


def test_the_fragment_twins_on_disk_are_the_translations_and_the_pages_include_them():
    for name, translator in zt.FRAGMENTS.items():
        twin = GEN / zt.zh_name(name)
        if (GEN / name).is_file() and twin.is_file():
            assert twin.read_text(encoding="utf-8").rstrip("\n") == translator(
                (GEN / name).read_text(encoding="utf-8"), name), (
                f"{twin.name} is not the translation of {name}: python tools/gen_docs.py "
                "--only zh_fragments")
    # The Chinese stage pages include the twins, never the English fragments.
    pages = "".join((ROOT / "docs" / "zh" / p).read_text(encoding="utf-8")
                    for p in ("stage3_attention.md", "stage4_block.md"))
    for name in zt.FRAGMENTS:
        assert f'"docs/generated/{zt.zh_name(name)}"' in pages
        assert f'"docs/generated/{name}"' not in pages


def rows(*vals: float) -> dict[int, dict]:
    return {n: {"val_loss": v, "params": 1000 * n}
            for n, v in zip((2, 3, 4, 5), vals, strict=True)}


SMALL = ("--max-iters", "2000", "--batch-size", "16", "--block-size", "32")


@pytest.mark.parametrize("payoff", [(2.2885, 2.1727, 1.5524, 1.4700), (2.28, 2.17, 1.50, 1.52)])
def test_the_chinese_reading_says_what_the_english_one_says_with_the_same_numbers(payoff):
    small = rows(2.2864, 2.2872, 1.5997, 1.4918)
    en = course.reading(small, rows(*payoff), SMALL, course.PAYOFF)
    zh = course.reading_zh(small, rows(*payoff), SMALL, course.PAYOFF)
    assert len(zh.split("\n\n")) == len(en.split("\n\n")) == 3
    assert numbers([zh], False) == numbers([en], True)
    assert set(english_words([zh])) <= {"query", "key", "value"}  # the terms in parentheses
    first, _, second = zh.split("\n\n")
    assert first.startswith("**在 2,000 步、批次 16 × 上下文 32 的预算下**")
    assert "第三步**并不比**第二步好（第二步：2.2864，第三步：2.2872）" in first
    assert "第四步的验证损失比第三步低 **0.688 奈特**（2.2872 → 1.5997）" in first
    if payoff[3] < payoff[2]:
        assert "每个想法都物有所值" in second and "一共下降了 0.819 奈特" in second
    else:
        assert "第五步比第四步**差**，验证损失高 0.020 奈特" in second
        assert "并非每个想法都有回报" in second and "物有所值" not in second
