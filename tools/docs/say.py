"""Saying a result in two languages: one set of facts, an English and a Chinese template.

A reading is computed once, as facts (numbers, orderings, which layer helps most), then
said by two short templates, ``str.format`` strings over those facts:

    say(facts, en="It falls from {first:.2f} to {best:.2f}; then it {trend:w}.",
        zh="它从 {first:.2f} 降到 {best:.2f}，然后{trend:w}。",
        words={"rises": "回升", "stays flat": "基本不变"})

``{x:w}`` is a word chosen by the facts: the English template prints the fact itself,
the Chinese one its translation from ``words`` (a missing word stops the job). Tables
work the same way: ``table`` takes both languages' headers and rows of cells, where a
cell is a number or text (the same in both) or an ``(english, chinese)`` pair.
"""

from __future__ import annotations

import string
from collections.abc import Sequence

LANGS = ("en", "zh")


class Template(string.Formatter):
    def __init__(self, lang: str, words: dict[str, str]):
        self.lang, self.words = lang, words

    def format_field(self, value, spec: str) -> str:
        if spec == "w":
            if self.lang == "en":
                return str(value)
            if value not in self.words:
                raise SystemExit(f"no Chinese for {value!r}: add it to the reading's words")
            return self.words[value]
        if spec == ",":  # thousands: 12,345 in English, 12345 in Chinese text
            return f"{value:,}" if self.lang == "en" else str(value)
        return super().format_field(value, spec)


def say(facts: dict, en: str, zh: str, words: dict[str, str] | None = None) -> dict[str, str]:
    """Both languages of one reading: {"en": ..., "zh": ...}."""
    return {lang: Template(lang, words or {}).format(text, **facts)
            for lang, text in (("en", en), ("zh", zh))}


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
