"""gen_docs jobs: stage 5's presets on Tiny Shakespeare, val loss against seconds.

The stage-5 page says what its presets reach and how fast; this job trains them
(``nanogpt-cpu`` and ``shakespeare-2min``, each in float32 and in the dtype
``--dtype auto`` picks on the machine that builds the docs), draws the validation
loss against the training loop's seconds, and writes the table the page includes.

    python tools/gen_docs.py --only presets_curve --shakespeare PATH
"""

from __future__ import annotations

import json
from pathlib import Path

PRESETS = ("nanogpt-cpu", "shakespeare-2min")
DTYPES = ("float32", "auto")
TARGET = 1.80  # the val loss the shakespeare-2min preset is meant to reach in 120 s
FIGURE = "img/stage5_gpt_presets_curve.png"
TABLE = "stage5_gpt_presets.md"


def read_curve(out: Path) -> list[tuple[float, float]]:
    """(seconds, val loss) at each evaluation of a run, from its log.jsonl."""
    rows = [json.loads(line) for line in (out / "log.jsonl").read_text(encoding="utf-8").splitlines()]
    return [(r["time"], r["val"]) for r in rows if "val" in r]  # the harness's row keys


def first_below(curve: list[tuple[float, float]], target: float) -> float | None:
    """Seconds at the first evaluation whose val loss is at most ``target``."""
    return next((t for t, v in curve if v <= target), None)


def presets_job(work: Path, job, gen_docs) -> None:
    runs = []
    for preset in PRESETS:
        for dtype in DTYPES:
            out = f"out/presets/{preset}_{dtype}"
            stdout = gen_docs.run(work, "stage5_gpt.train", "--preset", preset, "--data",
                                  gen_docs.SHAKESPEARE_FILE, "--dtype", dtype, "--out-dir", out,
                                  "--sample-tokens", "0")
            metrics = json.loads((work / out / "metrics.json").read_text(encoding="utf-8"))
            # The trainer says what --dtype auto chose: "precision: bfloat16 forward pass ..."
            used = next((line.split()[1] for line in stdout.splitlines()
                         if line.startswith("precision: ")), dtype)
            runs.append((preset, dtype, used, metrics, read_curve(work / out)))

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4), dpi=120)
    for preset, dtype, used, _, curve in runs:
        ax.plot([t for t, _ in curve], [v for _, v in curve], marker="o", markersize=3,
                linestyle="-" if preset == "shakespeare-2min" else "--",
                label=f"{preset}, --dtype {dtype}" + (f" ({used})" if dtype == "auto" else ""))
    ax.axhline(TARGET, color="grey", linewidth=0.8)
    ax.axvline(120, color="grey", linewidth=0.8)
    ax.set_xlabel("seconds of training (evaluations included)")
    ax.set_ylabel("validation loss")
    ax.set_title("Tiny Shakespeare: stage 5's presets, val loss against time")
    ax.legend(fontsize=8)
    fig.tight_layout()
    path = gen_docs.GEN / FIGURE
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)

    lines = ["| preset | `--dtype` | steps | final val loss | best val loss | "
             f"first eval at val <= {TARGET:.2f} | training loop |",
             "|---|---|---:|---:|---:|---:|---:|"]
    for preset, dtype, used, m, curve in runs:
        reached = first_below(curve, TARGET)
        lines.append(
            f"| `{preset}` | {dtype}" + (f" ({used})" if dtype == "auto" else "")
            + f" | {m['steps']} | {m['val_loss']:.4f} | {m['best_val_loss']:.4f} | "
            + (f"{reached:.0f} s" if reached is not None else "not reached")
            + f" | {m['train_seconds']:.0f} s |")
    gen_docs.write(TABLE, "\n".join(lines))


def jobs(Job, gen_docs) -> list:
    return [Job(
        "presets_curve", "stage 5's presets on Tiny Shakespeare: val loss against seconds",
        presets_job_action(gen_docs), params={"sha256": gen_docs.SHAKESPEARE_SHA256},
        stages=("stage5_gpt",), files=("tools/docs_presets.py",),
        outputs=(FIGURE, TABLE), seconds=300, shakespeare=True)]


def presets_job_action(gen_docs):
    """The job's action: gen_docs calls ``action(work, job)``."""
    def presets_curve(work: Path, job) -> None:
        presets_job(work, job, gen_docs)
    return presets_curve
