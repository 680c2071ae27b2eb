"""What does each speed-up of stages 4 and 5 buy on this CPU? Prints tokens per second.

    python tools/bench.py                 # every section, at the trainers' default sizes
    python tools/bench.py --threads 1 --steps 50 --json out/bench.json
    python tools/bench.py --sections bd   # only sections (b) and (d)
    python tools/bench.py --quick         # one tiny model per section: a smoke run
    python tools/bench.py --sections f --gpt2 FOLDER   # (f) with OpenAI's own GPT-2 files

Each section races a speed-up against the plain version it replaces, on the same
weights and batches; "vs" is the ratio of their tokens/s (above 1: faster).

(a) Stage 4's batched CausalSelfAttention (model.py) against the head-by-head
    MultiHeadAttention of variants.py (--attention heads).
(b) Stage 5's attention by PyTorch's fused kernel (F.scaled_dot_product_attention,
    what model.py's FLASH_DEVICES runs on a GPU) against the written math that a CPU
    runs: training, and evaluation (a forward pass under torch.no_grad).
(c) Stage 5's --dtype: a bfloat16 autocast forward pass against float32; it pays
    only where bfloat16_is_fast says so (and --dtype auto then takes it).
(d) Stage 5's KV cache: greedy generation with and without it, which must give the
    same tokens (up to block_size: past it the cache restarts from the last half
    window while the no-cache path slides).
(e) The trainers' thread choice (harness.pick_threads, timed once as a run starts)
    against each count it chooses from, on a quiet machine and with another process
    keeping one core busy.
(f) GPT-2 small in stage 5's GPT (--init-from): the seconds to load it, the memory
    the process then holds at most, and tokens/s of greedy generation with and
    without the KV cache, in a fresh process. --gpt2 FOLDER reads OpenAI's files;
    without it a stand-in of the same sizes and layout is written first (random
    weights, a made-up vocabulary of 50,257 tokens): the same work, other numbers.

(a)-(c) and (e) time training steps (forward, backward and the trainer's AdamW step;
no clipping, no schedule) of models built as the trainers build them (train.py's
defaults and model_config), on random token ids (vocabulary 65, like the English
corpus). After untimed warmup steps the variants of a section take turns for
--repeats rounds of --steps steps (one generation in (d)), so that a busy machine
slows them alike; each figure is the median round, and "±" half the spread between
the slowest and fastest round (a large one: a busy machine).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import itertools
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from unittest import mock

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

import torch  # noqa: E402, I001  (the order the docs bench was made with)

from stage4_block import train as train4  # noqa: E402
from stage4_block import variants  # noqa: E402
from stage5_gpt import precision as precision5  # noqa: E402
from stage5_gpt import model as model5  # noqa: E402
from stage5_gpt import train as train5  # noqa: E402
from stage5_gpt.cli import non_negative_int, positive_int  # noqa: E402
from stage5_gpt.harness import pick_threads  # noqa: E402
from stage5_gpt.model import GPT  # noqa: E402
from tools import compare  # noqa: E402

VOCAB = 65
TINY = "--n-layer 1 --n-head 2 --n-embd 16 --block-size 8 --batch-size 4"  # --quick
GENERATE = "--n-layer 6 --n-head 6 --n-embd 384 --block-size 256"  # ng-video-lecture's GPT
TINY_TOKENS = 40  # generated in (e) with --quick: past block_size, where the cache restarts
# Another process keeping one core busy; it also stops by itself once bench.py is gone.
BUSY_LOOP = "import os\nwhile os.getppid() == {parent}:\n    for _ in range(100_000): pass"


@dataclass
class Job:
    """One variant of a section: ``step()`` handles ``tokens`` tokens, at ``threads`` threads."""
    step: Callable[[], object]
    tokens: int
    threads: int | None = None


def race(jobs: dict[str, Job], args: argparse.Namespace, plain: str | None = None,
         steps: int | None = None, warmup: int | None = None) -> dict[str, dict]:
    """Warm every job up, then time them in turns: tokens/s per job and its ratio to the
    ``plain`` job's (the first one unless named)."""
    steps = args.steps if steps is None else steps
    for job in jobs.values():
        torch.set_num_threads(job.threads or args.threads)
        for _ in range(args.warmup if warmup is None else warmup):
            job.step()
    rates: dict[str, list[float]] = {name: [] for name in jobs}
    for _ in range(args.repeats):
        for name, job in jobs.items():
            torch.set_num_threads(job.threads or args.threads)
            t0 = time.perf_counter()
            for _ in range(steps):
                job.step()
            rates[name].append(job.tokens * steps / (time.perf_counter() - t0))
    torch.set_num_threads(args.threads)
    median = {name: statistics.median(r) for name, r in rates.items()}
    base = median[plain or next(iter(jobs))]
    return {name: {"tokens_per_s": median[name], "vs_plain": median[name] / base,
                   "spread": (max(r) - min(r)) / median[name], "rounds": r}
            for name, r in rates.items()}


