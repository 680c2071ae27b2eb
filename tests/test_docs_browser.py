"""The built docs site, opened in a real headless Chromium, works fully offline.

The site is built once, served from 127.0.0.1, and every page in the nav is opened
with every request to any other host aborted (and recorded). For each page: HTTP 200,
no JavaScript errors, math typeset by KaTeX, images loaded, Mermaid diagrams drawn as
SVG, diff blocks syntax highlighted; then search (English and Chinese) and Chinese
glyphs. Screenshots go to $DOCS_SCREENSHOT_DIR when it is set.

Needs the PyPI package `playwright` and a system Chromium (`apt-get install chromium`);
`playwright install` is never needed. Without them the module is skipped, unless
GPT_TUTORIAL_REQUIRE_BROWSER=1, which turns the skip into a failure (for CI).
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from conftest import nav_pages

pytestmark = [pytest.mark.docs, pytest.mark.browser]

ROOT = Path(__file__).resolve().parents[1]
REQUIRE_BROWSER = os.environ.get("GPT_TUTORIAL_REQUIRE_BROWSER") == "1"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--headless",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    # Belt and braces next to the request routing below: no host name resolves.
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
]
TIMEOUT_MS = 20_000
ENGLISH_QUERY = ("attention", "stage3_attention")  # (typed, expected page in the results)
CHINESE_QUERY = ("字符级", "index")  # a word in the middle of a run of Chinese text


def unavailable(reason: str):
    """Skip, or fail when the browser tests are required (GPT_TUTORIAL_REQUIRE_BROWSER=1)."""
    if REQUIRE_BROWSER:
        pytest.fail(f"{reason} -- and GPT_TUTORIAL_REQUIRE_BROWSER=1 requires the browser tests",
                    pytrace=False)
    pytest.skip(reason)


def chromium_path() -> str | None:
    found = os.environ.get("CHROMIUM_PATH") or shutil.which("chromium") or shutil.which("chromium-browser")
    if found:
        return found
    return "/usr/bin/chromium" if Path("/usr/bin/chromium").is_file() else None


def is_local(url: str) -> bool:
    parts = urlsplit(url)
    if parts.scheme in ("data", "blob", "about", "file"):
        return True
    return parts.scheme in ("http", "https") and parts.hostname == "127.0.0.1"


def page_path(site: Path, md: str) -> str:
    stem = md[: -len(".md")]
    for candidate in (f"{stem}.html", f"{stem}/index.html", f"{stem}/"):
        if (site / candidate).is_file():
            return candidate
    raise AssertionError(f"no HTML output for {md}")


# ---------------------------------------------------------------------------
# Fixtures: build, serve, browse


@pytest.fixture(scope="module")
def playwright_api():
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        unavailable("the Python package 'playwright' is not installed (pip install -e '.[docs]')")
    exe = chromium_path()
    if exe is None:
        unavailable("no Chromium found (apt-get install -y chromium, or set CHROMIUM_PATH)")
    with sync_playwright() as p:
        try:
            browser = p.chromium.launch(executable_path=exe, args=CHROMIUM_ARGS, timeout=60_000)
        except Exception as err:  # noqa: BLE001 - any launch failure means "no usable browser"
            unavailable(f"Chromium at {exe} did not start: {err}")
        yield browser
        browser.close()


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    pytest.importorskip("mkdocs", reason="mkdocs is not installed (pip install -e '.[docs]')")
    out = tmp_path_factory.mktemp("docs") / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "PYTHONDONTWRITEBYTECODE": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(out)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, f"mkdocs build failed:\n{result.stdout}\n{result.stderr}"
    return out


class QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, *args):  # keep pytest output clean
        pass


@pytest.fixture(scope="module")
def base_url(site):
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(QuietHandler, directory=str(site)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def blocked():
    """Every request that tried to leave 127.0.0.1, over the whole module."""
    return []


# Material renders Mermaid into a *closed* shadow root; open it so tests can look inside.
OPEN_SHADOW_ROOTS = """
(() => {
  const attach = Element.prototype.attachShadow;
  Element.prototype.attachShadow = function (init) {
    return attach.call(this, Object.assign({}, init, { mode: "open" }));
  };
})();
"""


@pytest.fixture(scope="module")
def context(playwright_api, blocked):
    ctx = playwright_api.new_context(viewport={"width": 1280, "height": 900}, service_workers="block")
    ctx.set_default_timeout(TIMEOUT_MS)
    ctx.add_init_script(OPEN_SHADOW_ROOTS)

    def route(route):
        url = route.request.url
        if is_local(url):
            route.continue_()
        else:
            blocked.append(url)
            route.abort()

    ctx.route("**/*", route)
    # Requests that bypass routing (e.g. from workers) still show up here.
    ctx.on("request", lambda req: None if is_local(req.url) else blocked.append(req.url))
    yield ctx
    ctx.close()


@pytest.fixture(scope="module")
def screenshot_dir():
    folder = os.environ.get("DOCS_SCREENSHOT_DIR")
    if not folder:
        return None
    path = Path(folder)
    path.mkdir(parents=True, exist_ok=True)
    return path


def open_page(context, url):
    """Open url; returns (page, response, errors) with JS errors and console errors collected."""
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(f"page error: {exc}"))
    page.on("console", lambda msg: errors.append(f"console.{msg.type}: {msg.text}")
            if msg.type == "error" else None)
    response = page.goto(url, wait_until="load")
    return page, response, errors


PAGE_REPORT_JS = """
async () => {
  // Load every image now, lazy or not, then check it decoded to real pixels.
  const imgs = Array.from(document.images);
  imgs.forEach((img) => { img.loading = "eager"; });
  await Promise.all(imgs.map((img) => img.decode().catch(() => null)));
  const brokenImages = imgs
    .filter((img) => !img.complete || img.naturalWidth === 0)
    .map((img) => img.currentSrc || img.src);

  const article = document.querySelector("article.md-content__inner") || document.body;
  const text = article.cloneNode(true);
  text.querySelectorAll("pre, code, script, style, .katex-mathml").forEach((n) => n.remove());
  const visible = text.textContent;
  const rawTex = ["\\\\frac", "$$", "\\\\(", "\\\\[", "\\\\sum", "\\\\operatorname"]
    .filter((s) => visible.includes(s));

  const diffBlocks = Array.from(article.querySelectorAll(".language-diff"));
  return {
    title: document.title,
    math: article.querySelectorAll(".arithmatex").length,
    typeset: article.querySelectorAll(".arithmatex .katex").length,
    katexErrors: article.querySelectorAll(".katex-error").length,
    rawTex,
    brokenImages,
    images: imgs.length,
    diffs: diffBlocks.length,
    highlightedDiffs: diffBlocks.filter(
      (b) => b.closest(".highlight") && b.querySelector("span.gi, span.gd, span.gu, span.gh")
    ).length,
    stageDiffs: article.querySelectorAll(".stage-diff .highlight").length,
    stageDiffsHighlighted: Array.from(article.querySelectorAll(".stage-diff .highlight"))
      .filter((b) => b.querySelector("span.gi, span.gd")).length,
  };
}
"""

MERMAID_DONE_JS = """
(expected) => {
  const boxes = document.querySelectorAll("div.mermaid");
  if (boxes.length < expected) return false;
  return Array.from(boxes).every((b) => b.shadowRoot && b.shadowRoot.querySelector("svg"));
}
"""

MERMAID_REPORT_JS = """
() => Array.from(document.querySelectorAll("div.mermaid")).map((b) => {
  const svg = b.shadowRoot && b.shadowRoot.querySelector("svg");
  if (!svg) return null;
  const box = svg.getBoundingClientRect();
  return { width: box.width, height: box.height, nodes: svg.querySelectorAll("g.node").length,
           error: !!svg.querySelector(".error-icon, .error-text") };
})
"""


@pytest.fixture(scope="module")
def page_reports(context, base_url, site, screenshot_dir):
    """Open every page in the nav once and collect what the tests check."""
    reports = {}
    for md in nav_pages():
        path = page_path(site, md)
        html = (site / path).read_text(encoding="utf-8")
        expected_mermaid = html.count('class="mermaid"')
        page, response, errors = open_page(context, base_url + path)
        report = {"path": path, "status": response.status if response else None, "errors": errors,
                  "expected_mermaid": expected_mermaid, "mermaid": [], "mermaid_timeout": False}
        if expected_mermaid:
            try:
                page.wait_for_function(MERMAID_DONE_JS, arg=expected_mermaid, timeout=TIMEOUT_MS)
            except Exception:  # noqa: BLE001 - reported by the mermaid test
                report["mermaid_timeout"] = True
            report["mermaid"] = page.evaluate(MERMAID_REPORT_JS)
        report.update(page.evaluate(PAGE_REPORT_JS))
        if screenshot_dir is not None:
            name = path.replace("/", "_").removesuffix(".html") or "index"
            page.screenshot(path=str(screenshot_dir / f"{name}.png"), full_page=True)
        page.close()
        reports[md] = report
    return reports


# ---------------------------------------------------------------------------
# Per-page checks


def test_every_nav_page_loads(page_reports):
    assert page_reports, "the nav in mkdocs.yml lists no pages"
    bad = {md: r["status"] for md, r in page_reports.items() if r["status"] != 200}
    assert not bad, f"pages not served with HTTP 200: {bad}"
    errors = {md: r["errors"] for md, r in page_reports.items() if r["errors"]}
    assert not errors, f"JavaScript or console errors: {errors}"


def test_math_is_typeset(page_reports):
    assert any(r["math"] for r in page_reports.values()), "no page has math; the home page should"
    for md, r in page_reports.items():
        assert r["typeset"] == r["math"], f"{md}: {r['math']} formulas, {r['typeset']} typeset by KaTeX"
        assert r["katexErrors"] == 0, f"{md}: {r['katexErrors']} formulas KaTeX could not parse"
        assert not r["rawTex"], f"{md}: raw TeX left in the visible text: {r['rawTex']}"


def test_images_load(page_reports):
    broken = {md: r["brokenImages"] for md, r in page_reports.items() if r["brokenImages"]}
    assert not broken, f"images that did not load: {broken}"


def test_mermaid_renders_svg(page_reports):
    with_diagrams = {md: r for md, r in page_reports.items() if r["expected_mermaid"]}
    assert with_diagrams, "no page has a Mermaid diagram; the home page should"
    for md, r in with_diagrams.items():
        assert not r["mermaid_timeout"], f"{md}: Mermaid diagrams not rendered: {r['mermaid']}"
        assert len(r["mermaid"]) == r["expected_mermaid"], f"{md}: {r['mermaid']}"
        for svg in r["mermaid"]:
            assert svg and svg["width"] > 50 and svg["height"] > 20, f"{md}: empty diagram {svg}"
            assert svg["nodes"] > 0 and not svg["error"], f"{md}: Mermaid drew an error: {svg}"


def test_diffs_are_highlighted(page_reports):
    with_diffs = {md: r for md, r in page_reports.items() if r["diffs"]}
    if not with_diffs:
        pytest.skip("no page has a ```diff block yet (stage-diff markers appear once the "
                    "stage folders exist)")
    for md, r in with_diffs.items():
        assert r["highlightedDiffs"] == r["diffs"], (
            f"{md}: {r['diffs']} diff blocks, {r['highlightedDiffs']} highlighted by Pygments"
        )


def test_stage_diff_hook_output_is_shown(page_reports):
    with_stage_diffs = {md: r for md, r in page_reports.items() if r["stageDiffs"]}
    if not with_stage_diffs:
        pytest.skip("no page has an active <!-- stage-diff: A B --> marker yet")
    for md, r in with_stage_diffs.items():
        assert r["stageDiffsHighlighted"] == r["stageDiffs"], (
            f"{md}: stage diffs without highlighted +/- lines: {r}"
        )


# ---------------------------------------------------------------------------
# Chinese text and search


GLYPH_JS = """
(el) => {
  // Draw a Chinese string and a string of unassigned code points (which no font has,
  // so they come out as "tofu" boxes) in the element's own font. Without a CJK font
  // both are rows of identical boxes; with one, the pixels differ.
  const style = getComputedStyle(el);
  const font = `${style.fontSize} ${style.fontFamily}`;
  const draw = (s) => {
    const c = document.createElement("canvas");
    c.width = 200; c.height = 60;
    const g = c.getContext("2d");
    g.font = font; g.fillStyle = "#000"; g.textBaseline = "top";
    g.fillText(s, 4, 4);
    return { pixels: Array.from(g.getImageData(0, 0, 200, 60).data).join(","),
             width: g.measureText(s).width };
  };
  const han = draw("字符级"), tofu = draw("\\u0378\\u0379\\u0380"), other = draw("模型训");
  return { font, hanWidth: han.width, tofuWidth: tofu.width,
           differsFromTofu: han.pixels !== tofu.pixels,
           differsFromOtherHan: han.pixels !== other.pixels,
           inked: han.pixels.split(",").some((v, i) => i % 4 === 3 && v !== "0"),
           text: el.innerText };
}
"""


def test_chinese_text_renders_with_real_glyphs(context, base_url, site, screenshot_dir):
    page, _, _ = open_page(context, base_url + page_path(site, "index.md"))
    element = page.locator('[lang="zh-Hans"]').first
    assert element.count() == 1, "the home page should have a paragraph marked lang=zh-Hans"
    info = element.evaluate(GLYPH_JS)
    assert "字符级" in info["text"], info["text"]
    assert info["inked"], f"Chinese text drew nothing: {info}"
    assert info["differsFromTofu"] and info["differsFromOtherHan"], (
        f"Chinese text renders as boxes: no CJK font (apt-get install fonts-noto-cjk). {info}"
    )
    if screenshot_dir is not None:
        element.screenshot(path=str(screenshot_dir / "chinese-text.png"))
    page.close()


def search(context, base_url, site, query, screenshot_dir=None, name="search"):
    page, _, errors = open_page(context, base_url + page_path(site, "index.md"))
    box = page.locator("input.md-search__input")
    box.click()
    # fill() does not fire the events Material listens to; typing does. Characters
    # that are not on the keyboard (Chinese) are inserted without a keyup, which is
    # what Material reacts to, so finish with a key that makes one.
    box.press_sequentially(query, delay=40)
    box.press("End")
    page.wait_for_selector(".md-search-result__item", timeout=TIMEOUT_MS)
    links = page.locator(".md-search-result__item a").evaluate_all("as => as.map(a => a.href)")
    if screenshot_dir is not None:
        page.screenshot(path=str(screenshot_dir / f"{name}.png"))
    page.close()
    return links, errors


def _hits(links, expected_stem):
    return [u for u in links if urlsplit(u).path.rstrip("/").split("/")[-1].startswith(expected_stem)
            or (expected_stem == "index" and urlsplit(u).path.endswith("/"))]


def test_search_finds_an_english_term(context, base_url, site, screenshot_dir):
    query, expected = ENGLISH_QUERY
    links, errors = search(context, base_url, site, query, screenshot_dir, "search-en")
    assert not errors, errors
    assert _hits(links, expected), f"searching {query!r} did not find {expected}: {links}"


def test_search_finds_a_chinese_term(context, base_url, site, screenshot_dir):
    query, expected = CHINESE_QUERY
    links, errors = search(context, base_url, site, query, screenshot_dir, "search-zh")
    assert not errors, errors
    assert _hits(links, expected), f"searching {query!r} did not find {expected}: {links}"


def test_site_works_from_the_file_system(context, site):
    """Readers may open site/index.html directly: math, diagrams and search still work."""
    index = site / page_path(site, "index.md")
    page, _, errors = open_page(context, index.as_uri())
    diagrams = index.read_text(encoding="utf-8").count('class="mermaid"')
    if diagrams:
        page.wait_for_function(MERMAID_DONE_JS, arg=diagrams, timeout=TIMEOUT_MS)
    report = page.evaluate(PAGE_REPORT_JS)
    assert report["math"] and report["typeset"] == report["math"], report
    box = page.locator("input.md-search__input")
    box.click()
    box.press_sequentially(ENGLISH_QUERY[0], delay=40)
    box.press("End")
    page.wait_for_selector(".md-search-result__item", timeout=TIMEOUT_MS)
    page.close()
    assert not errors, errors


# Runs last (tests run in file order): the whole module's traffic stayed local.
def test_no_request_left_localhost(page_reports, blocked):
    assert page_reports
    assert not blocked, f"requests to other hosts (aborted): {sorted(set(blocked))}"
