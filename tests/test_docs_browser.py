"""The built docs site, opened in a real headless Chromium, works fully offline.

The site is built once, served from 127.0.0.1, and every page in the nav is opened
with every request to any other host recorded (and failing: no other host name
resolves). For each page: HTTP 200, no JavaScript errors, math typeset by KaTeX, images
loaded and each a link to its full-size file, Mermaid diagrams drawn as SVG, no table wider than the page column at
1280 px, no code block wider than its box at 1280 px (a line too long wraps, with a hanging
indent, on the screen only), display formulas inside the column (scrolling in their own block where they
are wider), stage diffs as a summary plus one collapsible block per file, diff blocks
syntax highlighted; then the same pages on a 390 px phone (formulas and tables scroll
in their own box, the page itself never sideways); then search (English and Chinese,
result snippets without TeX) and Chinese glyphs. Screenshots go to
$DOCS_SCREENSHOT_DIR when it is set.

Needs the PyPI package `playwright` and a system Chromium (`apt-get install chromium`);
`playwright install` is never needed. Without them the module is skipped, unless
GPT_TUTORIAL_REQUIRE_BROWSER=1, which turns the skip into a failure (for CI).
"""

from __future__ import annotations

import functools
import json
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
def playwright_session():
    """Playwright itself and the Chromium it drives."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        unavailable("the Python package 'playwright' is not installed (pip install -e '.[docs]')")
    exe = chromium_path()
    if exe is None:
        unavailable("no Chromium found (apt-get install -y chromium, or set CHROMIUM_PATH)")
    with sync_playwright() as p:
        yield p, exe


@pytest.fixture(scope="module")
def playwright_api(playwright_session):
    p, exe = playwright_session
    try:
        browser = p.chromium.launch(executable_path=exe, args=CHROMIUM_ARGS, timeout=60_000)
    except Exception as err:  # noqa: BLE001 - any launch failure means "no usable browser"
        unavailable(f"Chromium at {exe} did not start: {err}")
    yield browser
    browser.close()


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """Both editions, built --strict once per session: by the first test module that asks,
    in any pytest-xdist worker (three modules use it; each build costs about 15 s of CPU),
    the others waiting on a lock and reading the same folder."""
    pytest.importorskip("mkdocs", reason="mkdocs is not installed (pip install -e '.[docs]')")
    from filelock import FileLock  # a dependency of torch

    # The workers' temporary folders share a parent, made for this session alone.
    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent
    out, zh_result = shared / "docs-site", shared / "docs-site-zh.json"
    with FileLock(shared / "docs-site.lock"):
        if not zh_result.is_file():
            build_site(out, zh_result)
    result = json.loads(zh_result.read_text(encoding="utf-8"))
    assert result["en"]["returncode"] == 0, (
        f"mkdocs build failed:\n{result['en']['stdout']}\n{result['en']['stderr']}")
    if result["zh"] is not None:
        # A failure here fails test_chinese_edition_builds, not every test of the module.
        ZH_BUILD[:] = [subprocess.CompletedProcess([], **result["zh"])]
    return out


def build_site(out: Path, results_file: Path) -> None:
    """Build the English edition into out and the Chinese one into out/zh, as `make docs`
    does for readers: at the same time (one core each), then moved under it (a build
    empties its own folder first). Writes each build's exit code and output to results_file."""
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "PYTHONDONTWRITEBYTECODE": "1"}
    zh = (ROOT / "mkdocs.zh.yml").is_file()
    targets = [["-d", str(out)]] + [["-f", "mkdocs.zh.yml", "-d", str(out.parent / "docs-site-zh")]] * zh
    builds = [subprocess.Popen([sys.executable, "-m", "mkdocs", "build", "--strict", *args], cwd=ROOT,
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
              for args in targets]
    results = []
    for build in builds:  # communicate() first: waiting on a full pipe would never end
        stdout, stderr = build.communicate(timeout=600)
        results.append({"returncode": build.returncode, "stdout": stdout, "stderr": stderr})
    if zh and results[0]["returncode"] == 0 and results[1]["returncode"] == 0:
        shutil.move(out.parent / "docs-site-zh", out / "zh")
    results_file.write_text(json.dumps({"en": results[0], "zh": results[1] if zh else None}),
                            encoding="utf-8")


ZH_BUILD: list[subprocess.CompletedProcess] = []  # the Chinese edition's build, if any


class QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, *args):  # keep pytest output clean
        pass


