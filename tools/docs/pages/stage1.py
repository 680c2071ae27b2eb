"""Stage 1 page: the data as the model sees it, on every corpus, and the one-line
messages for bad input."""

from __future__ import annotations

import re

from .. import Job, Page, Run

DATA = {d: Run("stage1_data", "--data", d, module="") for d in ("en", "zh", "shakespeare", "tang")}
ERRORS = (
    Run("stage1_data", "--data", "missing.txt", module="", fails=True),
    Run("stage1_data", "--data", "gbk.txt", module="", fails=True,
        files=(("gbk.txt", "你好，世界".encode("gbk")),)),
    Run("stage1_data", "--data", "empty.txt", module="", fails=True, files=(("empty.txt", b""),)),
    Run("stage1_data", "--block-size", "1000000", module="", fails=True),
)


def transcript(page: Page, runs) -> str:
    """Each failing command and the one line it printed."""
    return "\n".join(f"$ {r.command}\n{page.stored(r).stdout.strip().splitlines()[-1]}\n"
                     for r in runs)


def write(page: Page) -> None:
    for data, run in DATA.items():
        out = page.stored(run).stdout
        page.write(f"data_{data}.txt", out)
        chars, lines, distinct = re.search(r"([\d,]+) characters, ([\d,]+) lines, (\d+) distinct",
                                           out).groups()
        page.fact(f"{data}.characters", int(chars.replace(",", "")))
        page.fact(f"{data}.distinct", int(distinct))
    page.write("errors.txt", transcript(page, ERRORS))


JOBS = [Job("stage1", write, runs=(*DATA.values(), *ERRORS))]
