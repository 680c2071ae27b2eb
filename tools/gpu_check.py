"""Does the course run on this GPU? A few steps of every stage's training, and the sampler.

    python tools/gpu_check.py                  # on cuda (the default), a minute or two
    python tools/gpu_check.py --device cpu --small --steps 4    # the same checks on a CPU

One line per check, ``ok`` or ``FAIL`` (then the error's last line), and the exit code is
the number of failures. The checks, each a separate process as a learner runs them:

- stage 1: a batch of the built-in corpus on the device (stage 1 has no training);
- stages 2 to 5: ``python -m <stage>.train`` for a few steps on the device, one process;
- stage 5 with each precision the device offers (``--dtype auto``, and on a GPU float32,
  float16 with its gradient scaler, bfloat16 where the GPU computes it natively, tf32);
- stage 5 with two processes (``python -m stage5_gpt.torchrun --nproc_per_node 2``; NCCL
  on GPUs, one GPU each, so it needs two; gloo on the CPU);
- stage 5's sampler with its KV cache (``python -m stage5_gpt.sample``), and the same
  greedy text with and without the cache.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STAGES = ("stage2_bigram", "stage3_attention", "stage4_block", "stage5_gpt")
# --small: the smallest models that still have every part (for a CPU test of this script)
SMALL = {"stage2_bigram": [], "stage3_attention": ["--n-embd", "16", "--block-size", "16"],
         "stage4_block": ["--n-embd", "16", "--n-head", "2", "--n-layer", "1",
                          "--block-size", "16"],
         "stage5_gpt": ["--n-embd", "16", "--n-head", "2", "--n-layer", "1", "--block-size", "16",
                        "--warmup-iters", "1"]}
BEST = re.compile(r"best val loss ([\d.]+) at step (\d+); ([\d.]+) s of training")

CACHE_CHECK = """
import sys, torch
import argparse
from pathlib import Path
from stage5_gpt.gpt2 import load_for_tool
args = argparse.Namespace(ckpt=Path(sys.argv[1]), init_from=None)
model, tokenizer, _, _ = load_for_tool(args, sys.argv[2])
idx = torch.tensor([tokenizer.encode("The ")], device=sys.argv[2])
n = model.config.block_size - idx.shape[1]  # past block_size the cache starts again: other text
with torch.no_grad():
    a = model.generate(idx, n, temperature=0.0, use_cache=True)[0].tolist()
    b = model.generate(idx, n, temperature=0.0, use_cache=False)[0].tolist()
same = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)
print(f"the same {n} greedy tokens with and without the cache" if same is None
      else f"the cache changes the greedy text at token {same}")
