"""gen_docs jobs for the stage-5 page: the learning-rate schedule, drawn by the real get_lr.

The page's formula for warmup then cosine decay gets a picture: the learning rate
at every step of a run with the trainer's defaults and with the ``nanogpt-cpu``
preset, computed by ``stage5_gpt.train.get_lr`` on the arguments its own parser
produces, and a table of the numbers the page quotes (warmup length, peak, end).

    python tools/gen_docs.py --only stage5_lr_schedule
"""

from __future__ import annotations

import sys
from pathlib import Path

FIGURE = "img/stage5_gpt_lr_schedule.png"
TABLE = "stage5_gpt_lr_schedule.md"
PRESET = "nanogpt-cpu"


def schedules(root: Path) -> list[tuple[str, object, list[float]]]:
    """(label, args, lr at every step) for the defaults and the preset, by the trainer's code."""
    sys.path.insert(0, str(root))
    from stage5_gpt.train import PRESETS, build_parser, get_lr

    out = []
    for label, preset in (("defaults", None), (f"--preset {PRESET}", PRESET)):
        parser = build_parser()
        if preset:
            parser.set_defaults(**PRESETS[preset])  # as train.main does
        args = parser.parse_args([])
        out.append((label, args, [get_lr(s, args) for s in range(args.max_iters)]))
    return out


def lr_schedule_job(work: Path, job, gen_docs) -> None:
    runs = schedules(gen_docs.ROOT)

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # 6.4 inches shown in a ~690 px column: 1 pt of font is about 1.5 px on screen.
    fig, (ax, zoom) = plt.subplots(1, 2, figsize=(6.4, 3.2), dpi=160,
                                   gridspec_kw={"width_ratios": [1.6, 1]}, constrained_layout=True)
    for (label, _, lrs), style in zip(runs, ("-", "--"), strict=True):
        for a in (ax, zoom):
            a.plot(range(len(lrs)), [lr * 1e3 for lr in lrs], style, label=label)
    warm = max(args.warmup_iters for _, args, _ in runs)
    zoom.set_xlim(-10, 2 * warm + 10)
    zoom.set_xticks([0, warm, 2 * warm])
    for a, title in ((ax, "the whole run"), (zoom, f"the first {2 * warm} steps")):
        a.axvline(warm, color="grey", linewidth=0.8)
        a.set_xlabel("step", fontsize=10)
        a.set_title(title, fontsize=10)
        a.tick_params(labelsize=9)
        a.grid(alpha=0.3)
    ax.set_ylabel("learning rate (x 1e-3)", fontsize=10)
    ax.legend(fontsize=9)
    fig.suptitle("stage5_gpt: warmup, then cosine decay (get_lr)", fontsize=11)
    path = gen_docs.GEN / FIGURE
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)

    lines = ["| settings | `--warmup-iters` | lr at step 0 | peak `--lr` | halfway | "
             "`--min-lr` | steps |", "|---|---:|---:|---:|---:|---:|---:|"]
    for label, args, lrs in runs:
        half = args.warmup_iters + (len(lrs) - args.warmup_iters) // 2
        lines.append(f"| `{label}` | {args.warmup_iters} | {lrs[0]:.2e} | {max(lrs):.2e} | "
                     f"{lrs[half]:.2e} (step {half}) | {args.min_lr:.2e} | {len(lrs)} |")
    gen_docs.write(TABLE, "\n".join(lines))


def jobs(Job, gen_docs) -> list:
    def stage5_lr_schedule(work: Path, job) -> None:  # gen_docs calls action(work, job)
        lr_schedule_job(work, job, gen_docs)

    return [Job(
        "stage5_lr_schedule", "stage 5's learning-rate schedule at the defaults and a preset",
        stage5_lr_schedule, files=("stage5_gpt/train.py", "tools/docs_course_stage5.py"),
        outputs=(FIGURE, TABLE), seconds=5)]
