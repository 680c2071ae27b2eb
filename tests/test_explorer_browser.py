"""The attention explorer in a real headless Chromium: the page's forward pass against PyTorch.

The built site is served from 127.0.0.1 (as in tests/test_docs_browser.py, whose fixtures
this module reuses: same skip rules, GPT_TUTORIAL_REQUIRE_BROWSER=1 turns a skip into a
failure). The page's JavaScript runs several prompts (for each of the three models, English,
Chinese and Tang poems: one character, its example and block_size characters long) through
the exported weights; PyTorch runs the same
prompts through the same files loaded into stage5_gpt.model.GPT; logits and every
attention weight must agree to 1e-4. Both read the very same float16 numbers (turned into
float32 exactly), so storing the weights as float16 loosens nothing here: what is left is
PyTorch's float32 arithmetic against the page's float64. The exports must also be current
(the explorer job not stale: not older than stage5_gpt/ or its own code). Then the widget
as a reader uses it: layers and heads numbered from 0, newlines in the prompt and in what
it samples, unknown characters, the crop to block_size, the switch between the three
models, keyboard, sampling, and on a line of verse the very next character the page's text
quotes (facts explorer.<model>.verse_next); a 390 px phone in dark mode. The budgets (model bytes, first render,
one full-length forward pass) are measured and printed. The Chinese edition's page
(docs/zh/explorer.md, under <site>/zh) runs the same code on the English site's weights,
in Chinese: its texts, notes and aria-labels, the three models, agreement with PyTorch on
Chinese prompts, 1280 and 390 px in light and dark. Screenshots go to
$EXPLORER_SCREENSHOT_DIR when it is set.
"""

from __future__ import annotations

import base64
import json
import os
import re
from pathlib import Path

import pytest
import test_docs_browser as docs_browser
import torch
from test_docs_browser import TIMEOUT_MS, offline, one_tab, open_page, page_path
from test_explorer import explorer

from tools.docs import stale

# The docs browser tests' fixtures, used here as they are: build, serve, browse offline.
playwright_session, playwright_api = docs_browser.playwright_session, docs_browser.playwright_api
site, base_url = docs_browser.site, docs_browser.base_url
blocked, context = docs_browser.blocked, docs_browser.context

pytestmark = [pytest.mark.docs, pytest.mark.browser]

ROOT = Path(__file__).resolve().parents[1]
FOLDER = ROOT / "docs" / "generated" / "explorer"
TOLERANCE = 1e-4  # the same float16 weights on both sides: float32 against float64 arithmetic
READY = "() => [...document.querySelectorAll('.gpt-explorer')].every((e) => e.dataset.state === 'ready')"


def corpus_text(lang: str, example: str) -> str:
    """The text the model was trained on: a built-in corpus, or the Tang poems where the docs
    tool cached them (python -m tools.docs; else the model's example, repeated)."""
    from tools.docs.store import CACHE, CLASSIC

    for path in (ROOT / "stage5_gpt" / "corpus" / f"{lang}.txt", CACHE / "data" / CLASSIC.get(lang, "-")):
        if path.is_file():
            return path.read_text(encoding="utf-8")
    return example * 200


def corpus_prompt(lang: str, vocab: list[str], length: int, example: str = "") -> str:
    """``length`` characters of the corpus the model was trained on."""
    text = corpus_text(lang, example)
    known = set(vocab)  # a set: the Chinese corpus is 554,350 characters, its vocabulary 3,109
    return "".join(ch for ch in text if ch in known)[1000:1000 + length]


@pytest.fixture(scope="module")
def shots():
    folder = os.environ.get("EXPLORER_SCREENSHOT_DIR")
    if not folder:
        return None
    Path(folder).mkdir(parents=True, exist_ok=True)
    return Path(folder)


def newline_prompt(lang: str, model, vocab: list[str]) -> str:
    """A prompt after which the model's most likely next character is a newline: the
    issue's example where it is one, else the first corpus line (its last block_size - 2
    characters, so that two more fit before the page crops) that is."""
    text = (ROOT / "stage5_gpt" / "corpus" / f"{lang}.txt").read_text(encoding="utf-8")
    known = set(vocab)
    lines = [line for line in text.split("\n") if line and known.issuperset(line)]
    T = model.config.block_size
    candidates = ["TEACHER: Pip the fox ran home."] * (lang == "en") + [x[-(T - 2):] for x in lines[:200]]
    for prompt in candidates:
        if known.issuperset(prompt) and greedy_next(model, vocab, prompt) == "\n":
            return prompt
    raise AssertionError(f"no corpus line of {lang} ends where the model expects a newline")


def greedy_next(model, vocab: list[str], prompt: str) -> str:
    """What temperature 0 samples after ``prompt`` (its last block_size characters)."""
    ids = [vocab.index(ch) for ch in prompt][-model.config.block_size:]
    with torch.no_grad():
        return vocab[int(model(torch.tensor([ids]))[0][0, -1].argmax())]