def trainer_args(train, args: argparse.Namespace, full: str = "") -> argparse.Namespace:
    """A trainer's flags: its defaults, but for ``full`` (TINY with --quick)."""
    return train.build_parser().parse_args((TINY if args.quick else full).split())


def size(a: argparse.Namespace) -> str:
    return f"L{a.n_layer} H{a.n_head} C{a.n_embd} T{a.block_size} B{a.batch_size}"


def stage4_model(a: argparse.Namespace, **switches) -> torch.nn.Module:
    torch.manual_seed(0)
    return variants.build_model(replace(train4.model_config(a, VOCAB), **switches))


def stage5_model(a: argparse.Namespace) -> GPT:
    torch.manual_seed(0)
    return GPT(train5.model_config(a, VOCAB))


def batches(a: argparse.Namespace):
    """Eight fixed random (inputs, targets) batches, cycled."""
    g = torch.Generator().manual_seed(0)
    data = [torch.randint(0, VOCAB, (a.batch_size, a.block_size + 1), generator=g)
            for _ in range(8)]
    return itertools.cycle([(d[:, :-1].contiguous(), d[:, 1:].contiguous()) for d in data])


def job(model: torch.nn.Module, a: argparse.Namespace, forward=None, train: bool = True,
        threads: int | None = None) -> Job:
    """Training steps of ``model`` (forward, backward, the trainer's AdamW step), or with
    ``train=False`` evaluation steps (a forward pass under no_grad). ``forward(x, y)``
    returns the loss; by default the model's own."""
    model.train(train)
    if train:
        opt = (train5.make_optimizer(model, a) if isinstance(model, GPT)
               else torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=0.0))
    forward, data = forward or (lambda x, y: model(x, y)[1]), batches(a)

    def step() -> None:
        with torch.set_grad_enabled(train):
            loss = forward(*next(data))
        if train:
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
    return Job(step, a.batch_size * a.block_size, threads)


def stage5_forward(model: GPT, flash: bool = False, dtype: str = "float32"):
    """``model``'s loss as stage 5's train.py computes it with --dtype ``dtype``; with
    ``flash``, attention takes the fused kernel a GPU takes (FLASH_DEVICES)."""
    devices = ("cpu",) if flash else model5.FLASH_DEVICES

    def forward(x, y):
        with precision5.autocast(dtype, "cpu")[0], mock.patch.object(model5, "FLASH_DEVICES", devices):
            return model(x, y)[1]
    return forward


def cells(r: dict) -> list[str]:
    return [f"{r['tokens_per_s']:,.0f} ±{50 * r['spread']:2.0f}%", f"{r['vs_plain']:.2f}x"]


def table(header: list[str], rows: list[list[str]]) -> None:
    """Print a compare.plain_table: the first column (the variant) left, the figures right."""
    say(compare.plain_table(header, rows, right=range(1, len(header))))


def say(text: str) -> None:
    print(text, flush=True)


def bench_heads(args: argparse.Namespace) -> dict:
    a = trainer_args(train4, args)
    say("\n(a) stage 4: batched multi-head attention (model.py) vs head by head "
        f"(variants.py, --attention heads), training, {size(a)}")
    heads = stage4_model(a, attention="heads")
    batched = stage4_model(a)
    n = [sum(p.numel() for p in m.parameters()) for m in (heads, batched)]
    assert n[0] == n[1], f"the two forms should hold the same weights: {n}"
    r = race({"heads (variants.py)": job(heads, a),
              "batched (model.py)": job(batched, a)}, args)
    table(["attention", "tokens/s", "vs heads"], [[k, *cells(v)] for k, v in r.items()])
    return {"config": size(a), "params": n[0], "results": r}


