"""Regenerate every number, output and figure the docs quote, by running the stages.

    python tools/gen_docs.py                      # all of it (about 10 minutes on 2 cores)
    python tools/gen_docs.py --only worked        # just the cheap worked examples
    python tools/gen_docs.py --shakespeare PATH   # also the Tiny Shakespeare table

Writes docs/generated/ (text outputs, Markdown tables, img/*.png) and
docs/generated/manifest.json, which records a hash of the sources the outputs came
from; tests/test_docs_generated.py fails when the sources change and the outputs
were not regenerated.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GEN = ROOT / "docs" / "generated"
IMG = GEN / "img"
STAGES = ["stage2_bigram", "stage3_attention", "stage4_block", "stage5_gpt"]


def source_hash() -> str:
    """One hash over every stage's Python sources and corpora, and this script."""
    h = hashlib.sha256()
    files = sorted(p for s in ["stage1_data", *STAGES] for p in (ROOT / s).rglob("*")
                   if p.is_file() and "__pycache__" not in p.parts)
    for p in [*files, Path(__file__).resolve()]:
        h.update(str(p.relative_to(ROOT)).encode())
        h.update(p.read_bytes())
    return h.hexdigest()


def run(cwd: Path, *args: str) -> str:
    """Run ``python -m ...`` as a reader would, from a scratch folder; return stdout."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONHASHSEED": "0"}
    t0 = time.time()
    proc = subprocess.run([sys.executable, "-m", *args], cwd=cwd, env=env,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"`python -m {' '.join(args)}` failed:\n{proc.stderr[-3000:]}")
    print(f"  python -m {' '.join(args)}  ({time.time() - t0:.0f} s)", flush=True)
    return proc.stdout


def write(name: str, text: str) -> None:
    (GEN / name).write_text(text.rstrip("\n") + "\n", encoding="utf-8")


def show(s: str, n: int = 70) -> str:
    return s[:n].replace("\n", "⏎").replace("|", "\\|")


def metrics_table(rows: list[dict]) -> str:
    lines = ["| stage | parameters | train loss | val loss | training time | sample (first characters) |",
             "|---|---:|---:|---:|---:|---|"]
    for m in rows:
        lines.append(f"| `{m['stage']}` | {m['params']:,} | {m['train_loss']:.3f} | "
                     f"{m['val_loss']:.3f} | {m['train_seconds']:.0f} s | `{show(m['sample'])}` |")
    return "\n".join(lines)


def stages(work: Path, data: str, tag: str) -> list[dict]:
    """Train every stage at its defaults on ``data``; keep outputs and figures."""
    rows = []
    for stage in STAGES:
        out = run(work, f"{stage}.train", "--data", data)
        write(f"{stage}_train{tag}.txt", out)
        run_dir = work / "out" / stage
        rows.append(json.loads((run_dir / "metrics.json").read_text(encoding="utf-8")))
        for fig in ("loss", "attention"):
            if (run_dir / f"{fig}.png").exists():
                shutil.copy(run_dir / f"{fig}.png", IMG / f"{stage}_{fig}{tag}.png")
    return rows


def worked_examples() -> None:
    """The 3x3 attention example of the stage-3 page, computed, not typed."""
    import torch

    q = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    k = torch.tensor([[1.0, 0.0], [1.0, 1.0], [0.0, 2.0]])
    v = torch.tensor([[1.0, 0.0], [0.0, 1.0], [2.0, 2.0]])
    hs = q.shape[1]
    scores = q @ k.T
    scaled = scores / math.sqrt(hs)
    mask = torch.tril(torch.ones(3, 3))
    masked = scaled.masked_fill(mask == 0, float("-inf"))
    weights = torch.softmax(masked, dim=-1)
    out = weights @ v

    def tex(m: torch.Tensor) -> str:
        def cell(x: float) -> str:
            return r"-\infty" if x == float("-inf") else f"{x:.2f}".rstrip("0").rstrip(".")
        rows = [" & ".join(cell(float(x)) for x in row) for row in m]
        return r"\begin{bmatrix}" + r" \\ ".join(rows) + r"\end{bmatrix}"

    w2 = weights[2]
    parts = " + ".join(f"{float(w2[j]):.2f}" + r"\," + tex(v[j : j + 1]) for j in range(3))
    text = f"""Three tokens, head size $d_k = {hs}$. Queries, keys and values:

$$
Q = {tex(q)}, \\quad K = {tex(k)}, \\quad V = {tex(v)}
$$

Scores, then scaled by $1/\\sqrt{{d_k}} = {1 / math.sqrt(hs):.3f}$:

$$
QK^\\top = {tex(scores)}, \\qquad \\frac{{QK^\\top}}{{\\sqrt{{d_k}}}} = {tex(scaled)}
$$

The causal mask adds $-\\infty$ above the diagonal (a token may not look ahead), and the
softmax of each row turns scores into weights that sum to 1 ($e^{{-\\infty}} = 0$):

$$
M = {tex(torch.where(mask == 1, 0.0, float("-inf")))}, \\qquad
\\operatorname{{softmax}}\\!\\left(\\frac{{QK^\\top}}{{\\sqrt{{d_k}}}} + M\\right) = {tex(weights)}
$$

Each output row is a weighted sum of value vectors. For the last token:

$$
\\text{{out}}_2 = {parts} = {tex(out[2:3])}
$$

and all three at once:

$$
\\text{{out}} = \\operatorname{{softmax}}(\\cdot)\\, V = {tex(out)}
$$
"""
    write("worked_attention.md", text)
    print("  worked_attention.md")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--only", choices=["worked"], default=None, help="regenerate one part only")
    p.add_argument("--shakespeare", type=Path, default=None,
                   help="a local copy of Tiny Shakespeare: adds its results table")
    args = p.parse_args()
    IMG.mkdir(parents=True, exist_ok=True)
    worked_examples()
    if args.only == "worked":
        return
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        write("stage1_data.txt", run(work, "stage1_data"))
        rows = stages(work, "en", "")
        write("compare_en.md", metrics_table(rows))
        run(work, "stage5_gpt.visualize", "--out-dir", "out/stage5_gpt/figures")
        for png in (work / "out" / "stage5_gpt" / "figures").glob("*.png"):
            shutil.copy(png, IMG / f"stage5_gpt_{png.name}")
        write("stage5_gpt_inspect.txt", run(work, "stage5_gpt.inspect", "--prompt", "Pip the"))
        write("stage5_gpt_sample.txt", run(work, "stage5_gpt.sample", "--prompt", "TEACHER:",
                                           "--tokens", "300", "--temperature", "0.8"))
        # Chinese: the GPT on the built-in Chinese corpus, for Chinese attention maps.
        zh = run(work, "stage5_gpt.train", "--data", "zh", "--out-dir", "out/zh")
        write("stage5_gpt_train_zh.txt", zh)
        run(work, "stage5_gpt.visualize", "--ckpt", "out/zh/best.pt", "--out-dir", "out/zh/figures")
        for png in (work / "out" / "zh" / "figures").glob("*.png"):
            shutil.copy(png, IMG / f"stage5_gpt_zh_{png.name}")
        if args.shakespeare:
            data = str(args.shakespeare.resolve())
            write("compare_shakespeare.md", metrics_table(stages(work, data, "_shakespeare")))
    manifest = {"sources_sha256": source_hash(), "generated": sorted(
        str(p.relative_to(GEN)) for p in GEN.rglob("*") if p.is_file() and p.name != "manifest.json")}
    (GEN / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {GEN}")


if __name__ == "__main__":
    main()