@pytest.fixture(scope="module")
def exports():
    """The exported models, loaded into PyTorch; fails first if an export is stale."""
    behind = [job.name for job in stale(explorer.JOBS)]
    assert not behind, ("the explorer's exports are older than stage5_gpt/ or "
                        "tools/docs/pages/explorer.py: run python -m tools.docs explorer")
    return {lang: explorer.load_export(FOLDER / f"{lang}.json") for lang in explorer.EXAMPLES}


@pytest.fixture(scope="module")
def explorer_page(context, base_url, site):
    page, response, errors = open_page(context, base_url + page_path(site, "explorer.md"))
    assert response.status == 200
    page.wait_for_function(READY, timeout=TIMEOUT_MS)
    yield page, errors
    page.close()


def unpack(b64: str) -> torch.Tensor:
    """A float64 array the page handed over as the base64 of its bytes."""
    return torch.frombuffer(bytearray(base64.b64decode(b64)), dtype=torch.float64)


def agreement(page, exports, langs=None) -> dict[str, tuple[float, float]]:
    """Runs prompts through the page's forward pass and PyTorch; asserts they agree to 1e-4.

    Per model: one character, its example, and block_size characters of its corpus.
    Returns the largest |JS - PyTorch| of logits and of attention weights, per run.
    """
    worst = {}
    for lang, (model, vocab, header) in exports.items():
        if langs is not None and lang not in langs:
            continue
        T = header["config"]["block_size"]
        prompts = [vocab[len(vocab) // 2], header["example"], corpus_prompt(lang, vocab, T, header["example"])]
        assert [len(p) for p in prompts][::2] == [1, T]
        for prompt in prompts:
            ids = [vocab.index(ch) for ch in prompt]
            got = page.evaluate("([lang, ids]) => window.gptExplorer.forward(lang, ids)", [lang, ids])
            idx = torch.tensor([ids])
            with torch.no_grad():
                logits = model(idx)[0][0].double()
                maps = model.attention_maps(idx)[0].double()  # (n_layer, n_head, T, T)
            js_logits = unpack(got["logits"]).view(got["T"], got["V"])
            js_maps = torch.stack([torch.stack([unpack(h) for h in layer]) for layer in got["maps"]])
            dl = (js_logits - logits).abs().max().item()
            dm = (js_maps.view(maps.shape) - maps).abs().max().item()
            worst[f"{lang} T={len(ids)}"] = (dl, dm)
            assert dl < TOLERANCE and dm < TOLERANCE, (lang, prompt, dl, dm)
            # The next-character ranking a reader sees is PyTorch's.
            assert int(js_logits[-1].argmax()) == int(logits[-1].argmax())
    return worst


def print_worst(worst: dict[str, tuple[float, float]]) -> None:
    print("\nlargest |JS - PyTorch| (logits, attention weights):")
    for name, (dl, dm) in worst.items():
        print(f"  {name:10s} {dl:.2e}  {dm:.2e}")


def test_page_agrees_with_pytorch(explorer_page, exports):
    page, errors = explorer_page
    print_worst(agreement(page, exports))
    assert not errors, errors


def test_budgets(explorer_page, exports):
    """Measured and printed; asserted only loosely (this machine may be busy)."""
    page, _ = explorer_page
    size = sum((FOLDER / f"{lang}.{ext}").stat().st_size for lang in exports for ext in ("json", "bin"))
    first = page.evaluate("() => window.gptExplorer.firstRender")
    lines = [f"model files, all {len(exports)} models: {size:,} bytes ({size / 2**20:.2f} MiB; budget 8 MiB)",
             f"first interactive render: {first:.0f} ms after navigation start (budget 2000 ms)"]
    for lang, (_, vocab, header) in exports.items():
        T = header["config"]["block_size"]
        ids = [vocab.index(ch) for ch in corpus_prompt(lang, vocab, T, header["example"])]
        ms = page.evaluate("([lang, ids]) => window.gptExplorer.time(lang, ids, 5)", [lang, ids])
        lines.append(f"one forward pass, {lang}, T={T}: {ms:.1f} ms (median of 5; budget 50 ms)")
        assert ms < 1000
    print("\n" + "\n".join(lines))
    assert size <= 8 * 2**20
    assert 0 < first < 20_000


def widget_state(page) -> dict:
    return page.evaluate("""() => {
      const root = document.querySelector('.gpt-explorer');
      return {
        prompt: root.querySelector('.gx-prompt').value,
        tag: root.querySelector('.gx-prompt').tagName,
        reads: root.querySelector('.gx-reads-text').textContent,
        grid: root.querySelector('.gx-grid').innerText.replace(/\\s+/g, ' ').trim(),
        model: root.querySelector('.gx-models input:checked').value,
        notes: root.querySelector('.gx-notes').innerText,
        status: root.querySelector('.gx-status').innerText,
        thumbs: root.querySelectorAll('.gx-thumb').length,
        pressed: [...root.querySelectorAll('.gx-thumb')].findIndex((b) => b.getAttribute('aria-pressed') === 'true'),
        top: [...root.querySelectorAll('.gx-top li')].map((li) => li.innerText.replace(/\\s+/g, ' ')),
        probs: [...root.querySelectorAll('.gx-top li')].map((li) => Number(li.dataset.p)),
        readout: root.querySelector('.gx-bigbox .gx-readout').innerText,
        bigWidth: root.querySelector('canvas.gx-big').width,
      };
    }""")


def test_a_reader_can_use_it(explorer_page, exports, shots):
    page, errors = explorer_page
    root = page.locator(".gpt-explorer").first
    start = widget_state(page)
    assert start["model"] == "en" and start["prompt"] == exports["en"][2]["example"]
    assert start["thumbs"] == 16 and start["pressed"] == 0 and len(start["top"]) == 10
    assert start["bigWidth"] > 100
    # Layers and heads count from 0, as everywhere in the course.
    assert start["grid"] == "head 0 head 1 head 2 head 3 layer 0 layer 1 layer 2 layer 3"
    assert "Layer 0, head 0:" in root.locator(".gx-bigbox figcaption").inner_text()
    assert "layers 0 to 3" in root.locator(".gx-gridbox .gx-help").inner_text()
    if shots:
        root.screenshot(path=str(shots / "explorer-en-1280-light.png"))

    # Unknown characters are shown and explained; the rest still runs.
    box = root.locator(".gx-prompt")
    box.fill("Pip said “héllo” to 🦊")
    state = widget_state(page)
    for ch in ("é", "“", "🦊", "U+00E9"):
        assert ch in state["notes"], state["notes"]
    assert "vocabulary" in state["notes"] and len(state["top"]) == 10
    box.fill("é")
    state = widget_state(page)
    assert "at least one character" in state["status"] and state["top"] == []
    box.fill("x" * 70)
    notes = widget_state(page)["notes"]
    # What generate() and stream() really do past block_size, with and without the cache.
    for words in ("reads only the last 64 characters (6 left out at the start)",
                  "without the KV cache they read the last 64 characters at every step",
                  "start the cache again from the last 32"):
        assert words in notes, notes

    # Keyboard: a thumbnail by Enter, the query row by arrow keys.
    box.fill("TEACHER: Pip the fox")
    thumb = root.locator(".gx-thumb").nth(5)
    assert thumb.get_attribute("aria-label") == "layer 1, head 1"
    thumb.focus()
    page.keyboard.press("Enter")
    state = widget_state(page)
    assert state["pressed"] == 5 and "Layer 1, head 1:" in root.locator(".gx-bigbox figcaption").inner_text()
    last = state["readout"]
    root.locator("canvas.gx-big").focus()
    page.keyboard.press("Home")
    assert widget_state(page)["readout"].startswith("Query “T” (position 0)")
    page.keyboard.press("ArrowDown")
    assert "(position 1)" in widget_state(page)["readout"] and widget_state(page)["readout"] != last

    # Temperature 0 is greedy; Sample appends one character.
    temperature = root.locator("input[type=range]")
    temperature.focus()
    page.keyboard.press("Home")  # the range's own keys: Home is its minimum, 0
    state = widget_state(page)
    assert state["top"][0].endswith("100%") and state["probs"] == [1]  # no rows of p = 0
    root.locator(".gx-sample").click()
    assert len(widget_state(page)["prompt"]) == len("TEACHER: Pip the fox") + 1
    newlines(page, root, "en", exports["en"])
    root.locator(".gx-topk").fill("3")
    temperature.evaluate("(e) => { e.value = '1'; e.dispatchEvent(new Event('input')); }")
    probs = widget_state(page)["probs"]
    assert len(probs) == 3 and all(p > 0 for p in probs) and abs(sum(probs) - 1) < 1e-9, probs

    # The Chinese model: its own example replaces the English one.
    box.fill(exports["en"][2]["example"])
    root.locator(".gx-models input[value=zh]").check()
    page.wait_for_function(READY)
    state = widget_state(page)
    assert state["model"] == "zh" and state["prompt"] == exports["zh"][2]["example"]
    assert state["notes"] == "" and len(state["top"]) == 3  # top-k is still 3
    if shots:
        root.screenshot(path=str(shots / "explorer-zh-1280-light.png"))
    verse(page, root, exports)
    if shots:
        root.screenshot(path=str(shots / "explorer-tang-1280-light.png"))
    assert not errors, errors


def verse(page, root, exports) -> None:
    """The page's section on verse: after 床前明月光，疑是地上 each Chinese model's most likely
    next character in the widget is the one the text quotes, and PyTorch's; the Tang model
    is the third choice and starts from its own example."""
    facts = json.loads((FOLDER / "facts.json").read_text(encoding="utf-8"))
    box = root.locator(".gx-prompt")
    for lang in ("zh", "tang"):
        root.locator(f".gx-models input[value={lang}]").check()
        page.wait_for_function(READY)
        if lang == "tang":
            assert widget_state(page)["prompt"] == exports["tang"][2]["example"]
        box.fill(explorer.VERSE)
        state = widget_state(page)
        model, vocab, _ = exports[lang]
        assert state["model"] == lang and state["top"][0].split(" ")[0] == facts[f"{lang}.verse_next"]
        assert facts[f"{lang}.verse_next"] == explorer.next_after(model, vocab, explorer.VERSE)[0][0]


def newlines(page, root, lang: str, export) -> None:
    """A newline is a character: typed with Enter, shown as ⏎, and sampled like any other.
    Needs temperature 0 (greedy) set."""
    model, vocab, _ = export
    box = root.locator(".gx-prompt")
    assert widget_state(page)["tag"] == "TEXTAREA"
    prompt = newline_prompt(lang, model, vocab)
    box.fill(prompt)
    state = widget_state(page)
    assert state["top"][0].startswith("⏎ ") and state["reads"] == prompt.replace(" ", "␣")
    root.locator(".gx-sample").click()  # greedy: the newline the model expects
    state = widget_state(page)
    assert state["prompt"] == prompt + "\n", repr(state["prompt"])
    assert state["reads"].endswith("⏎") and state["notes"] == ""
    after = greedy_next(model, vocab, prompt + "\n")
    root.locator(".gx-sample").click()  # and the page goes on from the new line
    assert widget_state(page)["prompt"] == prompt + "\n" + after
    # Enter in the prompt is a newline too, read by the model.
    box.fill(prompt)
    box.press("End")
    box.press("Enter")
    state = widget_state(page)
    assert state["prompt"] == prompt + "\n" and state["reads"].endswith("⏎")
    assert state["top"][0].split(" ")[0] == {" ": "␣", "\n": "⏎"}.get(after, after)


def own_context(playwright_api, site, blocked, **options):
    """A browser context of a test's own (its width, its colour scheme), offline as the
    shared one is (test_docs_browser.offline)."""
    return offline(playwright_api.new_context(service_workers="block", **options), site, blocked)


@pytest.mark.parametrize("lang", ["en", "zh", "tang"])
def test_phone_dark_mode(playwright_api, base_url, site, blocked, exports, shots, lang):
    ctx = own_context(playwright_api, site, blocked, viewport={"width": 390, "height": 844},
                      is_mobile=True, has_touch=True, color_scheme="dark")
    page, _, errors = open_page(ctx, base_url + page_path(site, "explorer.md"))
    page.wait_for_function(READY, timeout=TIMEOUT_MS)
    if lang != "en":
        page.locator(f".gx-models input[value={lang}]").first.check()
        page.wait_for_function(READY)
    assert page.evaluate("document.body.dataset.mdColorScheme") == "slate"
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= 391, f"the explorer page scrolls sideways at 390 px: {width}"
    # Tap a character of the head view: it becomes the query.
    view = page.locator("canvas.gx-headview").first
    view.tap(position={"x": 8, "y": 20})
    assert "(position 0)" in page.locator(".gx-viewbox .gx-readout").first.inner_text()
    colors = page.evaluate("getComputedStyle(document.querySelector('.gpt-explorer'))"
                           ".getPropertyValue('--gx-cold').trim()")
    assert colors.lower() != "#ffffff", "dark mode should draw the maps on a dark background"
    if shots:
        page.locator(".gpt-explorer").first.screenshot(path=str(shots / f"explorer-{lang}-390-dark.png"))
        page.screenshot(path=str(shots / f"explorer-{lang}-390-dark-page.png"), full_page=True)
    ctx.close()
    assert not errors, errors


def test_dark_mode_at_1280(playwright_api, base_url, site, blocked, shots):
    # A context of its own: Material keeps the scheme it first chose in localStorage.
    ctx = own_context(playwright_api, site, blocked, viewport={"width": 1280, "height": 900},
                      color_scheme="dark")
    page, _, errors = open_page(ctx, base_url + page_path(site, "explorer.md"))
    page.wait_for_function(READY, timeout=TIMEOUT_MS)
    assert page.evaluate("document.body.dataset.mdColorScheme") == "slate"
    if shots:
        page.locator(".gpt-explorer").first.screenshot(path=str(shots / "explorer-en-1280-dark.png"))
        page.locator(".gx-models input[value=zh]").first.check()
        page.wait_for_function(READY)
        page.locator(".gpt-explorer").first.screenshot(path=str(shots / "explorer-zh-1280-dark.png"))
    ctx.close()
    assert not errors, errors


BIG_MAP_JS = """() => {
  const canvas = document.querySelector('.gpt-explorer canvas.gx-big'), box = canvas.parentElement;
  const r = canvas.getBoundingClientRect();
  return { width: r.width, height: r.height, box: box.clientWidth, scroll: box.scrollWidth,
           page: document.documentElement.scrollWidth };
}"""


@pytest.mark.parametrize("width", [1280, 390])
def test_the_large_map_fits_its_box(playwright_api, base_url, site, blocked, shots, width):
    """The large map is never wider than its box (it scrolled sideways in it, block_size
    characters at 14 px and more being wider than the box), with either model, for the
    example and for a prompt of block_size characters; at 1280 px its cells stay 12 px or
    more (the map goes below the small maps when it does not fit beside them), and a row
    under the pointer (or the finger) is the row the map draws there. Layout only: the
    export headers (vocabulary, example) are read as they are, current or not."""
    phone = width < 500
    ctx = own_context(playwright_api, site, blocked, is_mobile=phone, has_touch=phone,
                      viewport={"width": width, "height": 844 if phone else 900})
    page, _, errors = open_page(ctx, base_url + page_path(site, "explorer.md"))
    page.wait_for_function(READY, timeout=TIMEOUT_MS)
    root = page.locator(".gpt-explorer").first
    big = root.locator("canvas.gx-big")
    for lang in ("en", "zh", "tang"):
        if lang != "en":
            root.locator(f".gx-models input[value={lang}]").check()
            page.wait_for_function(READY)
        header = json.loads((FOLDER / f"{lang}.json").read_text(encoding="utf-8"))
        vocab, T = header["vocab"], header["config"]["block_size"]
        for prompt in (header["example"], corpus_prompt(lang, vocab, T, header["example"])):
            root.locator(".gx-prompt").fill(prompt)
            size = page.evaluate(BIG_MAP_JS)
            where = f"{lang}, {len(prompt)} characters, {width} px: {size}"
            assert size["width"] <= size["box"] and size["scroll"] <= size["box"], where
            assert size["page"] <= width + 1, where
            if not phone:
                assert size["width"] >= 12 * len(prompt), f"cells under 12 px: {where}"
        # The row second from the bottom, as the map's own geometry has it.
        cell = (size["height"] - 2) / (T + 1.1)  # the tick labels take about 1.1 cells
        spot = {"x": size["width"] / 2, "y": size["height"] - 2 - 1.5 * cell}
        big.tap(position=spot) if phone else big.hover(position=spot)
        readout = root.locator(".gx-bigbox .gx-readout").inner_text()
        assert f"(position {T - 2})" in readout, (where, readout)
        if shots:
            root.locator(".gx-bigbox").screenshot(path=str(shots / f"explorer-big-map-{lang}-{width}.png"))
    ctx.close()
    assert not errors, errors


def test_every_page_with_an_explorer_draws_it(context, base_url, site):
    """The full page, and the compact version wherever a page includes it."""
    pages = [p for p in sorted(site.glob("*.html")) if 'class="gpt-explorer"' in p.read_text(encoding="utf-8")]
    assert "explorer.html" in [p.name for p in pages]
    for url, page, _, errors in one_tab(context, [base_url + path.name for path in pages]):
        page.wait_for_function(READY, timeout=TIMEOUT_MS)
        assert page.locator(".gpt-explorer .gx-top li").count() >= 10
        assert not errors, (url, errors)


def test_from_the_file_system_it_explains_instead_of_failing(context, site):
    page, _, errors = open_page(context, (site / page_path(site, "explorer.md")).as_uri())
    page.wait_for_function("() => document.querySelector('.gpt-explorer').dataset.state === 'error'")
    why, todo = failure(page)
    assert why.startswith("What failed: ") and "file system" in why and "/generated/explorer/en.json" in why
    assert todo.startswith("What to do: ") and "make docs-serve" in todo
    assert "http://127.0.0.1:8000/explorer.html" in todo
    page.close()
    # Material's own look-up of the sitemap fails from file:// too; none of ours may.
    ours = [e for e in errors if e.startswith("page error") or "explorer" in e]
    assert not ours, ours


def test_the_export_header_is_small(exports):
    """The header holds the configuration, the tensors' places and the vocabulary, never
    weights: under 16 kB besides at most 10 bytes a character of the vocabulary (a 汉字 is
    three bytes of UTF-8, then its quotes, comma, newline and indent)."""
    for lang in exports:
        header = json.loads((FOLDER / f"{lang}.json").read_text(encoding="utf-8"))
        size = (FOLDER / f"{lang}.json").stat().st_size
        assert size < 16_000 + 10 * len(header["vocab"]), (lang, size)
        assert header["dtype"] == "float16"


# ---------------------------------------------------------------------------
# The Chinese edition: the same widget on docs/zh/explorer.md, Chinese texts, the
# English site's weights.

CJK = "[\u3400-\u4dbf\u4e00-\u9fff]"


@pytest.fixture(scope="module")
def zh_site(site):
    """<site>/zh, built by the shared ``site`` fixture beside the English edition."""
    zh = site / "zh"
    if not (zh / "explorer.html").is_file():
        tried = docs_browser.ZH_BUILD
        pytest.fail("the Chinese edition did not build: "
                    + (f"\n{tried[0].stdout}\n{tried[0].stderr}" if tried else "no mkdocs.zh.yml"))
    return zh


def zh_url(base_url: str, zh_site: Path, md: str = "explorer.md") -> str:
    return base_url + "zh/" + page_path(zh_site, md)


@pytest.fixture(scope="module")
def zh_explorer_page(context, base_url, zh_site):
    page, response, errors = open_page(context, zh_url(base_url, zh_site))
    assert response.status == 200
    page.wait_for_function(READY, timeout=TIMEOUT_MS)
    yield page, errors
    page.close()


def widget_texts(page) -> dict:
    """What a reader of the widget sees and hears: its text and every aria-label."""
    return page.evaluate("""() => {
      const root = document.querySelector('.gpt-explorer');
      return {
        text: root.innerText,
        labels: [...root.querySelectorAll('[aria-label]')].map((e) => e.getAttribute('aria-label')),
        placeholder: root.querySelector('.gx-topk').placeholder,
        lang: document.documentElement.lang,
      };
    }""")


def test_zh_edition_reads_the_english_sites_weights(zh_site, site):
    html = (zh_site / page_path(zh_site, "explorer.md")).read_text(encoding="utf-8")
    assert 'src="../assets/javascripts/explorer.js"' in html and 'data-lang="zh"' in html
    # One copy of the weights: the English site's (mkdocs.zh.yml excludes them).
    assert (site / "generated" / "explorer" / "zh.bin").is_file()
    assert not (zh_site / "generated" / "explorer").exists()


def test_zh_edition_agrees_with_pytorch_in_chinese(zh_explorer_page, exports):
    page, errors = zh_explorer_page
    state = widget_state(page)
    # The Chinese edition starts from the Chinese model and its example.
    assert state["model"] == "zh" and state["prompt"] == exports["zh"][2]["example"]
    assert state["thumbs"] == 16 and len(state["top"]) == 10
    print_worst(agreement(page, exports, ["zh"]))
    # What the widget shows for a Chinese prompt is PyTorch's next-character distribution.
    model, vocab, header = exports["zh"]
    prompt = corpus_prompt("zh", vocab, 20)
    page.locator(".gpt-explorer .gx-prompt").fill(prompt)
    with torch.no_grad():
        want = torch.softmax(model(torch.tensor([[vocab.index(ch) for ch in prompt]]))[0][0, -1].double(), -1)
    state = widget_state(page)
    top = want.topk(10)
    shown = {" ": "␣", "\n": "⏎", "\t": "⇥"}  # as the widget writes invisible characters
    assert [s.split(" ")[0] for s in state["top"]] == [shown.get(vocab[i], vocab[i]) for i in top.indices.tolist()]
    assert max(abs(a - b) for a, b in zip(state["probs"], top.values.tolist(), strict=True)) < TOLERANCE
    assert not errors, errors


def test_zh_edition_speaks_chinese_and_loads_every_model(zh_explorer_page, exports, shots):
    page, errors = zh_explorer_page
    root = page.locator(".gpt-explorer").first
    box = root.locator(".gx-prompt")
    box.fill(exports["zh"][2]["example"])
    seen = widget_texts(page)
    assert seen["lang"].startswith("zh")
    for text in ("模型", "提示词", "中文模型：", "英文", "中文", "唐诗", "第 0 层，第 0 个头：", "第 0 层到第 3 层", "头 0",
                 "回车键换行", "模型读入的字符（⏎ 是换行，␣ 是空格）：", "头视图", "下一个字符", "温度",
                 "采样下一个字符"):
        assert text in seen["text"], (text, seen["text"])
    english = re.findall(r"[A-Za-z]{4,}", seen["text"])
    assert english == [], f"English left in the Chinese widget: {english}"
    assert seen["labels"] and all(re.search(CJK, label) for label in seen["labels"]), seen["labels"]
    assert seen["placeholder"] == "全部"
    if shots:
        root.screenshot(path=str(shots / "explorer-zh-edition-1280-light.png"))

    # Notes and messages in Chinese: unknown characters, truncation, nothing to read, greedy.
    box.fill("小狐狸说🦊")
    state = widget_state(page)
    assert "已略去" in state["notes"] and "🦊" in state["notes"] and "U+1F98A" in state["notes"], state["notes"]
    assert len(state["top"]) == 10
    box.fill("🦊")
    assert "请至少输入一个中文模型认识的字符" in widget_state(page)["status"]
    long = ("".join(ch for ch in exports["zh"][2]["example"] if ch != "\n") * 70)[:70]
    box.fill(long)
    notes = widget_state(page)["notes"]
    for words in ("模型只读最后 64 个字符（开头略去了 6 个）", "不用 KV 缓存时，每一步都读最后 64 个字符",
                  "再从最后 32 个字符重新建立缓存"):
        assert words in notes, notes
    temperature = root.locator("input[type=range]")
    temperature.focus()
    page.keyboard.press("Home")
    assert root.locator(".gx-temp-value").inner_text() == "0（贪心）"
    temperature.evaluate("(e) => { e.value = '1'; e.dispatchEvent(new Event('input')); }")
    root.locator("canvas.gx-big").focus()
    page.keyboard.press("Home")
    assert widget_state(page)["readout"].startswith(f"查询“{long[6]}”（位置 0）最关注：")
    temperature.focus()
    page.keyboard.press("Home")
    newlines(page, root, "zh", exports["zh"])

    # The English model, from the Chinese page: its own example, a Chinese status.
    box.fill(exports["zh"][2]["example"])
    root.locator(".gx-models input[value=en]").check()
    page.wait_for_function(READY)
    state = widget_state(page)
    assert state["model"] == "en" and state["prompt"] == exports["en"][2]["example"]
    assert state["status"].startswith("英文模型：") and len(state["top"]) == 1  # greedy
    print_worst(agreement(page, exports, ["en"]))
    root.locator(".gx-models input[value=tang]").check()
    page.wait_for_function(READY)
    state = widget_state(page)
    assert state["model"] == "tang" and state["prompt"] == exports["tang"][2]["example"]
    assert state["status"].startswith("唐诗模型：")
    print_worst(agreement(page, exports, ["tang"]))
    root.locator(".gx-models input[value=zh]").check()
    page.wait_for_function(READY)
    assert widget_state(page)["prompt"] == exports["zh"][2]["example"]
    assert not errors, errors


@pytest.mark.parametrize(("width", "scheme"), [(1280, "dark"), (390, "light"), (390, "dark")])
def test_zh_edition_layout(playwright_api, base_url, site, zh_site, blocked, shots, width, scheme):
    phone = width < 500
    ctx = own_context(playwright_api, site, blocked, is_mobile=phone, has_touch=phone,
                      viewport={"width": width, "height": 844 if phone else 900}, color_scheme=scheme)
    page, _, errors = open_page(ctx, zh_url(base_url, zh_site))
    page.wait_for_function(READY, timeout=TIMEOUT_MS)
    assert page.evaluate("document.body.dataset.mdColorScheme") == ("slate" if scheme == "dark" else "default")
    assert page.evaluate("document.documentElement.scrollWidth") <= width + 1, "the page scrolls sideways"
    assert "第 0 层，第 0 个头" in page.locator(".gx-bigbox figcaption").first.inner_text()
    if shots:
        name = f"explorer-zh-edition-{width}-{scheme}"
        page.locator(".gpt-explorer").first.screenshot(path=str(shots / f"{name}.png"))
        page.screenshot(path=str(shots / f"{name}-page.png"), full_page=True)
    ctx.close()
    assert not errors, errors


def test_every_zh_page_with_an_explorer_draws_it_in_chinese(context, base_url, zh_site):
    pages = [p for p in sorted(zh_site.glob("*.html")) if 'class="gpt-explorer"' in p.read_text(encoding="utf-8")]
    assert "explorer.html" in [p.name for p in pages]
    for url, page, _, errors in one_tab(context, [base_url + "zh/" + path.name for path in pages]):
        page.wait_for_function(READY, timeout=TIMEOUT_MS)
        assert page.locator(".gpt-explorer .gx-top li").count() >= 10
        assert page.locator(".gpt-explorer .gx-status").first.inner_text().startswith("中文模型：")
        assert not errors, (url, errors)


def test_zh_edition_from_the_file_system_explains_in_chinese(context, zh_site):
    page, _, _ = open_page(context, (zh_site / page_path(zh_site, "explorer.md")).as_uri())
    page.wait_for_function("() => document.querySelector('.gpt-explorer').dataset.state === 'error'")
    why, todo = failure(page)
    assert why.startswith("原因：") and "文件系统" in why and "/generated/explorer/zh.json" in why
    assert todo.startswith("怎么办：") and "make docs" in todo and "http://127.0.0.1:8000/zh/explorer.html" in todo
    page.close()


def failure(page) -> tuple[str, str]:
    """The two parts of the message of an explorer whose model did not load: (what failed,
    what to do)."""
    status = page.locator(".gpt-explorer .gx-status").first
    return status.locator(".gx-why").inner_text(), status.locator(".gx-todo").inner_text()


# The Chinese edition served on its own (mkdocs serve -f mkdocs.zh.yml, or site/zh/ alone),
# where its pages find no weights one folder up, or a model file missing: the server answers
# 404 (or nothing at all) for the model's header. The widget says what failed (the file, its
# address, the status or the browser's error) and what to do (the commands that fix it).
@pytest.mark.parametrize(("edition", "answer"), [("zh", 404), ("en", 404), ("zh", "abort")])
def test_a_model_that_does_not_load_says_why_and_what_to_do(playwright_api, base_url, site, zh_site, blocked,
                                                            shots, edition, answer):
    ctx = own_context(playwright_api, site, blocked, viewport={"width": 1280, "height": 900})
    ctx.route(f"**/generated/explorer/{edition}.json",
              lambda route: route.abort() if answer == "abort" else route.fulfill(status=answer, body="not here"))
    url = zh_url(base_url, zh_site) if edition == "zh" else base_url + page_path(site, "explorer.md")
    page, _, errors = open_page(ctx, url)
    page.wait_for_function("() => document.querySelector('.gpt-explorer').dataset.state === 'error'",
                           timeout=TIMEOUT_MS)
    why, todo = failure(page)
    address = f"{base_url}generated/explorer/{edition}.json"
    assert address in why, why
    if edition == "zh":
        assert why.startswith("原因：") and todo.startswith("怎么办："), (why, todo)
        assert ("HTTP 404（没有这个文件）" in why) if answer == 404 else ("出错" in why and "TypeError" in why), why
        for words in ("make docs", "py tasks.py docs", "python -m http.server --directory site",
                      "http://127.0.0.1:8000/zh/explorer.html"):
            assert words in todo, (words, todo)
        # No answer at all: the server first; a 404: the Chinese edition alone, or no export.
        assert ("服务器还在运行" in todo) == (answer == "abort"), todo
        assert all((words in todo) == (answer == 404)
                   for words in ("英文版站点", "mkdocs serve -f mkdocs.zh.yml", "python -m tools.docs explorer")), todo
        prose = page.evaluate("""() => {
          const status = document.querySelector('.gpt-explorer .gx-status').cloneNode(true);
          status.querySelectorAll('code').forEach((c) => c.remove());  // commands, addresses
          return status.textContent;
        }""")
        assert not set(re.findall(r"[A-Za-z]{4,}", prose)) - {"HTTP", "Windows"}, prose
    else:
        assert why.startswith("What failed: ") and "HTTP 404 (no such file)" in why, why
        for words in ("make docs-serve", "python -m http.server --directory site",
                      "http://127.0.0.1:8000/explorer.html", "python -m tools.docs explorer"):
            assert words in todo, (words, todo)
    # Nothing else of the widget is left to puzzle over: no empty prompt, maps or predictions.
    root = page.locator(".gpt-explorer").first
    assert not root.locator(".gx-prompt").is_visible() and not root.locator(".gx-next").is_visible()
    assert root.locator(".gx-models").is_visible()
    assert page.evaluate("document.documentElement.scrollWidth") <= 1281, "the page scrolls sideways"
    if shots:
        root.screenshot(path=str(shots / f"explorer-failed-{edition}-{answer}.png"))
    assert not [e for e in errors if e.startswith("page error")], errors
    ctx.close()


def test_without_its_script_the_page_still_says_why_and_what_to_do(playwright_api, base_url, site, zh_site,
                                                                   blocked):
    """The Chinese edition built alone: its pages find no explorer.js one folder up. The box
    keeps the page's own two-part message, which shows once the script is late (3 s)."""
    ctx = own_context(playwright_api, site, blocked)
    ctx.route("**/assets/javascripts/explorer.js", lambda route: route.fulfill(status=404, body=""))
    page, _, _ = open_page(ctx, zh_url(base_url, zh_site))
    fallback = page.locator(".gpt-explorer .gx-fallback").first
    fallback.wait_for(state="visible", timeout=TIMEOUT_MS)
    text = fallback.inner_text()
    assert text.startswith("原因：") and "怎么办：" in text and "explorer.js" in text, text
    assert "http://127.0.0.1:8000/zh/explorer.html" in text, text
    ctx.close()


# Runs last (tests run in file order): the whole module's traffic stayed local.
def test_no_request_left_localhost(blocked):
    assert not blocked, f"requests to other hosts (aborted): {sorted(set(blocked))}"
