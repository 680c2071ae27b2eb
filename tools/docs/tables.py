"""Tables in two languages: one set of rows, an English and a Chinese header.

A reading in the pages is prose in each edition over the same facts (``{{fact ...}}``,
checked by ``<!-- check: ... -->``, see docs/hooks/facts.py); a table is made here, once
for both: a cell is a number or text (the same in both) or an ``(english, chinese)`` pair.
"""

from __future__ import annotations

from collections.abc import Sequence

LANGS = ("en", "zh")


def cell(value, lang: str) -> str:
    if isinstance(value, tuple):
        return value[LANGS.index(lang)]
    return f"{value:.4f}" if isinstance(value, float) else str(value)


def table(headers: dict[str, Sequence[str]], rows: Sequence[Sequence], right: set[int] = frozenset()
          ) -> dict[str, str]:
    """A Markdown table in both languages; columns in ``right`` are right-aligned."""
    out = {}
    for lang in LANGS:
        head = headers[lang]
        lines = ["| " + " | ".join(head) + " |",
                 "|" + "|".join("---:" if i in right else "---" for i in range(len(head))) + "|"]
        lines += ["| " + " | ".join(cell(v, lang).replace("|", "\\|") for v in row) + " |"
                  for row in rows]
        out[lang] = "\n".join(lines)
    return out
