"""Regenerate the docs' numbers and figures from stored runs: python -m tools.docs

    python -m tools.docs --list             # what a make does here, why, and how long
    python -m tools.docs                    # make what is stale: runs first, then jobs
    python -m tools.docs stage5 compare     # these pages' jobs (and the stale runs they read)
    python -m tools.docs --list stage5      # what that make does (--list takes any of these)
    python -m tools.docs --check            # exit 1 if anything is stale (the tests run it)
    python -m tools.docs --here             # make again what another kind of CPU made
    python -m tools.docs --shakespeare PATH --tang FOLDER   # the classic corpora, once

Runs keyed by meaning: a comment or docstring edit makes nothing stale; an edit to a
stage's drawing code (lens.py, visualize.py, ...) makes only the commands that draw
stale, which read the stored checkpoints; an edit to its model makes its trainings
stale. What a page draws from a checkpoint is kept apart (a draw) and made again only when
its own code or its run changes; a checkpoint it then needs and the cache lacks is made
again, and on another kind of CPU than the one it was stored on, its run's numbers come
out a little different and replace the stored ones: every page that shows them is made
again, and the runs whose times a page sets beside it too (--list shows all of it, each
line with why). Times are the stored ones scaled by this machine's speed against the
machine that made them (store.calibration). The Tiny Shakespeare and Tang runs need the
corpus in .cache/docs/data/, put there by --shakespeare and --tang (a local copy: nothing
is downloaded).
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

from . import Plan, jobs, make, minutes, plan, stale, store


def count(n: int, what: str) -> str:
    return f"{n} {what}{'s' if n != 1 else ''}"


def listing(todo: Plan, all_jobs) -> str:
    """What a make does (plan), in its order, each line with about how long it takes here
    and why; then what it leaves as it is, and the total."""
    rows = []  # (state, seconds, scaled, what)
    for state, runs in (("remake", todo.checkpoints), ("make", todo.runs)):
        order = sorted(runs.items(), key=lambda item: (bool(item[0].after), store.alone(item[0])))
        for run, why in order:  # as make_all runs them: those made after another last
            what = f"its checkpoint, {why}" if state == "remake" else why
            rows.append((state, *store.estimate(run), f"{run.command}  ({what})"))
    for job, why, draws in todo.jobs:
        redraw = f"; draws again {', '.join(d.name for d in draws)}" if draws else ""
        left = len(job.draws) - len(draws)
        keeps = f"; keeps {count(left, 'draw')}" if left else ""
        rows.append(("make", *todo.job_seconds(job, draws),
                     f"job {job.name}  ({why}{redraw}{keeps})"))
    here = store.machine()["kind"]
    lines = [f"on this machine ({here}) a make does, in this order:"] * bool(rows)
    lines += [f"{state:7}{minutes(seconds):>9}{' ' if ok else '*'} {what}"
              for state, seconds, ok, what in rows]
    runs = list(dict.fromkeys(r for j in all_jobs for r in j.runs))
    kept = [r for r in runs if r not in todo.runs and r not in todo.checkpoints]
    kinds = Counter(s.machine.get("kind") for s in map(store.load, kept)
                    if s and s.machine.get("kind") != here)
    elsewhere = "; ".join(f"{n} stored on {kind}" for kind, n in kinds.most_common())
    lines.append(f"as they are: {count(len(kept), 'run')}{f' ({elsewhere})' if elsewhere else ''}"
                 f", {count(len(all_jobs) - len(todo.jobs), 'job')}")
    if not all(ok for _, _, ok, _ in rows):
        lines.append("*: the time as measured where it was made (no calibration on record to "
                     "scale it by), or a guess for what was never made")
    if not rows:
        return "\n".join([*lines, "everything is fresh"])
    return "\n".join([*lines, f"{count(len(todo.checkpoints), 'checkpoint')} to make again, "
                                f"{count(len(todo.runs), 'run')}, {count(len(todo.jobs), 'job')}: "
                                f"about {minutes(todo.seconds())} on this machine (runs two at a "
                                "time, as make runs them)"])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.docs", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("pages", nargs="*", metavar="PAGE", help="jobs whose name starts with PAGE")
    p.add_argument("--list", action="store_true", help="list what a make does here, why, and "
                   "about how long it takes")
    p.add_argument("--check", action="store_true", help="exit 1 if anything is stale")
    p.add_argument("--here", action="store_true", help="make again every run stored on another "
                   "kind of CPU, so that all the docs' numbers come from this one")
    p.add_argument("--shakespeare", type=Path, help="a local copy of tinyshakespeare.txt")
    p.add_argument("--tang", type=Path, help="a folder with the 58 poet.tang.*.json files")
    args = p.parse_args(argv)
    all_jobs = jobs()
    behind = stale(all_jobs)
    if args.check:
        if behind:
            print(f"stale: {', '.join(j.name for j in behind)}; run `python -m tools.docs` "
                  "(it makes only those; --list shows why and how long)")
        return 1 if behind else 0
    unknown = [n for n in args.pages if not any(j.name.startswith(n) for j in all_jobs)]
    if unknown:
        p.error(f"no page {', '.join(unknown)}; pages: {', '.join(j.name for j in all_jobs)}")
    chosen = ([j for j in all_jobs if any(j.name.startswith(n) for n in args.pages)]
              or (all_jobs if args.here else behind))
    if args.list:  # the make these arguments ask for, planned as make() plans it
        print(listing(plan(chosen, args.here), all_jobs))
        return 0
    store.provide(args.shakespeare, args.tang)
    make(chosen, args.here)
    return 0


if __name__ == "__main__":
    sys.exit(main())