def bench_flash(args: argparse.Namespace) -> dict:
    a = trainer_args(train5, args)
    say(f"\n(b) stage 5: attention by PyTorch's fused kernel (FLASH_DEVICES, a GPU's) vs the "
        f"written math (a CPU's), dropout {a.dropout}, {size(a)}: training, and evaluation "
        "(no_grad forward)")
    kinds = {"math (model.py, CPU)": False, "fused kernel (GPU)": True}
    base = stage5_model(a)
    models = {k: (copy.deepcopy(base), flash) for k, flash in kinds.items()}
    train = race({k: job(m, a, stage5_forward(m, f)) for k, (m, f) in models.items()}, args)
    evals = race({k: job(m, a, stage5_forward(m, f), train=False)
                  for k, (m, f) in models.items()}, args)
    table(["attention", "train tokens/s", "vs math", "eval tokens/s", "vs math"],
          [[k, *cells(train[k]), *cells(evals[k])] for k in kinds])
    return {"config": size(a), "train": train, "eval": evals}


def bench_dtype(args: argparse.Namespace) -> dict:
    a = trainer_args(train5, args)
    say(f"\n(c) stage 5 --dtype: bfloat16 autocast vs float32, training, {size(a)}")
    m32 = stage5_model(a)
    m16 = copy.deepcopy(m32)
    r = race({"float32": job(m32, a, stage5_forward(m32, dtype="float32")),
              "bfloat16": job(m16, a, stage5_forward(m16, dtype="bfloat16"))}, args)
    table(["--dtype", "tokens/s", "vs float32"], [[k, *cells(v)] for k, v in r.items()])
    fast = precision5.bfloat16_is_fast("cpu")
    say("bfloat16_is_fast('cpu') is True: this CPU multiplies bfloat16 fast, so --dtype "
        "auto trains in bfloat16 here" if fast else "bfloat16_is_fast('cpu') is False: "
        "this CPU has no fast bfloat16 (no AVX512-BF16 or AMX), so --dtype auto trains in "
        "float32 here")
    return {"config": size(a), "bfloat16_is_fast": fast, "results": r}


def bench_cache(args: argparse.Namespace) -> dict:
    a = trainer_args(train5, args, GENERATE)
    n, T = (TINY_TOKENS if args.quick else args.gen_tokens), a.block_size
    say(f"\n(d) stage 5 KV cache: {n} greedy tokens from a 1-character prompt, without and "
        f"with, L{a.n_layer} H{a.n_head} C{a.n_embd} T{T}")
    model = stage5_model(a).eval()
    prompt, out = torch.zeros((1, 1), dtype=torch.long), {}

    def generation(cache: bool) -> Job:
        def step() -> None:
            out[cache] = model.generate(prompt, n, temperature=0, use_cache=cache)
        model.generate(prompt, 2, temperature=0, use_cache=cache)  # warm up
        return Job(step, n)
    r = race({"no cache": generation(False), "KV cache": generation(True)}, args, steps=1,
             warmup=0)
    table(["generation", "tokens/s", "vs no cache"], [[k, *cells(v)] for k, v in r.items()])
    k = min(n + 1, T)  # the prompt too; past block_size the two paths see different contexts
    same = torch.equal(out[True][:, :k], out[False][:, :k])
    say(f"same tokens both ways: {'yes' if same else 'NO'} (the first {k}"
        + (f"; past block_size {T} the cache restarts from the last half window while the "
           "no-cache path slides)" if k < n + 1 else ")"))
    return {"config": size(a), "tokens": n, "compared": k, "same_tokens": same, "results": r}


