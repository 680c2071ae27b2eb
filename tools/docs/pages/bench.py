"""What each speed-up buys, measured: tools/bench.py's output, and its ratios as facts for
the depth boxes of the stage 4 and stage 5 pages (they time; they do not train)."""

from __future__ import annotations

import json
import re
import subprocess
import sys

from .. import Job, Page
from ..store import ROOT


def write(page: Page) -> None:
    out = page.dir / "bench.json"
    page.dir.mkdir(parents=True, exist_ok=True)
    text = subprocess.run([sys.executable, "tools/bench.py", "--json", str(out)], cwd=ROOT,
                          capture_output=True, text=True, check=True).stdout
    page.write("bench.txt", text.split("\njson: ")[0])
    figures = json.loads(out.read_text())
    out.unlink()
    for section, data in figures.items():
        if section in ("machine", "settings"):
            continue
        for part in ("results", "train", "eval", "quiet", "busy"):
            results = data.get(part) or {}
            for name, r in results.get("results", results).items():  # (f) nests its results
                if isinstance(r, dict) and "vs_plain" in r:  # "batched (CPU default)" -> batched
                    name = re.sub(r"\W+", "_", name.split(" (")[0]).strip("_").lower()
                    key = ".".join(filter(None, (section, "" if part == "results" else part, name)))
                    page.fact(f"{key}.ratio", r["vs_plain"])
                    page.fact(f"{key}.tokens_per_s", r["tokens_per_s"])
        for flag in ("bfloat16_is_fast", "same_tokens"):
            if flag in data:
                page.fact(f"{section}.{flag}", data[flag])
        if section == "gpt2":  # GPT-2 small: load, memory, generation (a stand-in's numbers)
            for key in ("params", "load_s", "peak_rss_mb", "cache", "no_cache", "tokens",
                        "source"):
                page.fact(f"gpt2.{key}", data[key])
    page.fact("cpu", figures["machine"]["cpu"])


JOBS = [Job("bench", write, files=("tools/bench.py", "stage4_block/model.py",
                                   "stage4_block/variants.py", "stage5_gpt/harness.py",
                                   "stage5_gpt/precision.py", "stage5_gpt/model.py",
                                   "stage5_gpt/gpt2.py", "stage5_gpt/bpe.py"))]
