"""How much memory does loading a corpus take? Peak RSS of ``Corpus.load`` per file byte.

    python tools/memory.py                      # a 50 MB file: the built-in English corpus repeated
    python tools/memory.py --size-mb 200        # a bigger one
    python tools/memory.py --data big.txt       # an existing UTF-8 file
    python tools/memory.py --plain              # the lesson's torch.tensor(tok.encode(text)) instead

``Corpus.load`` encodes with ``encode_compact`` (stage1_data/compact.py); ``--plain``
measures the same load with the lesson's one line in its place, for the comparison.

The load runs in a fresh Python process. After it has imported torch and the
stage, and before it loads, it resets the kernel's peak-RSS counter (VmHWM in
/proc/self/status) and notes its RSS; after ``Corpus.load(path)`` the peak
minus that RSS is what loading and encoding cost at their worst moment. The
figure printed last is that peak divided by the file size. Linux only.

The first load also pages in some of torch's code (about 7 MB, whatever the
file size); --warm-up loads the small built-in corpus first to leave that out.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
MB = 1_000_000

# Runs in the child process; argv: the stage package, the file, "1" to warm up first.
CHILD = r"""
import importlib, json, sys

import torch  # noqa: F401  (imported before the baseline, like in a real run)

def status(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024  # kB -> bytes

data = importlib.import_module(sys.argv[1] + ".data")
if sys.argv[4] == "1":  # --plain: the lesson's encoding, a Python list and an int64 tensor
    data.encode_compact = lambda tok, text: torch.tensor(tok.encode(text))
if sys.argv[3] == "1":
    data.Corpus.load("en")
try:  # "5" resets VmHWM to the current RSS (Linux >= 4.0)
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    reset = True
except OSError:  # then VmHWM may still hold the peak of the imports
    reset = False
before = status("VmRSS")
corpus = data.Corpus.load(sys.argv[2])
print(json.dumps({
    "before": before, "peak": status("VmHWM"), "after": status("VmRSS"), "reset": reset,
    "tokens": len(corpus.train) + len(corpus.val), "dtype": str(corpus.train.dtype),
}))
"""


def make_corpus(path: Path, size: int, source: Path) -> None:
    """Write ``source`` repeated (the last copy cut short) until ``path`` holds ``size`` bytes."""
    unit = source.read_text(encoding="utf-8").encode("utf-8")
    with path.open("wb") as f:
        left = size
        while left >= len(unit):
            f.write(unit)
            left -= len(unit)
        # errors="ignore" drops a character cut in half: the file stays valid UTF-8.
        f.write(unit[:left].decode("utf-8", errors="ignore").encode("utf-8"))


def measure(path: Path, stage: str = "stage1_data", warm_up: bool = False,
            plain: bool = False) -> dict:
    """Load ``path`` with ``stage``'s ``Corpus.load`` in a fresh process; sizes in bytes."""
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    run = subprocess.run([sys.executable, "-c", CHILD, stage, str(path), str(int(warm_up)),
                          str(int(plain))],
                         env=env, cwd=REPO_ROOT, capture_output=True, text=True, check=False)
    if run.returncode != 0:
        raise SystemExit(f"loading {path} failed:\n{run.stderr}")
    result = json.loads(run.stdout.strip().splitlines()[-1])
    result["size"] = path.stat().st_size
    result["increase"] = result["peak"] - result["before"]
    result["ratio"] = result["increase"] / result["size"]
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python tools/memory.py",
        description="Peak memory of Corpus.load(path) for a big text file, as a multiple of "
                    "the file size, measured in a fresh process (Linux only).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--data", type=Path, help="measure this UTF-8 file instead of a generated one")
    parser.add_argument("--size-mb", type=float, default=50.0,
                        help="size of the generated file in MB (10^6 bytes)")
    parser.add_argument("--source", type=Path, default=REPO_ROOT / "stage1_data" / "corpus" / "en.txt",
                        help="text repeated to make the generated file")
    parser.add_argument("--stage", default="stage1_data", help="the stage package whose Corpus.load runs")
    parser.add_argument("--warm-up", action="store_true",
                        help="load the built-in corpus first, leaving out the fixed cost of a first load")
    parser.add_argument("--max-ratio", type=float,
                        help="exit with status 1 when the peak is above this many times the file size")
    parser.add_argument("--plain", action="store_true",
                        help="encode with torch.tensor(tokenizer.encode(text)), not encode_compact")
    parser.add_argument("--json", action="store_true", help="print the measurement as JSON")
    args = parser.parse_args(argv)
    if not Path("/proc/self/status").is_file():
        parser.exit(2, "error: needs Linux (/proc/self/status)\n")

    with tempfile.TemporaryDirectory(prefix="gpt-stages-memory-") as tmp:
        path = args.data
        if path is None:
            path = Path(tmp) / "corpus.txt"
            make_corpus(path, int(args.size_mb * MB), args.source)
        r = measure(path, args.stage, args.warm_up, args.plain)

    if args.json:
        print(json.dumps(r))
    else:
        print(f"file          {r['size'] / MB:8.1f} MB  ({r['tokens']:,} tokens, ids {r['dtype']})")
        print(f"peak increase {r['increase'] / MB:8.1f} MB  (RSS {r['before'] / MB:.0f} MB before, "
              f"peak {r['peak'] / MB:.0f} MB, {r['after'] / MB:.0f} MB after)")
        print(f"ratio         {r['ratio']:8.2f} x the file size")
    if not r["reset"]:
        print("note: could not reset VmHWM (/proc/self/clear_refs); the peak may be the "
              "imports'", file=sys.stderr)
    if args.max_ratio is not None and r["ratio"] > args.max_ratio:
        print(f"above the limit of {args.max_ratio} x", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
