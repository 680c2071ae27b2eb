"""Where a phone may not break a line (both editions; ``span.nobr`` is white-space: nowrap
in extra.css).

- A command-line flag in inline code stays whole: a browser may break after a hyphen, so
  on a phone `--resume` could end one line with "--" and start the next with "resume".
- Chinese: KaTeX draws an inline formula as inline blocks, after which a browser may
  break the line even before a closing mark, so a line could start with "，" or "）".
  Each inline formula and the closing punctuation right after it stay on one line.
"""

import re

MATH_THEN_CLOSING = re.compile(r'(<span class="arithmatex">[^<]*</span>)([，。、；：？！）」』”]+)')
CODE = re.compile(r"<code>([^<]*)</code>")  # inline code: plain text, no highlighting spans
FLAG = re.compile(r"(?<![\w-])(--[A-Za-z][\w-]*)")


def keep_together(html: str) -> str:
    return MATH_THEN_CLOSING.sub(r'<span class="nobr">\1\2</span>', html)


def keep_flags_whole(html: str) -> str:
    return CODE.sub(lambda m: "<code>" + FLAG.sub(r'<span class="nobr">\1</span>', m[1]) + "</code>",
                    html)


def on_page_content(html, **kwargs):
    return keep_flags_whole(keep_together(html))
