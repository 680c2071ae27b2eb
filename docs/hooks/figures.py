"""MkDocs hook: every figure of a page is a link to its full-size file.

Wide figures (the layer x head attention grids) are scaled down to the width of the
page column, where their titles and ticks cannot be read; a click on the image opens
the PNG itself, at full size. Every ``<img>`` of the page content that is not already
inside a link is wrapped in ``<a class="figure-link" href="SRC">``, with SRC the
image's own ``src`` (so the link resolves exactly as the image does). And the diagrams:
Mermaid's script is left out of the pages that have none (:func:`on_post_page`).

Registered in mkdocs.yml under ``hooks:``; :func:`link_figures` is plain Python so it
can be unit-tested without MkDocs.
"""

from __future__ import annotations

import html
import re

LINK_RE = re.compile(r"(<a\b.*?</a\s*>)", re.IGNORECASE | re.DOTALL)  # HTML links do not nest
IMG_RE = re.compile(r"<img\b[^>]*>", re.IGNORECASE)
ATTR_RE = r"""\b{}\s*=\s*(?:"([^"]*)"|'([^']*)')"""
SKIP_CLASSES = ("twemoji", "emojione", "gemoji")  # icons, not figures
MERMAID_RE = re.compile(r'\s*<script src="[^"]*assets/mermaid/mermaid\.min\.js"></script>')
OPEN = {"en": ("{what}: open the full-size image", "Open the full-size image"),
        "zh": ("{what}：点击打开原尺寸图片", "点击打开原尺寸图片")}  # the link's title, by language


def attribute(tag: str, name: str) -> str:
    m = re.search(ATTR_RE.format(name), tag, re.IGNORECASE)
    return next((v for v in m.groups() if v is not None), "") if m else ""


def link_figures(content: str, lang: str = "en") -> str:
    """``content`` with each ``<img>`` outside a link wrapped in a link to its src."""
    words = OPEN["zh" if lang.startswith("zh") else "en"]

    def link(m: re.Match) -> str:
        tag, url = m[0], attribute(m[0], "src")
        if not url or url.startswith("data:") or any(c in tag.lower() for c in SKIP_CLASSES):
            return tag
        what = html.unescape(attribute(tag, "alt"))
        title = words[0].format(what=what) if what else words[1]
        return f'<a class="figure-link" href="{url}" title="{html.escape(title, quote=True)}">{tag}</a>'

    parts = LINK_RE.split(content)  # odd parts are links already: left alone
    return "".join(part if i % 2 else IMG_RE.sub(link, part) for i, part in enumerate(parts))


def on_page_content(html_, page, config, files, **kwargs):
    if "<img" not in html_:
        return html_
    return link_figures(html_, config["theme"]["language"])


def on_post_page(output: str, **kwargs) -> str:
    """Mermaid's 3.5 MB of JavaScript only on pages with a diagram: it is about 1 s of
    every page load on a laptop CPU (mkdocs.yml's extra_javascript adds it to all)."""
    return output if 'class="mermaid"' in output else MERMAID_RE.sub("", output)


def on_post_template(output_content: str, **kwargs) -> str:  # 404.html, not a page
    return on_post_page(output_content)
