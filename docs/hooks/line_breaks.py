"""Chinese line breaking around inline math, for the Chinese edition (mkdocs.zh.yml).

KaTeX draws an inline formula as inline blocks, after which a browser may break the
line even before a closing mark, so on a phone a line could start with "，" or "）".
Each inline formula and the closing punctuation right after it are kept on one line
(``span.nobr``, white-space: nowrap in extra.css).
"""

import re

MATH_THEN_CLOSING = re.compile(r'(<span class="arithmatex">[^<]*</span>)([，。、；：？！）」』”]+)')


def keep_together(html: str) -> str:
    return MATH_THEN_CLOSING.sub(r'<span class="nobr">\1\2</span>', html)


def on_page_content(html, **kwargs):
    return keep_together(html)