sys.exit(same is not None)
"""


def run(command: list[str], env: dict | None = None, timeout: float = 600) -> tuple[int, str, float]:
    """(exit code, output, seconds) of ``python <command>`` in the repository root."""
    start = time.perf_counter()
    try:
        done = subprocess.run([sys.executable, *command], cwd=ROOT, capture_output=True,
                              text=True, encoding="utf-8", errors="replace", timeout=timeout,
                              env={**os.environ, **(env or {}), "PYTHONIOENCODING": "utf-8"})
        code, out = done.returncode, done.stdout + done.stderr
    except subprocess.TimeoutExpired as e:
        code, out = 124, f"timed out after {timeout:.0f} s {e.stdout or ''}"
    return code, out, time.perf_counter() - start


def last_line(text: str) -> str:
    lines = [x.strip() for x in text.strip().splitlines() if x.strip()]
    return lines[-1] if lines else "(no output)"


class Checks:
    def __init__(self, device: str, steps: int, small: bool, out: Path):
        self.device, self.steps, self.small, self.out = device, steps, small, out
        self.failed = 0

    def report(self, name: str, code: int, output: str, seconds: float, good: str = "") -> None:
        if code == 0:
            found = BEST.search(output)
            what = good or (f"val loss {found[1]} at step {found[2]}, {found[3]} s of training"
                            if found else last_line(output))
            print(f"ok    {name}: {what} ({seconds:.1f} s)", flush=True)
        else:
            self.failed += 1
            print(f"FAIL  {name}: exit {code}: {last_line(output)}", flush=True)

    def train_args(self, stage: str, out: str) -> list[str]:
        args = ["--device", self.device, "--max-iters", str(self.steps),
                "--eval-interval", str(self.steps), "--eval-iters", "2",
                "--sample-tokens", "20", "--out-dir", str(self.out / out)]
        if self.device == "cpu":
            args += ["--threads", "1"]
        return args + (SMALL[stage] if self.small else [])

    def stage1(self) -> None:
        code, out, secs = run(["-c", (
            "import sys, torch\nfrom stage1_data.data import Corpus, get_batch\n"
            "c = Corpus.load('en')\n"
            "x, y = get_batch(c.train, 8, 4, torch.Generator().manual_seed(0), device=sys.argv[1])\n"
            "assert x.device.type == torch.device(sys.argv[1]).type and (x[:, 1:] == y[:, :-1]).all()\n"
            "print(f'a batch of {tuple(x.shape)} on {x.device}')"), self.device])
        self.report("stage1_data batch", code, out, secs, last_line(out) if code == 0 else "")

    def train(self, stage: str, extra: tuple[str, ...] = (), label: str = "",
              out: str | None = None) -> None:
        code, output, secs = run(["-m", f"{stage}.train", *self.train_args(stage, out or stage),
                                  *extra])
        self.report(f"{stage} train{label}, {self.device}, 1 process", code, output, secs)

    def dtypes(self) -> list[str]:
        if self.device != "cuda":
            return []
        import torch
        kinds = ["float32", "float16", "tf32"]
        major, _ = torch.cuda.get_device_capability()
        if major >= 8:  # Ampere and later compute bfloat16 natively
            kinds.insert(2, "bfloat16")
        return kinds

    def torchrun(self) -> None:
        name = f"stage5_gpt train, {self.device}, 2 processes (torchrun)"
        if self.device == "cuda":
            import torch
            if torch.cuda.device_count() < 2:
                print(f"skip  {name}: needs 2 GPUs, one per process; this machine has "
                      f"{torch.cuda.device_count()}", flush=True)
                return
        args = self.train_args("stage5_gpt", "stage5_gpt-ddp")
        code, output, secs = run(["-m", "stage5_gpt.torchrun", "--standalone",
                                  "--nproc_per_node", "2", "-m", "stage5_gpt.train", *args,
                                  "--batch-size", "4"], env={"OMP_NUM_THREADS": "1"})
        self.report(name, code, output, secs)

    def sample(self) -> None:
        ckpt = self.out / "stage5_gpt" / "ckpt.pt"
        code, output, secs = run(["-m", "stage5_gpt.sample", "--ckpt", str(ckpt), "--device",
                                  self.device, "--prompt", "The ", "--tokens", "40"])
        self.report(f"stage5_gpt sample (KV cache), {self.device}", code, output, secs,
                    f"{len(output.strip())} characters")
        code, output, secs = run(["-c", CACHE_CHECK, str(ckpt), self.device])
        self.report(f"stage5_gpt KV cache = no cache, {self.device}", code, output, secs,
                    last_line(output))

    def all(self) -> int:
        self.describe()
        self.stage1()
        for stage in STAGES:
            self.train(stage)
        for dtype in self.dtypes():
            self.train("stage5_gpt", ("--dtype", dtype), f" --dtype {dtype}", f"stage5-{dtype}")
        self.torchrun()
        self.sample()
        print(f"{self.failed} failed" if self.failed else "all checks passed", flush=True)
        return self.failed

    def describe(self) -> None:
        import torch
        where = f"torch {torch.__version__}, Python {sys.version.split()[0]}"
        if self.device == "cuda" and torch.cuda.is_available():
            names = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
            cap = torch.cuda.get_device_capability()
            where += f", {len(names)} GPU(s): {', '.join(names)} (compute {cap[0]}.{cap[1]})"
        print(f"gpu_check on {self.device}: {where}", flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu", "mps"])
    p.add_argument("--steps", type=int, default=20, help="training steps per check")
    p.add_argument("--small", action="store_true", help="tiny models (a CPU test of the script)")
    p.add_argument("--out-dir", help="where the runs write (default: a temporary folder)")
    args = p.parse_args(argv)
    if args.device == "cuda":
        import torch
        if not torch.cuda.is_available():
            print("error: no CUDA GPU here (torch.cuda.is_available() is False); "
                  "try --device cpu", file=sys.stderr)
            return 2
    if args.out_dir:
        return Checks(args.device, args.steps, args.small, Path(args.out_dir)).all()
    with tempfile.TemporaryDirectory(prefix="gpu_check-") as out:
        return Checks(args.device, args.steps, args.small, Path(out)).all()


if __name__ == "__main__":
    sys.exit(main())