class QuietServer(ThreadingHTTPServer):
    def handle_error(self, request, client_address):
        # A page closed while a file was still being sent (BrokenPipeError): the test
        # moved on; nothing to report.
        pass


@pytest.fixture(scope="module")
def base_url(site):
    server = QuietServer(("127.0.0.1", 0), functools.partial(QuietHandler, directory=str(site)))
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


def offline(ctx, site: Path, blocked: list[str]):
    """Set up a browser context as every test here browses: each request to another host
    recorded in blocked (the resolver rules of CHROMIUM_ARGS make it fail; routing each
    request through Python to abort it would cost about 7 s over the pages), and each
    edition's search given an index of no pages. Material builds the index in a worker at
    every page load (0.75 and 0.9 MB of text here): about a fifth of the CPU a tour of the
    pages costs. The tests of search ask for the real one (open_page's real_search)."""
    def empty_index(route):
        index = site / urlsplit(route.request.url).path.lstrip("/")
        config = json.loads(index.read_text(encoding="utf-8"))["config"]
        route.fulfill(json={"config": config, "docs": []})

    ctx.on("request", lambda req: None if is_local(req.url) else blocked.append(req.url))
    ctx.route(SEARCH_INDEX, empty_index)
    return ctx


SEARCH_INDEX = "**/search/search_index.json"


@pytest.fixture(scope="module")
def context(playwright_session, blocked, chromium_profile, site):
    # A profile on disk, unlike a new_context(): Chromium then keeps the compiled code of
    # the scripts every page loads (KaTeX, Mermaid's 3.5 MB), and a page opens in about half
    # the time after the first (index.html 1.2 s -> 0.5 s, stage1_data.html 1.9 s -> 1.0 s).
    p, exe = playwright_session
    try:
        ctx = p.chromium.launch_persistent_context(
            chromium_profile, executable_path=exe, args=CHROMIUM_ARGS,
            timeout=60_000, viewport={"width": 1280, "height": 900}, service_workers="block")
    except Exception as err:  # noqa: BLE001 - any launch failure means "no usable browser"
        unavailable(f"Chromium at {exe} did not start: {err}")
    ctx.set_default_timeout(TIMEOUT_MS)
    ctx.add_init_script(OPEN_SHADOW_ROOTS)
    yield offline(ctx, site, blocked)
    ctx.close()


@pytest.fixture(scope="module")
def screenshot_dir():
    folder = os.environ.get("DOCS_SCREENSHOT_DIR")
    if not folder:
        return None
    path = Path(folder)
    path.mkdir(parents=True, exist_ok=True)
    return path


def attach_listeners(page, errors: list[str]) -> None:
    """Collect the page's JavaScript errors and console errors into ``errors``."""
    page.on("pageerror", lambda exc: errors.append(f"page error: {exc}"))
    page.on("console", lambda msg: errors.append(f"console.{msg.type}: {msg.text}")
            if msg.type == "error" else None)


def one_tab(context, urls):
    """Open each url in turn in one tab, as a reader clicks from page to page (a new tab per
    page costs a renderer process: about 5 s over the nav's pages). Yields (url, page,
    response, errors), the errors of that page only."""
    page, errors = context.new_page(), []
    attach_listeners(page, errors)
    try:
        for url in urls:
            errors.clear()
            yield url, page, page.goto(url, wait_until="load"), errors
    finally:
        page.close()


