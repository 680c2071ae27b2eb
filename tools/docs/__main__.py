"""Regenerate the docs' numbers and figures from stored runs: python -m tools.docs

    python -m tools.docs --list             # every job and run: fresh or stale, and its time
    python -m tools.docs                    # make what is stale: runs first, then jobs
    python -m tools.docs stage5 compare     # these pages' jobs (and the stale runs they read)
    python -m tools.docs --check            # exit 1 if anything is stale (the tests run it)
    python -m tools.docs --here             # make again what another kind of CPU made
    python -m tools.docs --shakespeare PATH --tang FOLDER   # the classic corpora, once

Runs keyed by meaning: a comment or docstring edit makes nothing stale; an edit to a
stage's drawing code (lens.py, visualize.py, ...) makes only the commands that draw
stale, which read the stored checkpoints; an edit to its model makes its trainings
stale. A checkpoint the cache lacks is made again; on another kind of CPU than the one
it was stored on, its run's numbers come out a little different and replace the stored
ones (--list says "remake" and "fresh*"). The Tiny Shakespeare and Tang runs need the
corpus in .cache/docs/data/, put there by --shakespeare and --tang (a local copy:
nothing is downloaded).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import jobs, make, manifest, stale, store


def minutes(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.1f} min"


def listing(all_jobs) -> str:
    recorded, rows = manifest(), []  # (state, seconds, what)
    runs = list(dict.fromkeys(r for j in all_jobs for r in j.runs))
    for run in runs:
        stored = store.load(run)
        state = "stale" if not store.fresh(run) else "fresh" if store.made_here(run) else "fresh*"
        rows.append((state, stored.seconds if stored else 60.0, run.command))
    stale_jobs = {j.name for j in stale(all_jobs)}
    needed = [r.after for r in runs if r.after and not store.fresh(r)]  # checkpoints to read
    needed += [r for j in all_jobs if j.name in stale_jobs for r in j.folders]
    rows += [("remake", store.load(r).seconds, f"{r.command} (its checkpoint)")
             for r in dict.fromkeys(needed) if store.fresh(r) and not store.cached(r)]
    # runs made on another kind of CPU whose time a page shows beside a run made on this one
    timed = (r for j in all_jobs if any(map(store.made_here, j.timed))
             for r in j.timed if store.fresh(r) and not store.made_here(r))
    rows += [("remake", store.load(r).seconds, f"{r.command} (its time)") for r in dict.fromkeys(timed)]
    rows += [("stale" if j.name in stale_jobs else "fresh", recorded.get(j.name, {}).get("seconds", 5.0),
              f"job {j.name}: {len(j.runs)} runs") for j in all_jobs]
    lines = [f"{state:6}{minutes(seconds):>9}  {what}" for state, seconds, what in rows]
    todo = [seconds for state, seconds, _ in rows if state in ("stale", "remake")]
    if any(state == "fresh*" for state, _, _ in rows):
        lines.append("fresh*: stored on another kind of CPU; where a page needs its checkpoint, "
                     "the run is made again here and its new numbers replace the stored ones "
                     "(--here makes them all again)")
    return "\n".join(lines + [f"{len(todo)} stale; making them takes about {minutes(sum(todo))}"
                              if todo else "everything is fresh"])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.docs", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("pages", nargs="*", metavar="PAGE", help="jobs whose name starts with PAGE")
    p.add_argument("--list", action="store_true", help="list every run and job and its state")
    p.add_argument("--check", action="store_true", help="exit 1 if anything is stale")
    p.add_argument("--here", action="store_true", help="make again every run stored on another "
                   "kind of CPU, so that all the docs' numbers come from this one")
    p.add_argument("--shakespeare", type=Path, help="a local copy of tinyshakespeare.txt")
    p.add_argument("--tang", type=Path, help="a folder with the 58 poet.tang.*.json files")
    args = p.parse_args(argv)
    all_jobs = jobs()
    if args.list:
        print(listing(all_jobs))
        return 0
    behind = stale(all_jobs)
    if args.check:
        if behind:
            print(f"stale: {', '.join(j.name for j in behind)}; run `python -m tools.docs` "
                  "(it makes only those; --list shows why and how long)")
        return 1 if behind else 0
    store.provide(args.shakespeare, args.tang)
    unknown = [n for n in args.pages if not any(j.name.startswith(n) for j in all_jobs)]
    if unknown:
        p.error(f"no page {', '.join(unknown)}; pages: {', '.join(j.name for j in all_jobs)}")
    chosen = ([j for j in all_jobs if any(j.name.startswith(n) for n in args.pages)]
              or (all_jobs if args.here else behind))
    make(chosen, args.here)
    return 0


if __name__ == "__main__":
    sys.exit(main())
