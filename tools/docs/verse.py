"""The form of Tang verse in a text, counted one way for every page that quotes it.

Every poem the Tang corpus keeps has lines of five or seven characters (stage1_data/tang.py),
each clause ending in a mark (，。？！；). A sample is counted the same way on the stage pages
and on the compare page:

>>> form = verse_form("春日\\n床前明月光，疑是地上霜。\\n举头望明月，低头\\n思")
>>> form["lines"], form["titles"], form["clauses"], form["five"], form["five_or_seven"]
(3, 1, 3, 3, 1.0)

A clause counts only when a mark ends it ("低头" does not). The last line ("思") is left
out of the lines and titles: a sample may stop in the middle of one. A title is a line
without a mark (：included, for speakers).
"""

from __future__ import annotations

import re

MARKS = "，。？！；"
CLAUSE = re.compile(f"([^{MARKS}]+)[{MARKS}]")  # the characters before each mark


def verse_form(*texts: str, last_line: bool = False) -> dict[str, float]:
    """Counts of the verse form in ``texts`` (one sample or several, counted together): their
    lines (each text's last one only if ``last_line``), titles, complete clauses by length,
    the share of them five or seven characters long (``five_or_seven``) or 5 to 7
    (``five_to_seven``), their mean length, the marks, and the share of verse lines that end
    a sentence (。？！: ``lines_end``)."""
    every, lines = [], []
    for text in texts:
        mine = [line.strip() for line in text.split("\n") if line.strip()]
        every += mine
        lines += mine if last_line else mine[:-1]
    verse = [line for line in lines if re.search(f"[{MARKS}]", line)]
    sizes = [len(c.strip()) for line in every for c in CLAUSE.findall(line) if c.strip()]
    n = max(1, len(sizes))
    return {"lines": len(lines),
            "titles": sum(not re.search(f"[{MARKS}：]", line) for line in lines),
            "clauses": len(sizes),
            "five": sizes.count(5), "seven": sizes.count(7),
            "five_or_seven": (sizes.count(5) + sizes.count(7)) / n,
            "five_to_seven": sum(5 <= s <= 7 for s in sizes) / n,
            "mean_clause": sum(sizes) / n,
            "marks": len(re.findall(f"[{MARKS}]", "".join(texts))),
            "lines_end": sum(line[-1] in "。？！" for line in verse) / max(1, len(verse))}