@contextlib.contextmanager
def busy_core():
    """Another process keeping one core busy while the ``with`` lasts (Ctrl-C included)."""
    hog = subprocess.Popen([sys.executable, "-c", BUSY_LOOP.format(parent=os.getpid())],
                           stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        print(f"busy process: pid {hog.pid}", file=sys.stderr, flush=True)
        time.sleep(0.5)  # let it get going
        yield hog.pid
    finally:
        hog.kill()
        hog.wait()
        print(f"busy process: pid {hog.pid} stopped", file=sys.stderr, flush=True)


def bench_threads(args: argparse.Namespace) -> dict:
    a, top = trainer_args(train5, args), args.threads
    counts = sorted({1, top} | {2 ** i for i in range(1, 8) if 2 ** i < top})  # pick_threads's
    label = {n: f"{n} thread{'s' * (n > 1)}" for n in counts}
    say(f"\n(e) thread choice: harness.pick_threads vs fixed counts, stage-5 training, {size(a)}")
    base = stage5_model(a)
    x, y = next(batches(a))

    def one_step() -> None:  # what the trainers time: a forward and backward pass
        base(x, y)[1].backward()
        base.zero_grad(set_to_none=True)

    def measure() -> dict:
        torch.set_num_threads(top)
        line = pick_threads(None, one_step)
        jobs = {label[n]: job(copy.deepcopy(base), a, threads=n) for n in counts}
        jobs["pick_threads"] = job(copy.deepcopy(base), a, threads=torch.get_num_threads())
        return {"chosen": torch.get_num_threads(), "line": line,
                "results": race(jobs, args, plain=label[top])}

    quiet = measure()
    with busy_core() as pid:
        busy = measure()
    picked = f"pick_threads (chose {quiet['chosen']} | {busy['chosen']})"
    table(["threads", "quiet tokens/s", f"vs {label[top]}", "one core busy", f"vs {label[top]}"],
          [[picked if k == "pick_threads" else k, *cells(quiet["results"][k]),
            *cells(busy["results"][k])] for k in quiet["results"]])
    for name, m in (("quiet", quiet), ("one core busy", busy)):
        best = max(v["tokens_per_s"] for k, v in m["results"].items() if k != "pick_threads")
        say(f"{name}: {m['results']['pick_threads']['tokens_per_s'] / best:.2f}x the best fixed "
            f"count; pick_threads said {m['line']!r}")
    return {"config": size(a), "busy_pid": pid, "quiet": quiet, "busy": busy}


# A fresh process loads GPT-2 and generates, so that its memory is GPT-2's alone.
GPT2_CHILD = """
import json, resource, sys, time, torch
from stage5_gpt.gpt2 import load_gpt2
from pathlib import Path
torch.set_num_threads({threads})
t0 = time.perf_counter()
model, tokenizer = load_gpt2(Path({folder!r}))
load_s = time.perf_counter() - t0
prompt = torch.tensor([tokenizer.encode("Hello, I'm a language model,")])
rates = {{}}
for cache in (True, False):
    model.generate(prompt, 2, temperature=0, use_cache=cache)  # warm up
    t0 = time.perf_counter()
    model.generate(prompt, {tokens}, temperature=0, use_cache=cache)
    rates[cache] = {tokens} / (time.perf_counter() - t0)
print(json.dumps({{"load_s": load_s, "peak_rss_mb": resource.getrusage(
    resource.RUSAGE_SELF).ru_maxrss / 1024, "params": sum(p.numel() for p in model.parameters()),
    "prompt_tokens": prompt.shape[1], "cache": rates[True], "no_cache": rates[False]}}))
"""


def gpt2_stand_in(folder: Path) -> Path:
    """GPT-2 small's files, made up: its config, random weights in its safetensors layout
    (Conv1D matrices (in, out)), and a vocabulary of 256 bytes and 50,000 merges of two
    of them plus <|endoftext|>: what load_gpt2 reads, at GPT-2's sizes."""
    from safetensors.torch import save_file

    from stage5_gpt.bpe import bytes_to_unicode
    from stage5_gpt.gpt2 import SMALL, TRANSPOSED
    from stage5_gpt.model import GPTConfig

    folder.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    state = GPT(GPTConfig(**SMALL)).state_dict()
    state = {k: (v.T if k.endswith(TRANSPOSED) else v).contiguous() for k, v in state.items()
             if k != "lm_head.weight"}
    save_file(state, folder / "model.safetensors")
    config = {"vocab_size": SMALL["vocab_size"], "n_positions": SMALL["block_size"],
              "n_layer": SMALL["n_layer"], "n_head": SMALL["n_head"], "n_embd": SMALL["n_embd"],
              "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5}
    (folder / "config.json").write_text(json.dumps(config))
    chars = list(bytes_to_unicode().values())
    merges = [(chars[i % 256], chars[i // 256]) for i in range(50_000)]
    vocab = {c: i for i, c in enumerate(chars)} | {a + b: 256 + i for i, (a, b) in enumerate(merges)}
    vocab["<|endoftext|>"] = len(vocab)
    (folder / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    (folder / "merges.txt").write_text("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges),
                                       encoding="utf-8")
    return folder


def bench_gpt2(args: argparse.Namespace) -> dict:
    import tempfile

    tokens = 8 if args.quick else args.gpt2_tokens
    with tempfile.TemporaryDirectory() as tmp:
        if args.gpt2:
            folder, what = args.gpt2, f"OpenAI's files in {args.gpt2}"
        else:
            try:
                folder = gpt2_stand_in(Path(tmp) / "gpt2")
            except ImportError:
                say("\n(f) GPT-2 small: skipped, it needs the safetensors package "
                    "(pip install -e '.[gpt2]')")
                return {"skipped": "no safetensors"}
            what = "a stand-in of GPT-2 small's sizes and layout (random weights)"
        say(f"\n(f) GPT-2 small in stage 5's GPT, {what}: load, memory, {tokens} greedy tokens "
            f"after an 8-token prompt, {args.threads} threads, a fresh process")
        code = GPT2_CHILD.format(threads=args.threads, folder=str(folder), tokens=tokens)
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              cwd=REPO_ROOT, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    if proc.returncode:
        say(f"failed: {proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else '?'}")
        return {"failed": proc.stderr[-2000:]}
    r = json.loads(proc.stdout.splitlines()[-1])
    table(["GPT-2 small", "figure"],
          [["parameters", f"{r['params']:,}"], ["load (s)", f"{r['load_s']:.1f}"],
           ["peak memory (MB)", f"{r['peak_rss_mb']:,.0f}"],
           ["tokens/s, KV cache", f"{r['cache']:.1f}"],
           ["tokens/s, no cache", f"{r['no_cache']:.1f}"]])
    return {"source": "openai" if args.gpt2 else "stand-in", "tokens": tokens, **r}


SECTIONS = {"a": ("attention_forms", bench_heads), "b": ("flash", bench_flash),
            "c": ("dtype", bench_dtype), "d": ("kv_cache", bench_cache),
            "e": ("threads", bench_threads), "f": ("gpt2", bench_gpt2)}


def cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine() or "unknown"


def busy_note() -> None:
    if note := compare.busy_note("other processes are busy, so these figures are noisy and "
                                 "lower than on an idle machine (look at the spread)."):
        say(note)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python tools/bench.py", description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--sections", default="".join(SECTIONS), help="the sections to run, e.g. ce")
    p.add_argument("--threads", type=positive_int, default=2,
                   help="torch.set_num_threads; in (e), the most threads tried")
    p.add_argument("--steps", type=positive_int, default=30, help="timed steps per round")
    p.add_argument("--warmup", type=non_negative_int, default=5,
                   help="untimed steps before the first round")
    p.add_argument("--repeats", type=positive_int, default=3,
                   help="timed rounds; the median is reported")
    p.add_argument("--gen-tokens", type=positive_int, default=500, help="tokens generated in (d)")
    p.add_argument("--gpt2", type=Path, default=None, metavar="FOLDER",
                   help="(f): a folder with OpenAI's GPT-2 small (config.json, model.safetensors, "
                        "vocab.json, merges.txt) instead of a stand-in")
    p.add_argument("--gpt2-tokens", type=positive_int, default=50, help="tokens generated in (f)")
    p.add_argument("--quick", action="store_true",
                   help=f"one tiny model per section ({TINY}): a smoke run")
    p.add_argument("--json", type=Path, default=None, metavar="PATH",
                   help="also write the figures here")
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.sections or set(args.sections) - set(SECTIONS):
        parser.error(f"--sections takes letters among {''.join(SECTIONS)}, got {args.sections!r}")
    torch.set_num_threads(args.threads)
    machine = {"torch": torch.__version__, "threads": torch.get_num_threads(), "cpu": cpu_model(),
               "cpus": os.cpu_count(), "python": platform.python_version(),
               "load": compare.load_average()}
    say(f"torch {machine['torch']}, {machine['threads']} threads, CPU: {machine['cpu']} "
        f"({machine['cpus']} logical CPUs), Python {machine['python']}\n"
        f"{args.steps} timed steps x {args.repeats} rounds after {args.warmup} warmup steps; "
        f"random token batches, vocab {VOCAB}\n"
        "sizes: L layers, H heads, C embedding width, T block size (tokens), B batch size\n"
        "tokens/s: median of the rounds ± half the gap between the slowest and fastest round; "
        "vs: its ratio to the plain version's")
    busy_note()
    t0, figures = time.perf_counter(), {}
    try:
        for letter in sorted(set(args.sections)):
            key, bench = SECTIONS[letter]
            figures[key] = bench(args)
    except KeyboardInterrupt:
        print("bench.py: interrupted", file=sys.stderr)
        return 130
    # No second note: by now the load average counts the bench's own threads (and the busy
    # process of section f), so it would blame "other processes" for this very run.
    say(f"\n({time.perf_counter() - t0:.0f} s in all.)")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        settings = vars(args) | {"json": str(args.json)}
        args.json.write_text(json.dumps({"machine": machine, "settings": settings, **figures},
                                        indent=2))
        say(f"json: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
