"""Stage 1 page: the data as the model sees it, on every corpus, GPT-2's byte-level BPE
learned on the built-in corpora, and the one-line messages for bad input."""

from __future__ import annotations

import json
import re
import subprocess
import sys

from .. import Job, Page, Run
from ..store import ROOT

DATA = {d: Run("stage1_data", "--data", d, module="") for d in ("en", "zh", "shakespeare", "tang")}
BPE = {d: Run("stage1_data", "--data", d, module="bpe") for d in ("en", "zh")}  # 300 merges
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


def memory(plain: bool) -> dict:
    """tools/memory.py on a 50 MB corpus: peak memory of loading it, encode_compact's way
    or (plain) the lesson's ``torch.tensor(tok.encode(text))``."""
    out = subprocess.run([sys.executable, "tools/memory.py", "--json", "--warm-up",
                          *(["--plain"] if plain else [])],
                         cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def write(page: Page) -> None:
    for data, run in DATA.items():
        out = page.stored(run).stdout
        page.write(f"data_{data}.txt", out)
        chars, lines, distinct = re.search(r"([\d,]+) characters, ([\d,]+) lines, (\d+) distinct",
                                           out).groups()
        page.fact(f"{data}.characters", int(chars.replace(",", "")))
        page.fact(f"{data}.distinct", int(distinct))
    page.write("errors.txt", transcript(page, ERRORS))
    for data, run in BPE.items():
        out = page.stored(run).stdout
        page.write(f"bpe_{data}.txt", f"$ {run.command}\n{out}")
        chars, size = (int(n.replace(",", "")) for n in re.search(
            r"([\d,]+) characters, ([\d,]+) UTF-8 bytes", out).groups())
        tokens = int(re.search(r"([\d,]+) tokens: ", out)[1].replace(",", ""))
        page.fact(f"bpe.{data}.characters", chars)
        page.fact(f"bpe.{data}.bytes", size)
        page.fact(f"bpe.{data}.tokens", tokens)
        page.fact(f"bpe.{data}.per_character", tokens / chars)
        page.fact(f"bpe.{data}.fewer", size / tokens)
    for name, plain in (("compact", False), ("plain", True)):  # compact.py's measured gain
        m = memory(plain)
        page.fact(f"memory.{name}.ratio", m["ratio"])  # peak memory / file size
        page.fact(f"memory.{name}.mb", m["increase"] / 1e6)
    page.fact("memory.size_mb", m["size"] / 1e6)


JOBS = [Job("stage1", write, runs=(*DATA.values(), *ERRORS, *BPE.values()),
            files=("tools/memory.py", "stage1_data/compact.py", "stage1_data/data.py"))]
