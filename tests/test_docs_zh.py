"""The Chinese edition (docs/zh/) cannot drift from the English one (docs/).

Every page of the English nav has a Chinese counterpart in mkdocs.zh.yml's nav, with
the same sections (each Chinese heading carries the English heading's anchor as an
explicit ``{#id}``, so links work in both editions), the same formulas, the same
included snippets and stage diffs, and the same figures; where a Chinese-corpus
version of a figure or an output exists (``..._zh``), the Chinese page may use it.
No prose paragraph of a Chinese page is left in English.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import nav_pages

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
ZH = DOCS / "zh"

HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*$")
ANCHOR = re.compile(r"\s*\{\s*#([\w-]+)\s*\}\s*$")
INCLUDE = re.compile(r'^\s*--8<--\s+"([^"]+)"\s*$')
DIFF = re.compile(r"^\s*<!--\s*stage-diff:.*-->\s*$")
IMAGE = re.compile(r"!\[[^\]]*\]\(([^)\s]+)")
DISPLAY_MATH = re.compile(r"\$\$(.+?)\$\$", re.S)
INLINE_MATH = re.compile(r"\\\((.+?)\\\)", re.S)
FENCE = re.compile(r"^\s*(`{3,}|~{3,})")
CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff]")


def zh_nav() -> list[str]:
    from mkdocs.config import load_config

    config = load_config(str(ROOT / "mkdocs.zh.yml"))
    out = []
    for item in config["nav"]:
        value = next(iter(item.values())) if isinstance(item, dict) else item
        out.append(value)
    return out


def slug(text: str) -> str:
    """MkDocs' default heading id (Python-Markdown's toc slugify)."""
    from markdown.extensions.toc import slugify

    text = re.sub(r"<[^>]+>", "", text)
    return slugify(text, "-")


def strip_code(markdown: str) -> list[str]:
    """The lines outside fenced code blocks."""
    lines, fence = [], None
    for line in markdown.splitlines():
        m = FENCE.match(line)
        if fence is None and m:
            fence = m.group(1)
            continue
        if fence is not None:
            if line.strip().startswith(fence):
                fence = None
            continue
        lines.append(line)
    return lines


def headings(markdown: str) -> list[tuple[int, str]]:
    """(level, anchor) of every heading outside code blocks."""
    out = []
    for line in strip_code(markdown):
        m = HEADING.match(line)
        if m:
            text = m.group(2)
            a = ANCHOR.search(text)
            out.append((len(m.group(1)), a.group(1) if a else slug(text)))
    return out


def neutral(path: str) -> str:
    """A file name without the Chinese edition's marker: x_zh.png -> x.png, x.zh.md -> x.md."""
    return re.sub(r"\.zh(?=\.md$)", "", re.sub(r"_zh(?=\.png$)", "", path))


FACT = re.compile(r"\{\{fact ([\w.]+)")
CHECK = re.compile(r"<!-- check: (.+?) -->")


def facts(markdown: str) -> list[str]:
    """The facts a page quotes and the claims it checks."""
    return sorted(FACT.findall(markdown)) + sorted(CHECK.findall(markdown))


def includes(markdown: str, zh: bool = False) -> list[str]:
    """The files a page includes; a Chinese page's without their Chinese-edition marker."""
    found = [m.group(1) for line in markdown.splitlines() if (m := INCLUDE.match(line))]
    return [neutral(f) for f in found] if zh else found


def diffs(markdown: str) -> list[str]:
    return [line.strip() for line in markdown.splitlines() if DIFF.match(line)]


def images(markdown: str, zh: bool = False) -> list[str]:
    found = IMAGE.findall("\n".join(strip_code(markdown)))
    return [neutral(src) for src in found] if zh else found


def formulas(markdown: str) -> list[str]:
    text = "\n".join(strip_code(markdown))
    norm = lambda s: re.sub(r"\s+", " ", s).strip()  # noqa: E731
    return [norm(f) for f in DISPLAY_MATH.findall(text)] + sorted(
        norm(f) for f in INLINE_MATH.findall(text))


