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

TOKEN_RE = re.compile(r"<a\b[^>]*>|</a\s*>|<img\b[^>]*>", re.IGNORECASE)
SRC_RE = re.compile(r"""\bsrc\s*=\s*(?:"([^"]*)"|'([^']*)')""", re.IGNORECASE)
ALT_RE = re.compile(r"""\balt\s*=\s*(?:"([^"]*)"|'([^']*)')""", re.IGNORECASE)
SKIP_CLASSES = ("twemoji", "emojione", "gemoji")  # icons, not figures
MERMAID_RE = re.compile(r'\s*<script src="[^"]*assets/mermaid/mermaid\.min\.js"></script>')


OPEN = {"en": ("{what}: open the full-size image", "Open the full-size image"),
        "zh": ("{what}：点击打开原尺寸图片", "点击打开原尺寸图片")}  # the link's title, by language


def link_figures(content: str, lang: str = "en") -> str:
    """``content`` with each ``<img>`` outside a link wrapped in a link to its src."""
    out: list[str] = []
    depth = 0  # open <a> elements around the current position
    last = 0
    for m in TOKEN_RE.finditer(content):
        tag = m.group(0)
        lower = tag.lower()
        out.append(content[last:m.start()])
        last = m.end()
        if lower.startswith("</a"):
            depth = max(0, depth - 1)
        elif lower.startswith("<a"):
            depth += 1
        else:
            src = SRC_RE.search(tag)
            url = (src.group(1) if src.group(1) is not None else src.group(2)) if src else ""
            if (depth == 0 and url and not url.startswith("data:")
                    and not any(c in lower for c in SKIP_CLASSES)):
                alt = ALT_RE.search(tag)
                what = html.unescape(alt.group(1) or alt.group(2) or "") if alt else ""
                words = OPEN["zh" if lang.startswith("zh") else "en"]
                title = words[0].format(what=what) if what else words[1]
                out.append(f'<a class="figure-link" href="{url}" '
                           f'title="{html.escape(title, quote=True)}">{tag}</a>')
                continue
        out.append(tag)
    out.append(content[last:])
    return "".join(out)


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
