"""MkDocs hook: numbers in the prose come from the runs, and claims about them are checked.

``python -m tools.docs`` writes each job's facts to ``docs/generated/<job>/facts.json``.
A page quotes one with ``{{fact stage5.en.best_val_loss:.2f}}`` (job, then the fact's
name, then an optional format) and states an ordering or a trend it reads from them with
``<!-- check: stage5.en.best_val_loss < stage4.en.best_val_loss -->``, which prints
nothing and fails the build when it is false. An unknown fact fails the build too.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace

GEN = Path(__file__).resolve().parents[1] / "generated"
FACT = re.compile(r"\{\{fact ([\w.]+?)(?::([^}]*))?\}\}")
CHECK = re.compile(r"<!-- check: (.+?) -->")


def facts() -> dict:
    """Every job's facts as one dict: {"stage5.en.best_val_loss": 1.23, ...}."""
    out = {}
    for path in sorted(GEN.glob("*/facts.json")):
        for name, value in json.loads(path.read_text(encoding="utf-8")).items():
            out[f"{path.parent.name}.{name}"] = value
    return out


def namespace(flat: dict) -> SimpleNamespace:
    """{"a.b.c": 1} -> an object with a.b.c == 1, for the checks' expressions."""
    first: dict = {}
    for key, value in flat.items():
        head, dot, rest = key.partition(".")
        first.setdefault(head, {} if dot else value)
        if dot:
            first[head][rest] = value
    return SimpleNamespace(**{k: namespace(v) if isinstance(v, dict) else v for k, v in first.items()})


def render(markdown: str, where: str, known: dict) -> str:
    def fact(m: re.Match) -> str:
        if m.group(1) not in known:
            raise ValueError(f"{where}: no fact {m.group(1)!r} (see docs/generated/*/facts.json)")
        value = known[m.group(1)]  # a newline would end the paragraph or tab: shown as ⏎
        return format(value.replace("\n", "⏎") if isinstance(value, str) else value, m.group(2) or "")

    names = namespace(known)
    for m in CHECK.finditer(markdown):
        try:
            ok = eval(m.group(1), {"__builtins__": {"abs": abs, "min": min, "max": max}},
                      vars(names))
        except Exception as e:
            raise ValueError(f"{where}: cannot check {m.group(1)!r}: {e}") from None
        if not ok:
            raise ValueError(f"{where}: the claim {m.group(1)!r} is false for these runs; "
                             "rewrite the sentence or the check")
    return CHECK.sub("", FACT.sub(fact, markdown))


def on_page_markdown(markdown: str, page, config, files) -> str:
    return render(markdown, page.file.src_uri, facts())
