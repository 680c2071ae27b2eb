"""Regenerate every number, output and figure the docs quote, by running the stages.

    python tools/gen_docs.py                      # all of it (about 35 minutes on 2 cores)
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
import importlib.util
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
compare = None  # tools/compare.py, loaded in main()


def source_hash() -> str:
    """One hash over every stage's Python sources and corpora, and this script."""
    h = hashlib.sha256()
    files = sorted(p for s in ["stage1_data", *STAGES] for p in (ROOT / s).rglob("*")
                   if p.is_file() and "__pycache__" not in p.parts)
    for p in [*files, Path(__file__).resolve()]:
        h.update(str(p.relative_to(ROOT)).encode())
        h.update(p.read_bytes())
    return h.hexdigest()


def run(cwd: Path, *args: str, stderr: bool = False, ok: bool = True, script: bool = False) -> str:
    """Run ``python -m ...`` (or a script) as a reader would, from a scratch folder.

    Returns stdout, or stderr with ``stderr=True``; ``ok=False`` expects a failure.
    """
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONHASHSEED": "0"}
    cmd = [sys.executable, *args] if script else [sys.executable, "-m", *args]
    t0 = time.time()
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    if (proc.returncode == 0) != ok:
        sys.exit(f"`{' '.join(cmd)}` exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    print(f"  {' '.join(args)}  ({time.time() - t0:.0f} s)", flush=True)
    return proc.stderr if stderr else proc.stdout


def write(name: str, text: str) -> None:
    (GEN / name).write_text(text.rstrip("\n") + "\n", encoding="utf-8")


def load_compare():
    """tools/compare.py as a module: its table format is the one the docs show."""
    spec = importlib.util.spec_from_file_location("compare", ROOT / "tools" / "compare.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["compare"] = module
    spec.loader.exec_module(module)
    return module


def train(work: Path, stage: str, out: str, *flags: str) -> dict:
    """Train one stage; returns a row for compare.markdown_table plus its stdout."""
    stdout = run(work, f"{stage}.train", "--out-dir", out, *flags)
    m = json.loads((work / out / "metrics.json").read_text(encoding="utf-8"))
    defaults = compare.stage_defaults(stage)
    given = dict(zip(flags[::2], flags[1::2], strict=False))
    evals = [(int(st), float(val)) for st, _, val in compare.STEP_LINE.findall(stdout)]
    best_step, best_val = min(evals, key=lambda e: e[1])
    return {**m, "stage": int(stage[5]), "package": stage, "stdout": stdout,
            "best_val_loss": best_val, "best_val_step": best_step,
            "batch_size": int(given.get("--batch-size", defaults["--batch-size"])),
            "block_size": int(given.get("--block-size", defaults["--block-size"]))}


def stages(work: Path, data: str, tag: str, stage5_flags: tuple[str, ...] = ()) -> list[dict]:
    """Train every stage at its defaults on ``data``; keep outputs and figures."""
    rows = []
    for stage in STAGES:
        flags = ("--data", data, *(stage5_flags if stage == "stage5_gpt" else ()))
        row = train(work, stage, f"out{tag}/{stage}", *flags)
        write(f"{stage}_train{tag}.txt", row["stdout"])
        for fig in ("loss", "attention"):
            if (work / f"out{tag}" / stage / f"{fig}.png").exists():
                shutil.copy(work / f"out{tag}" / stage / f"{fig}.png", IMG / f"{stage}_{fig}{tag}.png")
        rows.append(row)
    return rows


def variants_table(rows: list[tuple[str, dict]]) -> str:
    lines = ["| flags | parameters | train loss | val loss | time (s) |", "|---|--:|--:|--:|--:|"]
    lines += [f"| `{flags or '(defaults)'}` | {r['params']:,} | {r['train_loss']:.4f} | "
              f"{r['val_loss']:.4f} | {r['train_seconds']:.1f} |" for flags, r in rows]
    return "\n".join(lines)


def errors(work: Path) -> str:
    """What the bad inputs of stage 1 and 2 print (stderr), for the error tables."""
    (work / "gbk.txt").write_bytes("你好，世界".encode("gbk"))
    (work / "empty.txt").write_text("", encoding="utf-8")
    cases = [
        ("stage1_data", "--data", "missing.txt"),
        ("stage1_data", "--data", "gbk.txt"),
        ("stage1_data", "--data", "empty.txt"),
        ("stage1_data", "--block-size", "100000"),
        ("stage2_bigram.sample", "--prompt", "café"),
        ("stage2_bigram.train", "--lr", "0"),
    ]
    out = []
    for case in cases:
        err = run(work, *case, stderr=True, ok=False).strip().splitlines()[-1]
        out.append(f"$ python -m {' '.join(case)}\n{err}\n")
    return "\n".join(out)


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


# nanoGPT's CPU configuration (README of nanoGPT): our stage-5 defaults, but no dropout.
NANOGPT_CPU = ("--block-size", "64", "--batch-size", "12", "--n-layer", "4", "--n-head", "4",
               "--n-embd", "128", "--dropout", "0", "--max-iters", "2000", "--lr", "1e-3",
               "--min-lr", "1e-4", "--lr-decay-iters", "2000")


def main() -> None:
    global compare
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
    compare = load_compare()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        write("stage1_data.txt", run(work, "stage1_data"))
        rows = stages(work, "en", "")
        write("compare_en.md", compare.markdown_table(
            rows, "Each stage at its default settings, on the built-in English corpus (seed 1337)"))
        write("stage1_errors.txt", errors(work))

        # Stage 5: figures, one head's computation, a streamed sample.
        run(work, "stage5_gpt.visualize", "--ckpt", "out/stage5_gpt/best.pt",
            "--out-dir", "out/stage5_gpt/figures")
        for png in (work / "out" / "stage5_gpt" / "figures").glob("*.png"):
            shutil.copy(png, IMG / f"stage5_gpt_{png.name}")
        write("stage5_gpt_inspect.txt", run(work, "stage5_gpt.inspect", "--ckpt",
                                            "out/stage5_gpt/best.pt", "--prompt", "Pip the"))
        write("stage5_gpt_sample.txt", run(work, "stage5_gpt.sample", "--ckpt", "out/stage5_gpt/best.pt",
                                           "--prompt", "TEACHER:", "--tokens", "300",
                                           "--temperature", "0.8"))

        # Exercises: stage-3 position options and stage-4 variants.
        by_default = {r["package"]: r for r in rows}
        pos = [("--pos learned", by_default["stage3_attention"])]
        pos += [(f"--pos {v}", train(work, "stage3_attention", f"out/pos_{v}", "--pos", v))
                for v in ("sinusoidal", "none")]
        write("stage3_attention_positions.md", variants_table(pos))
        var = [("", by_default["stage4_block"])]
        for flags in ("--n-head 1", "--norm post", "--activation gelu"):
            var.append((flags, train(work, "stage4_block", f"out/{flags[2:].replace(' ', '_')}",
                                     *flags.split())))
        write("stage4_block_variants.md", variants_table(var))

        # Chinese: the GPT on the built-in Chinese corpus, for Chinese attention maps.
        zh = train(work, "stage5_gpt", "out/zh", "--data", "zh")
        write("stage5_gpt_train_zh.txt", zh["stdout"])
        run(work, "stage5_gpt.visualize", "--ckpt", "out/zh/best.pt", "--out-dir", "out/zh/figures")
        for png in (work / "out" / "zh" / "figures").glob("*.png"):
            shutil.copy(png, IMG / f"stage5_gpt_zh_{png.name}")

        # All stages at one budget, and the throughput benchmark.
        write("compare_budget_en.md", "")
        run(work, str(ROOT / "tools" / "compare.py"), "--stages", "2", "3", "4", "5",
            "--data", "en", "--max-iters", "2000", "--batch-size", "16", "--block-size", "32",
            "--out-dir", "out/budget", "--markdown", str(GEN / "compare_budget_en.md"), script=True)
        write("bench.txt", run(work, str(ROOT / "tools" / "bench.py"), script=True))

        if args.shakespeare:
            shutil.copy(args.shakespeare, work / "tinyshakespeare.txt")  # a short path in outputs
            rows = stages(work, "tinyshakespeare.txt", "_shakespeare", stage5_flags=NANOGPT_CPU)
            write("compare_shakespeare.md", compare.markdown_table(
                rows, "Tiny Shakespeare: stages 2-4 at their defaults, stage 5 in nanoGPT's CPU "
                      "configuration (`" + " ".join(NANOGPT_CPU) + "`)"))
    manifest = {"sources_sha256": source_hash(), "generated": sorted(
        str(p.relative_to(GEN)) for p in GEN.rglob("*") if p.is_file() and p.name != "manifest.json")}
    (GEN / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {GEN}")


if __name__ == "__main__":
    main()
