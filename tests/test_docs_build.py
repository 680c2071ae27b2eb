"""The docs site builds with `mkdocs build --strict`, and its build-time machinery works.

- the real site builds without a single warning and references no other host;
- a snippet include (`--8<-- "file.py:section"`) of a missing section fails the build;
- the stage-diff hook (docs/hooks/stage_diff.py) renders a summary and correct
  unified diffs, one collapsible block per file, links hunks to the page section that
  explains their code, and fails the build for a folder that does not exist;
- the figures hook links every image to its full-size file, and the search hook
  turns the TeX of the search index into plain text.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import test_docs_browser
from conftest import nav_pages

pytest.importorskip(
    "mkdocs", reason="mkdocs is not installed (pip install -e '.[docs]' installs the docs toolchain)"
)
pytest.importorskip("material", reason="mkdocs-material is not installed (see the 'docs' extra)")
pytest.importorskip("pymdownx", reason="pymdown-extensions is not installed (see the 'docs' extra)")

pytestmark = pytest.mark.docs

ROOT = Path(__file__).resolve().parents[1]
site = test_docs_browser.site  # both editions, built --strict once per session
CONFIG = ROOT / "mkdocs.yml"
HOOK = ROOT / "docs" / "hooks" / "stage_diff.py"
HOOKS = ROOT / "docs" / "hooks"
# Not copied into the scratch repository of the snippet test.
COPY_IGNORE = shutil.ignore_patterns(
    ".git", ".venv", "venv", "site", "out", "build", "node_modules", "__pycache__",
    ".pytest_cache", ".ruff_cache", "*.egg-info", "*.pt",
)


def mkdocs_build(config: Path, site_dir: Path) -> subprocess.CompletedProcess:
    """`mkdocs build --strict` with the current interpreter, from the config's folder."""
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(site_dir)],
        cwd=config.parent, env=env, capture_output=True, text=True, timeout=600,
    )


def built_page(site_dir: Path, md: str) -> Path:
    """The HTML file MkDocs wrote for a page (flat with the offline plugin, else folders)."""
    stem = md[: -len(".md")]
    for candidate in (f"{stem}.html", f"{stem}/index.html"):
        if (site_dir / candidate).is_file():
            return site_dir / candidate
    raise AssertionError(f"no HTML output for {md} in {site_dir}")


