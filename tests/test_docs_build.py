"""The docs site builds with `mkdocs build --strict`, and its build-time machinery works.

- the real site builds without a single warning and references no other host;
- a snippet include (`--8<-- "file.py:section"`) of a missing section fails the build;
- the stage-diff hook (docs/hooks/stage_diff.py) renders correct unified diffs and
  fails the build for a folder that does not exist.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import nav_pages

pytest.importorskip(
    "mkdocs", reason="mkdocs is not installed (pip install -e '.[docs]' installs the docs toolchain)"
)
pytest.importorskip("material", reason="mkdocs-material is not installed (see the 'docs' extra)")
pytest.importorskip("pymdownx", reason="pymdown-extensions is not installed (see the 'docs' extra)")

pytestmark = pytest.mark.docs

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "mkdocs.yml"
HOOK = ROOT / "docs" / "hooks" / "stage_diff.py"
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


def load_hook():
    spec = importlib.util.spec_from_file_location("stage_diff_hook", HOOK)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ---------------------------------------------------------------------------
# The real site


def test_site_builds_strict(tmp_path):
    site = tmp_path / "site"
    result = mkdocs_build(CONFIG, site)
    assert result.returncode == 0, f"mkdocs build --strict failed:\n{result.stdout}\n{result.stderr}"

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
# Snippets: a missing section fails the build


SNIPPET_SOURCE = '''\
"""A stand-in for a stage module."""

# --8<-- [start:present]
def present():
    return "this function is included in the docs"
# --8<-- [end:present]
'''


@pytest.fixture
def scratch_repo(tmp_path):
    """A copy of the repository (docs, config, code) where one nav page can be rewritten."""
    repo = tmp_path / "repo"
    shutil.copytree(ROOT, repo, ignore=COPY_IGNORE, symlinks=True)
    (repo / "snippet_fixture").mkdir()
    (repo / "snippet_fixture" / "model.py").write_text(SNIPPET_SOURCE, encoding="utf-8")
    return repo


def _page_including(section: str) -> str:
    return textwrap.dedent(
        f"""\
        # Comparing the stages

        ```python
        --8<-- "snippet_fixture/model.py:{section}"
        ```
        """
    )


def test_snippet_section_is_included(scratch_repo, tmp_path):
    (scratch_repo / "docs" / "compare.md").write_text(_page_including("present"), encoding="utf-8")
    result = mkdocs_build(scratch_repo / "mkdocs.yml", tmp_path / "site")
    assert result.returncode == 0, f"build failed:\n{result.stdout}\n{result.stderr}"
    html = built_page(tmp_path / "site", "compare.md").read_text(encoding="utf-8")
    assert "this function is included in the docs" in html
    assert "--8&lt;--" not in html and "[start:present]" not in html, "section markers leaked"


def test_snippet_missing_section_fails_build(scratch_repo, tmp_path):
    (scratch_repo / "docs" / "compare.md").write_text(_page_including("no_such_section"), encoding="utf-8")
    result = mkdocs_build(scratch_repo / "mkdocs.yml", tmp_path / "site")
    output = result.stdout + result.stderr
    assert result.returncode != 0, f"a missing snippet section should fail the build:\n{output}"
    assert "no_such_section" in output, f"the error should name the missing section:\n{output}"


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
    assert "Unchanged: `same.py`." in md
    assert '```diff title="stage_a → stage_b"' in md
    assert "--- stage_a/changed.py\n+++ stage_b/changed.py\n" in md
    assert "-    return 1\n+    return 2\n" in md
    assert "--- stage_a/only_a.py\n+++ /dev/null\n" in md and "-gone = True" in md
    assert "--- /dev/null\n+++ stage_b/only_b.py\n" in md and "+new = True" in md
    assert "+++ stage_b/sub/nested.py" in md
    assert "__pycache__" not in md and "corpus" not in md and "notes.txt" not in md
    # The fence is closed and the block is wrapped for styling/tests.
    assert md.startswith('<div class="stage-diff" markdown>') and md.endswith("</div>")
    assert md.count("```") == 2


def test_hook_single_file_and_identical(two_stages):
    hook = load_hook()
    md = hook.render_stage_diff(two_stages, "stage_a", "stage_b", "changed.py")
    assert "--- stage_a/changed.py" in md and "only_a.py" not in md and "Unchanged" not in md
    assert 'title="stage_a → stage_b (changed.py)"' in md
    same = hook.render_stage_diff(two_stages, "stage_a", "stage_b", "same.py")
    assert "```" not in same and "`same.py` is identical in `stage_a` and `stage_b`." in same
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
    assert "\n`````diff " in md and md.removesuffix("</div>").rstrip().endswith("`````")


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


def test_hook_in_a_build_fails_for_missing_folder(two_stages):
    config = _tiny_site(two_stages, "# Diff\n\n<!-- stage-diff: stage_a stage_missing -->\n")
    result = mkdocs_build(config, two_stages / "site")
    output = result.stdout + result.stderr
    assert result.returncode != 0, f"a missing stage folder should fail the build:\n{output}"
    assert "stage_missing" in output and "index.md" in output, output