def english_paragraphs(markdown: str) -> list[str]:
    """Prose paragraphs with no Chinese character: left untranslated."""
    text = "\n".join(strip_code(markdown))
    text = DISPLAY_MATH.sub("", text)
    found = []
    for block in re.split(r"\n\s*\n", text):
        lines = [ln for ln in block.splitlines()
                 if ln.strip() and not INCLUDE.match(ln) and not DIFF.match(ln)
                 and not ln.lstrip().startswith(("|", "<", "![", "{", "---", "[", "*[", "=== "))
                 and not HEADING.match(ln)]
        prose = " ".join(ln.strip() for ln in lines)
        prose = INLINE_MATH.sub("", prose)
        prose = re.sub(r"`[^`]*`", "", prose)
        prose = re.sub(r"\{\{fact [^}]*\}\}", "", prose)  # a quoted fact is no English
        words = re.findall(r"[A-Za-z]{3,}", prose)
        if len(words) >= 6 and not CJK.search(prose):
            found.append(prose[:120])
    return found


def test_the_chinese_nav_lists_the_english_pages_in_order():
    assert zh_nav() == nav_pages()


@pytest.mark.parametrize("page", nav_pages())
def test_every_english_page_has_a_chinese_counterpart(page):
    assert (ZH / page).is_file(), f"docs/zh/{page} is missing: translate docs/{page}"


def _pair(page: str) -> tuple[str, str]:
    if not (ZH / page).is_file():
        pytest.fail(f"docs/zh/{page} is missing")
    return ((DOCS / page).read_text(encoding="utf-8"), (ZH / page).read_text(encoding="utf-8"))


@pytest.mark.parametrize("page", nav_pages())
def test_same_sections(page):
    en, zh = _pair(page)
    assert headings(zh) == headings(en), (
        f"docs/zh/{page}: the headings (level, anchor) differ from docs/{page}; give each "
        "Chinese heading the English one's anchor, e.g. `## 标题 {#english-anchor}`")


@pytest.mark.parametrize("page", nav_pages())
def test_same_snippets_diffs_and_figures(page):
    en, zh = _pair(page)
    # Sorted: the Chinese edition may order the tabs of a section differently (Tang first).
    assert sorted(includes(zh, zh=True)) == sorted(includes(en)), (
        f"docs/zh/{page}: the includes differ")
    assert diffs(zh) == diffs(en), f"docs/zh/{page}: the stage-diff markers differ"
    assert sorted(images(zh, zh=True)) == sorted(images(en)), f"docs/zh/{page}: the figures differ"


@pytest.mark.parametrize("page", nav_pages())
def test_same_facts_and_checks(page):
    en, zh = _pair(page)
    assert facts(zh) == facts(en), f"docs/zh/{page}: the quoted facts or checked claims differ"


@pytest.mark.parametrize("page", nav_pages())
def test_same_formulas(page):
    en, zh = _pair(page)
    assert formulas(zh) == formulas(en), f"docs/zh/{page}: the formulas differ"


@pytest.mark.parametrize("page", nav_pages())
def test_no_english_paragraph_left(page):
    _, zh = _pair(page)
    assert english_paragraphs(zh) == [], f"docs/zh/{page}: untranslated paragraphs"


def test_the_checks_would_catch_drift():
    en = "# Title\n\n## A step\n\nSome $$x^2$$ text \\(a\\).\n\n--8<-- \"docs/generated/a.md\"\n"
    good = ("# 标题 {#title}\n\n## 一步 {#a-step}\n\n一些 $$x^2$$ 文字 \\(a\\)。\n\n"
            "--8<-- \"docs/generated/a.zh.md\"\n")
    assert headings(good) == headings(en) and formulas(good) == formulas(en)
    assert includes(good, zh=True) == includes(en)
    assert headings(good.replace("{#a-step}", "")) != headings(en)
    assert formulas(good.replace("x^2", "x^3")) != formulas(en)
    assert includes(good.replace("a.zh.md", "b.md"), zh=True) != includes(en)
    assert neutral("generated/s/loss_en_zh.png") == "generated/s/loss_en.png"
    assert facts("{{fact a.b:.2f}} <!-- check: a.b > 1 -->") == ["a.b", "a.b > 1"]
    assert english_paragraphs("This paragraph was left in English by mistake, sadly.") != []
    assert english_paragraphs("这一段是中文，带着 `code` 和 English term（token）。") == []