def load_hook(name: str = "stage_diff"):
    if str(HOOKS) not in sys.path:  # as MkDocs does: a hook may import its siblings
        sys.path.insert(0, str(HOOKS))
    spec = importlib.util.spec_from_file_location(f"{name}_hook", HOOKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ---------------------------------------------------------------------------
# The real site


def test_site_builds_strict(site):
    """The ``site`` fixture built both editions with --strict (once per session)."""
    pages = nav_pages()
    assert "index.md" in pages, "the nav in mkdocs.yml should list index.md"
    for md in pages:
        built_page(site, md)

    # Offline-clean, statically: nothing is loaded from another host.
    external = re.compile(
        r"""<(?:script|img|iframe|source)\b[^>]*\bsrc=["'](?:https?:)?//"""
        r"""|<link\b[^>]*\bhref=["'](?:https?:)?//[^"']*["'][^>]*>""",
        re.I,
    )
    for html in site.rglob("*.html"):
        text = html.read_text(encoding="utf-8")
        for match in external.finditer(text):
            tag = match.group(0)
            # <link rel="canonical"> etc. are only links, not loads.
            if tag.startswith("<link") and not re.search(r"rel=[\"'](?:stylesheet|preload|preconnect|modulepreload|icon)", tag):
                continue
            raise AssertionError(f"{html.relative_to(site)} loads from another host: {tag}")
        assert "fonts.googleapis.com" not in text, f"{html.name} loads Google Fonts"
        assert "unpkg.com" not in text, f"{html.name} references unpkg.com"

    for vendored in ("katex/katex.min.js", "katex/contrib/auto-render.min.js",
                     "mermaid/mermaid.min.js", "iframe-worker/shim.js"):
        assert (site / "assets" / vendored).is_file(), f"vendored asset missing from site: {vendored}"
    assert not (site / "hooks").exists(), "the build hook must not be published with the site"


# ---------------------------------------------------------------------------
# Code included by name (docs/hooks/includes.py): a missing name fails the build


SNIPPET_SOURCE = '''\
"""A stand-in for a stage module."""


def present():
    return "this function is included in the docs"


class Model:
    @staticmethod
    def forward(x):
        return x  # a method, with its decorator
'''


@pytest.fixture
def scratch_repo(tmp_path):
    """A copy of the repository (docs, config, code) where one nav page can be rewritten."""
    repo = tmp_path / "repo"
    shutil.copytree(ROOT, repo, ignore=COPY_IGNORE, symlinks=True)
    (repo / "snippet_fixture").mkdir()
    (repo / "snippet_fixture" / "model.py").write_text(SNIPPET_SOURCE, encoding="utf-8")
    return repo


def _page_including(repo: Path, section: str) -> str:
    """compare.md with the code of ``section`` appended (its anchors stay: pages link them)."""
    return (repo / "docs" / "compare.md").read_text(encoding="utf-8") + textwrap.dedent(
        f"""
        ```python
        --8<-- "snippet_fixture/model.py:{section}"
        ```
        """
    )


def test_a_definition_is_included_by_its_name(scratch_repo, tmp_path):
    page = _page_including(scratch_repo, "present") + _page_including(scratch_repo, "Model.forward")[
        len((scratch_repo / "docs" / "compare.md").read_text(encoding="utf-8")):]
    (scratch_repo / "docs" / "compare.md").write_text(page, encoding="utf-8")
    result = mkdocs_build(scratch_repo / "mkdocs.yml", tmp_path / "site")
    assert result.returncode == 0, f"build failed:\n{result.stdout}\n{result.stderr}"
    html = built_page(tmp_path / "site", "compare.md").read_text(encoding="utf-8")
    assert "this function is included in the docs" in html
    assert "a method, with its decorator" in html and "staticmethod" in html
    assert "--8&lt;--" not in html and "A stand-in" not in html, "more than the definition"


def test_no_stage_file_marks_what_the_docs_show():
    """The docs include code by name: no snippet marker lines in the stage files."""
    marked = [p.relative_to(ROOT).as_posix() for p in ROOT.glob("stage*/*.py")
              if "--8<--" in p.read_text(encoding="utf-8")]
    assert marked == []


def test_snippet_missing_section_fails_build(scratch_repo, tmp_path):
    (scratch_repo / "docs" / "compare.md").write_text(
        _page_including(scratch_repo, "no_such_section"), encoding="utf-8")
    result = mkdocs_build(scratch_repo / "mkdocs.yml", tmp_path / "site")
    output = result.stdout + result.stderr
    assert result.returncode != 0, f"a missing name should fail the build:\n{output}"
    assert "no_such_section" in output, f"the error should name what is missing:\n{output}"


# ---------------------------------------------------------------------------
# The stage-diff hook, as a function


@pytest.fixture
def two_stages(tmp_path):
    a, b = tmp_path / "stage_a", tmp_path / "stage_b"
    files_a = {
        "same.py": "x = 1\n",
        "changed.py": "def f():\n    return 1\n",
        "only_a.py": "gone = True\n",
        "sub/nested.py": "n = 1\n",
        "__pycache__/junk.py": "cached = 1\n",
        "corpus/not_code.py": "ignored = 1\n",
        "notes.txt": "not python\n",
    }
    files_b = {
        "same.py": "x = 1\n",
        "changed.py": "def f():\n    return 2\n",
        "only_b.py": "new = True\n",
        "sub/nested.py": "n = 2\n",
        "__pycache__/junk.py": "cached = 2\n",
        "corpus/not_code.py": "ignored = 2\n",
        "notes.txt": "changed, but not python\n",
    }
    for folder, files in ((a, files_a), (b, files_b)):
        for rel, text in files.items():
            path = folder / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
    return tmp_path


def test_hook_diffs_whole_folders(two_stages):
    hook = load_hook()
    md = hook.render_stage_diff(two_stages, "stage_a", "stage_b")
    assert "Identical in `stage_a` and `stage_b`: `same.py`." in md
    # The summary first: every differing file, what happened to it, lines added/removed.
    assert "4 files differ, +3 −3 lines" in md
    summary = md[:md.index("<details")]
    assert re.search(r"<code>changed.py</code></a> \| changed \| \+1 \| −1 \|", summary)
    # Underscores escaped: Markdown would read __init__.py's as emphasis (bold "init.py").
    assert re.search(r"<code>only&#95;a.py</code></a> \| removed \| \+0 \| −1 \| removed \|", summary)
    assert re.search(r"<code>only&#95;b.py</code></a> \| new \| \+1 \| −0 \|", summary)
    assert "<code>sub/nested.py</code>" in summary and "same.py</code>" not in summary
    # Then one collapsible block per file, linked from the summary; none of these
    # files carries a stage's idea, so all are closed.
    assert md.count('<details class="stage-diff-file"') == 4 and " open " not in md
    assert 'href="#diff-stage-b-changed-py"' in summary and 'id="diff-stage-b-changed-py"' in md
    assert "--- stage_a/changed.py\n+++ stage_b/changed.py\n" in md
    assert "-    return 1\n+    return 2\n" in md
    assert "--- stage_a/only_a.py\n+++ /dev/null\n" in md and "-gone = True" in md
    assert "--- /dev/null\n+++ stage_b/only_b.py\n" in md and "+new = True" in md
    assert "+++ stage_b/sub/nested.py" in md
    assert "__pycache__" not in md and "corpus" not in md and "notes.txt" not in md
    # The fence is closed and the block is wrapped for styling/tests.
    assert md.startswith('<div class="stage-diff" markdown>') and md.endswith("</div>")
    assert md.count("```diff\n") == 4 and md.count("```") == 8  # one fence per hunk


def test_hook_opens_the_files_of_the_idea_and_says_why(tmp_path):
    """model.py and train.py open, the rest closed; the reason from stage_changes.json for
    consecutive stages, in the page's language, else the file's docstring."""
    hook = load_hook()
    for stage, n in (("stage1_x", 1), ("stage2_y", 2)):
        for name in ("model.py", "train.py", "plots.py", "extra.py"):
            if name == "extra.py" and n == 1:
                continue
            (tmp_path / stage).mkdir(exist_ok=True)
            (tmp_path / stage / name).write_text(f'"""{name} of stage {n}.\n\nMore."""\nv = {n}\n',
                                                 encoding="utf-8")
    (tmp_path / "stage1_x" / "gone.py").write_text("gone = 1\n", encoding="utf-8")
    (tmp_path / "docs" / "hooks").mkdir(parents=True)
    (tmp_path / hook.CHANGES).write_text(json.dumps({"changed": {"stage2_y": {
        "model.py": ["attention replaces the table", "注意力取代查找表"],
        "gone.py": ["removed: model.py does its job", "删除"]}}}), encoding="utf-8")
    md = hook.render_stage_diff(tmp_path, "stage1_x", "stage2_y")
    opened = re.findall(r'<details class="stage-diff-file" id="([^"]+)" open', md)
    assert opened == ["diff-stage2-y-model-py", "diff-stage2-y-train-py"]
    assert md.count('<details class="stage-diff-file"') == 5
    # model.py and train.py come first in the summary and in the blocks.
    assert md.index("<code>model.py</code>") < md.index("<code>train.py</code>") \
        < md.index("<code>extra.py</code>") < md.index("<code>plots.py</code>")
    assert "| attention replaces the table |" in md  # from CHANGED
    assert "| train.py of stage 2. |" in md  # no CHANGED entry: the docstring
    assert "| new | +4 | −0 | extra.py of stage 2. |" in md
    assert "| removed | +0 | −1 | removed: model.py does its job |" in md  # a reason for a removal
    assert "| 注意力取代查找表 |" in hook.render_stage_diff(tmp_path, "stage1_x", "stage2_y", lang="zh")
    # Not consecutive stages: CHANGED does not apply.
    (tmp_path / "stage3_z").mkdir()
    (tmp_path / "stage3_z" / "model.py").write_text('"""Third,\nwrapped.\n\nMore."""\n',
                                                    encoding="utf-8")
    md = hook.render_stage_diff(tmp_path, "stage1_x", "stage3_z", "model.py")
    assert "| Third, wrapped. |" in md  # the docstring's first paragraph, on one line


# A page that shows the section "head" of stage2_b/model.py under a heading, and the
# stage diff whose first hunk adds that section (its second adds "tail", not shown).
SECTIONED_PAGE = textwrap.dedent(
    """\
    # Stage 2

    ## The `head`, step by step

    ```python
    --8<-- "stage2_b/model.py:head"
    ```

    ## Elsewhere

    <!-- stage-diff: stage1_a stage2_b -->
    """
)


def _sectioned_stages(root: Path) -> None:
    old = "x = 1\n" * 20
    new = ("x = 1\n" * 10 + "def head():\n    q = 2\n"  # included by name on the page
           + "x = 1\n" * 10 + "def tail():\n    t = 3\n")
    for name, text in (("stage1_a", old), ("stage2_b", new)):
        (root / name).mkdir()
        (root / name / "model.py").write_text(text, encoding="utf-8")


def test_hook_links_hunks_to_the_section_that_explains_them(tmp_path):
    hook = load_hook()
    _sectioned_stages(tmp_path)
    page = SECTIONED_PAGE
    assert hook.page_includes(page) == {"stage2_b/model.py:head": "The `head`, step by step"}
    md = hook.replace_markers(page, tmp_path)
    # Two hunks: the first (the head section) gets a link, the second (tail: not shown
    # on the page) none.
    assert md.count('class="stage-diff-explained"') == 1
    assert md.index("stage-diff-explained") < md.index("+    q = 2") < md.index("+    t = 3")
    # Once rendered, the placeholder points at the id of the heading on the rendered page.
    html = ('<p class="stage-diff-explained">' + md.split('<p class="stage-diff-explained">')[1]
            .split("</p>")[0] + "</p>")
    top = '<h1 id="stage-2">Stage 2</h1>\n'
    head = ('<h2 id="the-head-step-by-step">The <code>head</code>, step by step<a class="headerlink" '
            'href="#the-head-step-by-step" title="Permanent link">&para;</a></h2>\n')
    assert hook.resolve_links(top + head + html) == top + head + (
        '<p class="stage-diff-explained">Explained in: <a class="stage-diff-link" '
        'href="#the-head-step-by-step" title="stage2_b/model.py:head">The <code>head</code>, step by step</a></p>')
    assert hook.resolve_links(top + html) == top  # no such heading: no link, no paragraph
    # The Chinese edition keeps its own words.
    zh = hook.replace_markers(page, tmp_path, lang="zh")
    html = '<p class="stage-diff-explained">' + zh.split('"stage-diff-explained">')[1].split("</p>")[0]
    resolved = hook.resolve_links(head + html + "</p>", "zh")
    assert resolved.startswith(head + '<p class="stage-diff-explained">讲解见：<a class="stage-diff-link" href="#')
    two = "".join(f'<a class="stage-diff-link" data-section="s" data-heading="{h}" href="#">{h}</a>'
                  for h in ("A", "B"))
    for lang, words, sep in (("en", "Explained in: ", "</a>, <a"), ("zh", "讲解见：", "</a>、<a")):
        html = f'<h2 id="a">A</h2><h2 id="b">B</h2><p class="stage-diff-explained">{words}{two}</p>'
        assert sep in hook.resolve_links(html, lang), words  # links joined in the page's language


def test_hook_why_cell_escapes_outside_code_spans_only(two_stages):
    """A docstring's gist in the "why" column: "<data>" is no tag, but in a code span
    Markdown shows "&lt;" as typed, so there "<stage>" stays as it is."""
    (two_stages / "stage_b" / "only_b.py").write_text(
        '"""Run ``python -m <stage>.train`` on <data> | more."""\n', encoding="utf-8")
    md = load_hook().render_stage_diff(two_stages, "stage_a", "stage_b")
    assert "| Run ``python -m <stage>.train`` on &lt;data&gt; \\| more. |" in md


def test_hook_single_file_and_identical(two_stages):
    hook = load_hook()
    md = hook.render_stage_diff(two_stages, "stage_a", "stage_b", "changed.py")
    assert "--- stage_a/changed.py" in md and "only_a.py" not in md and "Identical" not in md
    assert "`stage_a/changed.py` → `stage_b/changed.py`: +" in md and "differs" not in md
    assert " open " in md  # the one file asked for is shown open
    same = hook.render_stage_diff(two_stages, "stage_a", "stage_b", "same.py")
    assert "```" not in same and "Identical in `stage_a` and `stage_b`: `same.py`." in same
    with pytest.raises(hook.StageDiffError, match="exists in neither"):
        hook.render_stage_diff(two_stages, "stage_a", "stage_b", "nope.py")


def test_hook_missing_folder_is_an_error(two_stages):
    hook = load_hook()
    with pytest.raises(hook.StageDiffError, match="stage_z"):
        hook.render_stage_diff(two_stages, "stage_a", "stage_z")


def test_hook_fence_outlasts_backticks_in_code(tmp_path):
    hook = load_hook()
    for name, body in (("a", 'DOC = """```python\nx\n```"""\n'), ("b", 'DOC = """````\ny\n````"""\n')):
        (tmp_path / name).mkdir()
        (tmp_path / name / "m.py").write_text(body, encoding="utf-8")
    md = hook.render_stage_diff(tmp_path, "a", "b")
    assert "\n`````diff\n" in md and "\n`````\n\n</details>" in md


def test_hook_replaces_markers_only_outside_code(two_stages):
    hook = load_hook()
    page = textwrap.dedent(
        """\
        Intro.

        <!-- stage-diff: stage_a stage_b -->

        ```markdown
        <!-- stage-diff: stage_a stage_z -->
        ```

        <!-- stage-diff-todo: stage_a stage_z -->
        """
    )
    out = hook.replace_markers(page, two_stages)
    assert "+++ stage_b/changed.py" in out
    assert "<!-- stage-diff: stage_a stage_z -->" in out, "a marker inside a fence is example text"
    assert "<!-- stage-diff-todo: stage_a stage_z -->" in out
    with pytest.raises(hook.StageDiffError, match="expected"):
        hook.replace_markers("<!-- stage-diff: stage_a -->", two_stages)


# ---------------------------------------------------------------------------
# The stage-diff hook, through a real (test-only) MkDocs build


def _tiny_site(root: Path, page: str) -> Path:
    (root / "docs").mkdir()
    (root / "docs" / "index.md").write_text(page, encoding="utf-8")
    config = root / "mkdocs.yml"
    config.write_text(
        textwrap.dedent(
            f"""\
            site_name: stage-diff hook test
            theme:
              name: material
              font: false
            plugins: []
            hooks:
              - {HOOK.as_posix()}
            markdown_extensions:
              - attr_list
              - md_in_html
              - pymdownx.highlight:
                  pygments_lang_class: true
              - pymdownx.superfences
            """
        ),
        encoding="utf-8",
    )
    return config


def test_hook_in_a_build_highlights_the_diff(two_stages):
    config = _tiny_site(two_stages, "# Diff\n\n<!-- stage-diff: stage_a stage_b -->\n")
    result = mkdocs_build(config, two_stages / "site")
    assert result.returncode == 0, f"build failed:\n{result.stdout}\n{result.stderr}"
    html = (two_stages / "site" / "index.html").read_text(encoding="utf-8")
    assert 'class="stage-diff"' in html and "language-diff" in html
    # Pygments' diff lexer: gd = deleted line, gi = inserted line.
    assert '<span class="gd">' in html and '<span class="gi">' in html
    assert "stage-diff:" not in html


def test_hook_in_a_build_links_a_hunk_to_its_heading(tmp_path):
    _sectioned_stages(tmp_path)
    result = mkdocs_build(_tiny_site(tmp_path, SECTIONED_PAGE), tmp_path / "site")
    assert result.returncode == 0, f"build failed:\n{result.stdout}\n{result.stderr}"
    html = (tmp_path / "site" / "index.html").read_text(encoding="utf-8")
    assert 'id="the-head-step-by-step"' in html
    assert re.findall(r'<a class="stage-diff-link" href="([^"]*)"', html) == ["#the-head-step-by-step"]
    assert "data-heading" not in html  # every placeholder resolved


def test_hook_in_a_build_fails_for_missing_folder(two_stages):
    config = _tiny_site(two_stages, "# Diff\n\n<!-- stage-diff: stage_a stage_missing -->\n")
    result = mkdocs_build(config, two_stages / "site")
    output = result.stdout + result.stderr
    assert result.returncode != 0, f"a missing stage folder should fail the build:\n{output}"
    assert "stage_missing" in output and "index.md" in output, output


# ---------------------------------------------------------------------------
# The figures hook and the search hook, as functions


def test_figures_become_links_to_their_full_size_file():
    hook = load_hook("figures")
    html = ('<p><img alt="Loss &amp; more" src="generated/img/a.png" /></p>'
            '<a href="x.html"><img src="b.png"></a>'
            '<p><img class="twemoji" src="e.svg"><img src="data:image/png;base64,AA"></p>'
            "<p><IMG SRC='c.png'></p>")
    out = hook.link_figures(html)
    assert ('<a class="figure-link" href="generated/img/a.png" title="Loss &amp; more: open the '
            'full-size image"><img alt="Loss &amp; more" src="generated/img/a.png" /></a>') in out
    assert '<a href="x.html"><img src="b.png"></a>' in out  # already a link: left alone
    assert out.count("figure-link") == 2  # not the emoji, not the data: URL
    assert "<a class=\"figure-link\" href=\"c.png\" title=\"Open the full-size image\"><IMG SRC='c.png'></a>" in out
    assert hook.link_figures(out) == out  # idempotent
    zh = hook.link_figures('<img alt="损失曲线" src="a.png">', "zh")
    assert 'title="损失曲线：点击打开原尺寸图片"' in zh  # the Chinese edition's words


def test_mermaid_is_loaded_only_where_a_diagram_is():
    hook = load_hook("figures")
    script = '\n  <script src="../assets/mermaid/mermaid.min.js"></script>'
    plain = f"<body><p>text</p>{script}</body>"
    assert hook.on_post_page(plain) == "<body><p>text</p></body>"
    diagram = f'<body><pre class="mermaid"><code>graph LR</code></pre>{script}</body>'
    assert hook.on_post_page(diagram) == diagram


@pytest.mark.parametrize("tex, text", [
    (r"all \(T\) positions", "all T positions"),
    (r"a \(V \times V\) table", "a V × V table"),
    (r"\(-\ln p(\text{true next character})\)", "-ln p(true next character)"),
    (r"\(e^{2} \approx 7.4\)", "e^2 ≈ 7.4"),
    (r"\(e^{\text{loss}}\)", "e^loss"),
    (r"\(1/\sqrt{d_k}\)", "1/√d_k"),
    (r"\(Q K^\top \in \mathbb{R}^{T \times T}\)", "Q Kᵀ ∈ R^(T × T)"),
    (r"\[ \operatorname{softmax}(z)_i = \frac{e^{z_i}}{\sum_j e^{z_j}} \]",
     "softmax(z)_i = (e^z_i)/(Σ_j e^z_j)"),
    (r"\(\begin{bmatrix}1 & 0 \\ 0 & 1\end{bmatrix}\)", "[1, 0; 0, 1]"),
    ("no math, a backslash \\ and (parentheses)", "no math, a backslash \\ and (parentheses)"),
])
def test_search_text_has_no_tex(tex, text):
    assert load_hook("search_math").plain_math(tex) == text


def test_search_index_is_rewritten(tmp_path):
    hook = load_hook("search_math")
    index = tmp_path / "search_index.json"
    index.write_text('{"config": {}, "docs": [{"location": "a/", "title": "The \\\\(\\\\ln V\\\\) '
                     'baseline", "text": "<p>all \\\\(T\\\\) positions</p>"}, {"location": "b/", '
                     '"title": "B", "text": "plain"}]}', encoding="utf-8")
    assert hook.rewrite_index(index) == 2
    docs = json.loads(index.read_text(encoding="utf-8"))["docs"]
    assert docs[0]["title"] == "The ln V baseline" and docs[0]["text"] == "<p>all T positions</p>"
    assert docs[1] == {"location": "b/", "title": "B", "text": "plain"}


def test_the_chinese_diffs_give_a_reason_for_every_changed_file():
    """Every reason stage_changes.json gives is in both languages, and every file a stage adds
    has a Chinese gist: the Chinese stage diffs never fall back to English."""
    from test_stage_copies import CHANGES, PAIRS

    hook = load_hook()
    for stage, reasons in CHANGES["changed"].items():
        for rel, pair in reasons.items():
            assert len(pair) == 2 and re.search(r"[\u4e00-\u9fff]", pair[1]), (stage, rel, pair)
    for old, new in PAIRS:
        out = hook.render_stage_diff(ROOT, old, new, lang="zh")
        whys = [line.rsplit("|", 2)[-2].strip() for line in out.splitlines()
                if line.startswith("| <a")]
        assert whys and all(re.search(r"[\u4e00-\u9fff]", w) for w in whys), (old, new, whys)


def test_chinese_closing_marks_stay_with_the_formula_before_them():
    hook = load_hook("line_breaks")
    math = '<span class="arithmatex">\\(B = 4\\)</span>'
    out = hook.keep_together(f"<p>（{math}，{math}）和 {math} 的</p>")
    assert out == (f'<p>（<span class="nobr">{math}，</span><span class="nobr">{math}）</span>'
                   f"和 {math} 的</p>")  # only a closing mark right after a formula is held
    assert hook.keep_together("<p>没有公式，也没有变化。</p>") == "<p>没有公式，也没有变化。</p>"


def test_a_flag_in_inline_code_is_never_split_after_its_hyphens():
    hook = load_hook("line_breaks")
    out = hook.keep_flags_whole("<p>Every flag <code>--resume</code> restores: <code>a --max-iters 5"
                                "</code>, not <code>x--y</code> nor <pre><code><span>--z</span></code></pre></p>")
    assert out == ('<p>Every flag <code><span class="nobr">--resume</span></code> restores: <code>a '
                   '<span class="nobr">--max-iters</span> 5</code>, not <code>x--y</code> nor '
                   "<pre><code><span>--z</span></code></pre></p>")


# ---------------------------------------------------------------------------
# Code that lives in a page (no stage has it) runs as it stands


RUNS_RE = re.compile(r"<!-- runs: [^>]*-->\n(?P<indent>[ \t]*)```python\n(?P<code>.*?)\n(?P=indent)```",
                     re.DOTALL)


def page_programs() -> list[tuple[str, str]]:
    """(page, code) of every python block a page marks with ``<!-- runs: ... -->``."""
    found = []
    for page in sorted((ROOT / "docs").rglob("*.md")):
        for m in RUNS_RE.finditer(page.read_text(encoding="utf-8")):
            code = textwrap.dedent("\n".join(line.removeprefix(m["indent"])
                                             for line in m["code"].split("\n")))
            found.append((page.relative_to(ROOT).as_posix(), code))
    return found


@pytest.mark.parametrize("page, code", page_programs(), ids=lambda v: v if v.endswith(".md") else "")
def test_page_code_runs_and_prints_what_its_comments_say(page, code):
    """Each ``print(...)  # WANT`` line of the block prints WANT."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, page, "exec"), {"__name__": "__page__"})  # noqa: S102
    wants = [line.rsplit("  # ", 1)[1] for line in code.splitlines()
             if line.startswith("print(") and "  # " in line]
    assert wants and out.getvalue().splitlines() == wants


def test_the_padding_box_of_both_editions_runs():
    pages = [page for page, _ in page_programs()]
    assert pages.count("docs/stage1_data.md") == pages.count("docs/zh/stage1_data.md") == 1


def test_annotations_mark_the_first_line_holding_each_text(tmp_path):
    """Notes on included code (docs/hooks/includes.py): the stage file stays as it is; the
    page's code gets Material's ``# (n)!`` markers, and a text no line holds fails."""
    hook = load_hook("includes")
    (tmp_path / "m.py").write_text("def f(x):\n    y = x + 1\n    return y * 2\n", encoding="utf-8")
    page = '<!-- annotate: (1) y = x | (2) return -->\n```python\n--8<-- "m.py:f"\n```\n'
    assert hook.include(page, tmp_path).split("\n")[:4] == [
        "```python", "def f(x):", "    y = x + 1  # (1)!", "    return y * 2  # (2)!"]
    assert "(1)" not in (tmp_path / "m.py").read_text(encoding="utf-8")
    with pytest.raises(hook.PluginError, match="no line of m.py:f contains 'z ='"):
        hook.include('<!-- annotate: (1) z = -->\n--8<-- "m.py:f"\n', tmp_path)


# ---------------------------------------------------------------------------
# Pages a learner finishes: the main path of a stage page is at most 3,000 words


MAIN_PATH_WORDS = 3000


def main_path_words(markdown: str) -> int:
    """The words a reader meets when reading a page straight through: its prose, outside
    code blocks, admonitions (depth boxes, tests, exercises: they open on demand), tables,
    HTML comments and included files; English words and numbers, each CJK character one."""
    kept, fence, box = [], None, False
    for line in markdown.split("\n"):
        s = line.strip()
        if fence:
            fence = None if s.startswith(fence) else fence
            continue
        if re.match(r"^(`{3,}|~{3,})", s) and not box:
            fence = re.match(r"^(`{3,}|~{3,})", s)[1]
            continue
        if re.match(r"^(\?\?\?\+?|!!!) ", line):
            box = True
            continue
        if box and (line.startswith("    ") or not s):
            continue
        box = False
        if not s.startswith(("<!--", "|", "--8<--")):
            kept.append(line)
    prose = re.sub(r"\$[^$]*\$|\{\{[^}]*\}\}|<[^>]+>|\]\([^)]*\)", " ", "\n".join(kept))
    return len(re.findall(r"[A-Za-z0-9'’]+|[\u3400-\u9fff]", prose))


@pytest.mark.parametrize("page", [f"stage{n}_{name}.md" for n, name in
                                  ((1, "data"), (2, "bigram"), (3, "attention"), (4, "block"),
                                   (5, "gpt"))])
def test_the_main_path_of_a_stage_page_is_at_most_3000_words(page):
    words = main_path_words((ROOT / "docs" / page).read_text(encoding="utf-8"))
    assert words <= MAIN_PATH_WORDS, f"{page}: {words} words outside boxes and code"