def open_page(context, url, real_search: bool = False):
    """Open url in a new tab; returns (page, response, errors), errors as attach_listeners.
    real_search: the site's search index, not the empty one of offline()."""
    page, errors = context.new_page(), []
    attach_listeners(page, errors)
    if real_search:  # a page's routes come before its context's
        page.route(SEARCH_INDEX, lambda route: route.continue_())
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
  const column = article.getBoundingClientRect();
  const px = (r) => Math.round(r.width);
  // Tables: none wider than the column of the page.
  const wideTables = Array.from(article.querySelectorAll("table"))
    .filter((t) => t.getBoundingClientRect().width > column.width + 1)
    .map((t) => `${(t.querySelector("th") || {}).textContent}: ${px(t.getBoundingClientRect())} px`);
  // Figures: every image a link to its own file.
  const unlinked = imgs.filter((img) => article.contains(img))
    .filter((img) => { const a = img.closest("a"); return !a || a.href !== img.src; })
    .map((img) => img.src);
  const figureLinks = Array.from(article.querySelectorAll("a.figure-link")).map((a) => a.href);
  // The phone's hint under a figure ("scroll sideways ...") is not shown at this width.
  const figureHints = Array.from(article.querySelectorAll("a.figure-link"))
    .map((a) => getComputedStyle(a, "::after").content).filter((c) => !["none", "normal"].includes(c));
  // Display formulas: inside the column; wider ones scroll in their own block.
  const formulas = Array.from(article.querySelectorAll("div.arithmatex"));
  const formulaProblems = formulas.map((d) => {
    const r = d.getBoundingClientRect(), ox = getComputedStyle(d).overflowX;
    const tex = d.textContent.slice(0, 40);
    if (r.right > column.right + 1 || r.left < column.left - 1) return `outside the column: ${tex}`;
    if (d.scrollWidth > d.clientWidth + 1 && !["auto", "scroll"].includes(ox)) return `clipped: ${tex}`;
    return null;
  }).filter((x) => x);
  // Stage diffs: a summary table first, then one collapsible block per file;
  // model.py and train.py open, the rest closed; hunk links point at headings here.
  const stageDiffBoxes = Array.from(article.querySelectorAll(".stage-diff")).map((box) => {
    const files = Array.from(box.querySelectorAll("details.stage-diff-file"));
    const name = (d) => d.querySelector("summary code").textContent;
    const summary = box.querySelector(".stage-diff-summary table");
    return {
      summaryRows: summary ? summary.querySelectorAll("tbody tr").length : 0,
      summaryFirst: !!summary && (!files.length
        || (summary.compareDocumentPosition(files[0]) & Node.DOCUMENT_POSITION_FOLLOWING) > 0),
      files: files.length,
      wronglyOpen: files.filter((d) => d.open !== (files.length === 1
        || ["model.py", "train.py"].includes(name(d).split("/").pop()))).map(name),
      links: Array.from(box.querySelectorAll("a.stage-diff-link")).map((a) => a.getAttribute("href")),
      deadLinks: Array.from(box.querySelectorAll("a.stage-diff-link"))
        .filter((a) => !document.getElementById(decodeURIComponent(a.hash.slice(1))))
        .map((a) => a.getAttribute("href")),
    };
  });
  return {
    wideTables, unlinked, figureLinks, figureHints, formulas: formulas.length, formulaProblems, stageDiffBoxes,
    pageWidth: document.documentElement.scrollWidth,
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

# Code blocks at 1280 px, as a reader sees them who opens every collapsible block and every
# tab (the page is put back as it was afterwards): none wider than its box (scrolling
# sideways hides the ends of the lines, where the shape comments are); a block whose lines
# wrap indents its continuations (text-indent ... hanging each-line), and what its copy
# button copies (Material copies innerText, trimmed at the end) is its text as written,
# no line break added where a line wraps on the screen; no code shrunk below 10 px to fit.
CODE_FIT_JS = """
() => {
  const article = document.querySelector("article.md-content__inner") || document.body;
  const closed = Array.from(article.querySelectorAll("details:not([open])"));
  closed.forEach((d) => { d.open = true; });
  const tabs = document.createElement("style");
  tabs.textContent = ".tabbed-set > .tabbed-content > .tabbed-block { display: block !important; }";
  document.head.append(tabs);
  const blocks = Array.from(article.querySelectorAll("pre > code"));
  const first = (c) => JSON.stringify(c.textContent.split("\\n")[0].slice(0, 80));
  const report = { blocks: blocks.length, cut: [], miscopied: [], unindented: [], tiny: [], wrapped: 0 };
  for (const c of blocks) {
    const style = getComputedStyle(c);
    if (c.scrollWidth > c.clientWidth + 1) {
      report.cut.push(`${first(c)}: ${c.scrollWidth} px in a box of ${c.clientWidth}`);
    }
    // Material's code annotations (the numbered markers) are not copied: compare without them
    const markers = Array.from(c.querySelectorAll(".md-annotation"));
    const saved = markers.map((m) => m.style.display);
    markers.forEach((m) => { m.style.display = "none"; });
    const bare = c.cloneNode(true);
    bare.querySelectorAll(".md-annotation").forEach((m) => m.remove());
    const shown = c.innerText;
    markers.forEach((m, i) => { m.style.display = saved[i]; });
    if (shown.trimEnd() !== bare.textContent.trimEnd()) report.miscopied.push(first(c));
    if (parseFloat(style.fontSize) < 10) report.tiny.push(`${first(c)}: ${style.fontSize}`);
    const lines = c.textContent.replace(/\\n$/, "").split("\\n").length;
    const height = c.scrollHeight - parseFloat(style.paddingTop) - parseFloat(style.paddingBottom);
    if (height > (lines + 0.5) * parseFloat(style.lineHeight)) {  // some line wraps
      report.wrapped += 1;
      const indent = style.textIndent;
      if (!(indent.includes("hanging") && indent.includes("each-line") && parseFloat(indent) > 0)
          && !c.closest(".wrap")) {  // generated samples (.wrap) are prose
        report.unindented.push(`${first(c)}: text-indent ${indent}`);
      }
    }
  }
  tabs.remove();
  closed.forEach((d) => { d.open = false; });
  return report;
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
    """Open every page in the nav once, at 1280 px and on a 390 px phone, and collect what
    the tests check. The phone is the browser emulating a touch screen of 390 px, as a
    context with is_mobile=True does, on the same tab: loading each page a second time costs
    1-4 s a page, and each switch of width about 0.5 s (a new layout). So the widths take
    turns: a page loaded at 1280 px is then seen on the phone, and the next one, loaded on
    the phone, is then seen at 1280 px; half the pages are first drawn at each width."""
    reports = {}
    chinese = [f"zh/{md}" for md in nav_pages()] if (site / "zh").is_dir() else []
    paths = {base_url + page_path(site, md): md for md in [*nav_pages(), *chinese]}
    cdp, phone = None, False
    for url, page, response, errors in one_tab(context, paths):
        md, path = paths[url], url.removeprefix(base_url)
        cdp = cdp or context.new_cdp_session(page)
        expected_mermaid = (site / path).read_text(encoding="utf-8").count('class="mermaid"')
        report = {"path": path, "status": response.status if response else None,
                  "expected_mermaid": expected_mermaid, "mermaid": [], "mermaid_timeout": False,
                  "mermaid_loaded": page.evaluate("typeof window.mermaid !== 'undefined'"),
                  "loaded_at": page.evaluate("window.innerWidth")}
        if expected_mermaid:
            try:
                page.wait_for_function(MERMAID_DONE_JS, arg=expected_mermaid, timeout=TIMEOUT_MS)
            except Exception:  # noqa: BLE001 - reported by the mermaid test
                report["mermaid_timeout"] = True
        name = path.replace("/", "_").removesuffix(".html") or "index"
        looks = ((False, phone), (True, not phone))  # (switch first?, phone?): the second
        for switch, phone in looks:  # width stays for the next page's load
            if switch:
                cdp.send("Emulation.setDeviceMetricsOverride", PHONE if phone else DESKTOP)
                cdp.send("Emulation.setTouchEmulationEnabled", {"enabled": phone, "maxTouchPoints": 1})
            if phone:
                report["phone"] = page.evaluate(PHONE_JS)
            else:
                report["mermaid"] = page.evaluate(MERMAID_REPORT_JS) if expected_mermaid else []
                report.update(page.evaluate(PAGE_REPORT_JS))
                report["code"] = page.evaluate(CODE_FIT_JS)
            if screenshot_dir is not None:
                shot = f"{name}-390.png" if phone else f"{name}.png"
                page.screenshot(path=str(screenshot_dir / shot), full_page=True)
        reports[md] = report | {"errors": list(errors)}
    return reports  # the tab is closed, and the phone with it


def test_the_pages_are_seen_at_both_widths(page_reports):
    loaded = {r["loaded_at"] for r in page_reports.values()}
    assert loaded == {DESKTOP["width"], PHONE["width"]}, f"pages loaded at {loaded} px only"
    for md, r in page_reports.items():
        widths = (r["pageWidth"], r["phone"]["width"])
        assert widths[0] > 1200 and widths[1] <= PHONE["width"], f"{md}: seen at {widths} px"


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
    loaded = [md for md, r in page_reports.items() if r["mermaid_loaded"] and not r["expected_mermaid"]]
    assert not loaded, f"Mermaid's 3.5 MB loaded on pages without a diagram: {loaded}"


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


def test_chinese_edition_builds(site):
    if not ZH_BUILD:
        pytest.skip("no mkdocs.zh.yml: no Chinese edition")
    result = ZH_BUILD[0]
    assert result.returncode == 0, (
        f"mkdocs build -f mkdocs.zh.yml failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")


def test_no_table_is_wider_than_the_page_column(page_reports):
    wide = {md: r["wideTables"] for md, r in page_reports.items() if r["wideTables"]}
    assert not wide, f"tables wider than the page column at 1280 px: {wide}"


def test_no_code_block_scrolls_sideways_at_1280(page_reports):
    """Every `pre > code` of every page, both editions, every collapsible block opened and
    every tab shown: none is wider than its box at 1280 px (scrollWidth > clientWidth)."""
    assert sum(r["code"]["blocks"] for r in page_reports.values()) > 100
    cut = [f"{md}: {block}" for md, r in page_reports.items() for block in r["code"]["cut"]]
    assert not cut, (f"{len(cut)} code blocks scroll sideways at 1280 px (first line: "
                     "width):\n" + "\n".join(cut))


def test_wrapped_code_hangs_and_copies_as_written(page_reports):
    """Lines too long for the page wrap, visibly as continuations, and only on the screen."""
    assert sum(r["code"]["wrapped"] for r in page_reports.values()) > 0, "no line wraps: is it still tested?"
    for key, what in (("unindented", "wrap without a hanging indent"),
                      ("miscopied", "copy differently from their text"),
                      ("tiny", "are set below 10 px")):
        bad = {md: r["code"][key] for md, r in page_reports.items() if r["code"][key]}
        assert not bad, f"code blocks that {what} at 1280 px: {bad}"


def test_figures_link_to_their_full_size_file(page_reports, context):
    unlinked = {md: r["unlinked"] for md, r in page_reports.items() if r["unlinked"]}
    assert not unlinked, f"images that are not a link to their own file: {unlinked}"
    links = sorted({u for r in page_reports.values() for u in r["figureLinks"]})
    assert links, "no figure links at all: the figures hook did not run"
    for url in links:
        response = context.request.get(url)
        assert response.status == 200 and response.headers["content-type"].startswith("image/"), (
            f"{url}: {response.status} {response.headers.get('content-type')}")


def test_display_formulas_stay_in_the_column(page_reports):
    bad = {md: r["formulaProblems"] for md, r in page_reports.items() if r["formulaProblems"]}
    assert not bad, f"display formulas clipped or outside the column at 1280 px: {bad}"


def test_stage_diffs_are_a_summary_and_one_block_per_file(page_reports):
    boxes = {md: r["stageDiffBoxes"] for md, r in page_reports.items() if r["stageDiffBoxes"]}
    assert boxes, "no page shows a stage diff"
    many = [(md, b) for md, bs in boxes.items() for b in bs if b["files"] > 1]
    assert many, "no stage diff of a whole stage (several files)"
    for md, bs in boxes.items():
        for b in bs:
            if not b["files"]:
                continue
            assert b["summaryRows"] == b["files"] and b["summaryFirst"], f"{md}: {b}"
            assert not b["wronglyOpen"], f"{md}: open/closed the wrong way: {b['wronglyOpen']}"
            assert not b["deadLinks"], f"{md}: hunk links to no heading: {b['deadLinks']}"
    stage_pages = [b for md, bs in boxes.items() if md.startswith("stage") for b in bs]
    assert any(b["links"] for b in stage_pages), "no hunk links to the section explaining it"


# ---------------------------------------------------------------------------
# A 390 px phone

PHONE = {"width": 390, "height": 844, "deviceScaleFactor": 1, "mobile": True}
DESKTOP = {"width": 1280, "height": 900, "deviceScaleFactor": 1, "mobile": False}
PHONE_JS = """
() => {
  const article = document.querySelector("article.md-content__inner") || document.body;
  const width = document.documentElement.clientWidth;
  const scrolls = (el) => ["auto", "scroll"].includes(getComputedStyle(el).overflowX);
  const formulas = Array.from(article.querySelectorAll("div.arithmatex")).map((d) => {
    const r = d.getBoundingClientRect();
    return { tex: d.textContent.slice(0, 40), inside: r.left >= -1 && r.right <= width + 1,
             fits: d.scrollWidth <= d.clientWidth + 1, scrolls: scrolls(d) };
  });
  const tables = Array.from(article.querySelectorAll("table")).map((t) => {
    const box = t.closest(".md-typeset__scrollwrap") || t;
    const r = box.getBoundingClientRect();
    const first = t.querySelector("tbody tr > :first-child");
    return { head: (t.querySelector("th") || {}).textContent, inside: r.left >= -1 && r.right <= width + 1,
             fits: box.scrollWidth <= box.clientWidth + 1, scrolls: scrolls(box),
             sticky: !!first && getComputedStyle(first).position === "sticky" };
  });
  // Chinese: a closing mark right after an inline formula never starts a line.
  const markStarts = [];
  const walker = document.createTreeWalker(article, NodeFilter.SHOW_TEXT);
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    const k = n.previousSibling;
    if (!"，。、；：？！）".includes(n.textContent[0] || "x") || !k || !k.classList
        || !k.classList.contains("arithmatex")) continue;
    const r = document.createRange();
    r.setStart(n, 0);
    r.setEnd(n, 1);
    const a = r.getBoundingClientRect(), b = k.getBoundingClientRect();
    if (a.height && b.height && a.top > b.bottom - 2) markStarts.push(k.textContent.slice(0, 30));
  }
  // Figures keep 600 px and scroll in their box; a hint under each says so, in the page's language.
  const figures = Array.from(article.querySelectorAll("a.figure-link")).map((a) => {
    const hint = getComputedStyle(a, "::after");
    return { src: (a.querySelector("img") || {}).src, hint: hint.content,
             scrolls: a.scrollWidth > a.clientWidth + 1, shown: hint.display !== "none",
             visible: a.getClientRects().length > 0 };  // not in a closed tab or box
  });
  return { width, pageWidth: document.documentElement.scrollWidth, formulas, tables, markStarts,
           figures, lang: document.documentElement.lang };
}
"""


@pytest.fixture(scope="module")
def phone_reports(page_reports):
    """What :data:`PHONE_JS` found on each page once page_reports had turned it into a phone."""
    return {md: {**r["phone"], "errors": r["errors"]} for md, r in page_reports.items()}


def test_phone_lines_never_start_with_a_closing_mark_after_a_formula(phone_reports):
    starts = {md: r["markStarts"] for md, r in phone_reports.items() if r["markStarts"]}
    assert not starts, f"a line starts with a closing mark after a formula at 390 px: {starts}"


def test_phone_formulas_fit_or_scroll_in_their_own_block(phone_reports):
    assert any(r["formulas"] for r in phone_reports.values())
    for md, r in phone_reports.items():
        bad = [f for f in r["formulas"] if not f["inside"] or not (f["fits"] or f["scrolls"])]
        assert not bad, f"{md}: formulas that leave the screen or are clipped at 390 px: {bad}"


def test_phone_tables_keep_their_numbers_in_reach(phone_reports):
    for md, r in phone_reports.items():
        bad = [t for t in r["tables"] if not t["inside"] or not (t["fits"] or t["scrolls"])]
        assert not bad, f"{md}: tables that leave the screen at 390 px: {bad}"
        # A table that scrolls keeps its first column (the row's name) in view.
        loose = [t["head"] for t in r["tables"] if not t["fits"] and not t["sticky"]]
        assert not loose, f"{md}: scrolling tables without a sticky first column: {loose}"


def test_phone_figures_scroll_with_a_hint_in_the_pages_language(phone_reports, page_reports):
    """A figure wider than a 390 px screen scrolls in its box, with a line under it saying so
    (in Chinese on the Chinese edition); at 1280 px the figure fits and no hint shows."""
    seen = 0
    for md, r in phone_reports.items():
        want = "左右滑动" if r["lang"].startswith("zh") else "scroll sideways"
        bad = [f["src"] for f in r["figures"] if not (f["shown"] and want in f["hint"])]
        assert not bad, f"{md} ({r['lang']}): figures without the hint at 390 px: {bad}"
        still = [f["src"] for f in r["figures"] if f["visible"] and not f["scrolls"]]
        assert not still, f"{md}: figures that do not scroll in their box at 390 px: {still}"
        seen += sum(f["visible"] for f in r["figures"])
    assert seen, "no figure in view on the phone"
    shown = {md: r["figureHints"] for md, r in page_reports.items() if r["figureHints"]}
    assert not shown, f"the phone's figure hint shows at 1280 px: {shown}"


def test_phone_page_never_scrolls_sideways(phone_reports):
    wide = {md: r["pageWidth"] for md, r in phone_reports.items() if r["pageWidth"] > r["width"] + 1}
    assert not wide, f"pages wider than a 390 px screen: {wide}"


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


def _hits(links, expected_stem):
    return [u for u in links if urlsplit(u).path.rstrip("/").split("/")[-1].startswith(expected_stem)
            or (expected_stem == "index" and urlsplit(u).path.endswith("/"))]


def test_search_finds_an_english_term(searches):
    query, expected = ENGLISH_QUERY
    links, _, errors = searches[query]
    assert not errors, errors
    assert _hits(links, expected), f"searching {query!r} did not find {expected}: {links}"


def test_search_finds_a_chinese_term(searches):
    query, expected = CHINESE_QUERY
    links, _, errors = searches[query]
    assert not errors, errors
    assert _hits(links, expected), f"searching {query!r} did not find {expected}: {links}"


def test_search_snippets_hold_no_raw_tex(site, searches):
    index = json.loads((site / "search" / "search_index.json").read_text(encoding="utf-8"))
    with_tex = [d["location"] for d in index["docs"]
                if any(t in d["title"] + d["text"] for t in ("\\(", "\\["))]
    assert not with_tex, f"search index entries with TeX: {with_tex[:10]}"
    _, texts, errors = searches[MATH_QUERY]
    assert not errors, errors
    snippets = "\n".join(texts)
    assert "ln V" in snippets, f"the snippets should quote the baseline as text: {snippets[:600]}"
    found = [t for t in RAW_TEX if t in snippets]
    assert not found, f"raw TeX {found} in the search result snippets: {snippets[:600]}"


# The Chinese edition: its own search (jieba words), the switch, the glyphs.
ZH_QUERIES = (  # the word, then the pages that teach it, the first of them ranked first
    ("层归一化", ["stage4_block"]),
    ("注意力", ["stage3_attention", "stage4_block"]),
    ("位置编码", ["stage3_attention"]))
MISSING = ("Missing", "缺少")  # Material's note on a result that lacks a query term


MATH_QUERY = "baseline"  # its sections quote ln V, 1/V, ln 65 ... as math
RAW_TEX = ("\\(", "\\)", "\\[", "\\]", "\\frac", "\\ln", "\\times", "\\text", "\\approx", "$")
SEARCHES = {"index.md": (ENGLISH_QUERY[0], CHINESE_QUERY[0], MATH_QUERY),
            "zh/index.md": tuple(query for query, _ in ZH_QUERIES)}


SETTLED_JS = """() => {
  const now = [...document.querySelectorAll(".md-search-result__item a")].map((a) => a.href).join(" ");
  const settled = now !== "" && now === window.lastResults;
  window.lastResults = now;
  return settled;
}"""


@pytest.fixture(scope="module")
def searches(context, base_url, site, screenshot_dir) -> dict[str, tuple[list, list, list]]:
    """Each query of SEARCHES typed in turn into the search box of its edition's home page
    (one page for all, as a reader searches again): query -> (result links, result texts,
    the page's errors so far)."""
    found = {}
    for start, queries in SEARCHES.items():
        if start.startswith("zh/") and not (site / "zh" / "index.html").is_file():
            continue  # test_chinese_edition_builds says why
        page, _, errors = open_page(context, base_url + page_path(site, start), real_search=True)
        box = page.locator("input.md-search__input")
        box.click()
        for query in queries:
            box.press("Control+a")
            box.press("Backspace")  # an empty box: the last results go
            page.wait_for_selector(".md-search-result__item", state="detached", timeout=TIMEOUT_MS)
            # fill() does not fire the events Material listens to; typing does. Characters
            # that are not on the keyboard (Chinese) are inserted without a keyup, which is
            # what Material reacts to, so finish with a key that makes one.
            box.press_sequentially(query, delay=40)
            box.press("End")
            # The results of each prefix typed show on the way: read them once they stay put.
            try:
                page.wait_for_function(SETTLED_JS, polling=250, timeout=TIMEOUT_MS)
            except Exception:  # noqa: BLE001 - no results: the query's own test says so
                found[query] = ([], [], list(errors))
                continue
            items = page.locator(".md-search-result__item")
            found[query] = (items.locator("a").evaluate_all("as => as.map(a => a.href)"),
                            items.evaluate_all("as => as.map(a => a.innerText)"), list(errors))
            if screenshot_dir is not None:
                page.screenshot(path=str(screenshot_dir / f"search-{len(found)}.png"))
        page.close()
    return found


def _zh_site(site):
    if not (site / "zh" / "index.html").is_file():
        pytest.fail("the Chinese edition was not built (see test_chinese_edition_builds)")


@pytest.mark.parametrize("query, expected", ZH_QUERIES, ids=["layernorm", "attention", "positions"])
def test_chinese_search_finds_words(site, searches, query, expected):
    _zh_site(site)
    links, texts, errors = searches[query]
    assert not errors, errors
    pages = [urlsplit(u).path for u in links]
    assert all("/zh/" in p for p in pages), f"{query!r} found pages outside zh/: {pages}"
    stems = [p.rstrip("/").split("/")[-1].removesuffix(".html") for p in pages]
    # The pages that teach the word are found, and the page that introduces it first.
    assert set(expected) <= set(stems), f"{query!r} should find {expected}: {stems}"
    assert stems[0] == expected[0], f"{query!r}: {expected[0]} should come first: {stems}"
    # The pages that teach the word match it whole, with no "missing" note (Material cut
    # the query short of its last character: docs/hooks/zh_search.py fixes that).
    titles = [(ROOT / "docs" / "zh" / f"{stem}.md").read_text(encoding="utf-8").split("\n")[0]
              .removeprefix("# ").split(" {#")[0] for stem in expected]
    notes = [t for t in texts if any(m in t for m in MISSING)
             and t.replace("\u200b", "").startswith(tuple(titles))]
    assert not notes, f"{query!r}: results say a term is missing: {notes[:3]}"


@pytest.mark.parametrize("start, lang, lands", [
    ("workbook.md", "zh", "zh/workbook.html"),  # light pages: the switch is the same on all
    ("zh/troubleshooting.md", "en", "troubleshooting.html"),
], ids=["en-to-zh", "zh-to-en"])
def test_language_switch_lands_on_the_same_page(context, base_url, site, start, lang, lands):
    _zh_site(site)
    page, _, errors = open_page(context, base_url + page_path(site, start))
    page.locator(".md-header__option .md-select").hover()
    with page.expect_navigation():
        page.locator(f'a.md-select__link[hreflang="{lang}"]').click()
    assert urlsplit(page.url).path == "/" + lands, page.url
    assert page.locator("html").get_attribute("lang").startswith(lang)
    page.close()
    assert not errors, errors


def test_chinese_edition_renders_with_real_glyphs(context, base_url, site, screenshot_dir):
    _zh_site(site)
    page, _, _ = open_page(context, base_url + page_path(site, "zh/index.md"))
    info = page.locator("article p").first.evaluate(GLYPH_JS)
    assert info["inked"] and info["differsFromTofu"] and info["differsFromOtherHan"], info
    page.close()


def test_stage_diff_file_names_keep_their_underscores(site):
    # A file name in the summary table is Markdown too: __init__.py must not turn bold.
    html = (site / page_path(site, "stage2_bigram.md")).read_text(encoding="utf-8")
    assert "<code>__init__.py</code>" in html and "<code>__main__.py</code>" in html
    assert "<strong>init</strong>" not in html and "<strong>main</strong>" not in html


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


def test_a_link_to_a_depth_box_opens_it(context, base_url, site):
    """A link to the anchor above a closed depth box (the glossary's "Stage 5, presets")
    opens the box, on load and when the hash changes within the page."""
    box = "(id) => document.getElementById(id).parentElement.nextElementSibling"
    page, _, errors = open_page(context, base_url + page_path(site, "stage5_gpt.md") + "#presets")
    try:
        assert page.evaluate(f"({box})('presets').open")
        assert not page.evaluate(f"({box})('faster-on-a-cpu').open")
        page.evaluate("() => { location.hash = '#faster-on-a-cpu'; }")
        page.wait_for_function(f"() => ({box})('faster-on-a-cpu').open",
                               timeout=TIMEOUT_MS)
    finally:
        page.close()
    assert not errors, errors
