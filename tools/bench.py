"""How fast are the stage-4 and stage-5 models on this CPU? Prints tokens per second.

    python tools/bench.py                 # all configurations, 2 threads
    python tools/bench.py --threads 1 --steps 50 --json out/bench.json
    python tools/bench.py --quick         # one tiny configuration: a smoke run

(a) Stage 4's two multi-head forms, the list of heads (``attention="heads"``) and
    the batched one (``attention="batched"``): same configuration, same number
    of weights; training steps per second as tokens/s.
(b) Stage 5's GPT against stage 4 (batched, learned positions) at the same
    configuration, both with dropout 0 and GELU: training tokens/s and
    evaluation tokens/s (a forward pass under ``torch.no_grad``). Stage 5 has a
    final LayerNorm that stage 4 lacks (2 * n_embd more parameters) and picks its
    attention kernel by what measured fastest on a CPU.
(c) Generation with stage 5's KV cache against without it: greedy tokens from a
    one-character prompt, the same tokens both ways.
(d) The harness's thread choice (harness.ThreadTuner) against fixed thread
    counts, on a quiet machine and with another process keeping one core busy
    (``python -c "while True: pass"``): stage-5 training steps per second.

A training step is forward + backward + AdamW step (no gradient clipping) on a
random batch of token ids (vocabulary 65, like the English corpus). Warmup steps
are not timed; each figure is the median over --repeats timed rounds of --steps
steps, the models of one row taking turns round by round so that a busy machine
slows them alike. "spread" is (slowest - fastest round) / median: a large one
means the machine was busy and the figure is noisy.

Peak memory is not measured: Python's tracemalloc does not see torch's
allocations, and a fresh process per configuration would cost more than the
benchmark itself.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

import compare  # noqa: E402  (tools/compare.py, beside this script)
import torch  # noqa: E402

from stage4_block.model import LanguageModel, ModelConfig  # noqa: E402
from stage5_gpt.harness import ThreadTuner  # noqa: E402
from stage5_gpt.model import GPT, GPTConfig  # noqa: E402

VOCAB = 65
N_BATCHES = 8  # distinct random batches, cycled


@dataclass(frozen=True)
class Config:
    n_layer: int
    n_head: int
    n_embd: int
    block_size: int
    batch_size: int

    @property
    def name(self) -> str:
        return (f"L{self.n_layer} H{self.n_head} C{self.n_embd} "
                f"T{self.block_size} B{self.batch_size}")

    @property
    def tokens(self) -> int:
        return self.batch_size * self.block_size


CONFIGS = [
    Config(3, 4, 64, 32, 32),  # stage 4's defaults
    Config(4, 4, 128, 64, 12),  # stage 5's defaults
    Config(6, 6, 192, 128, 8),  # a bigger model, a longer context
]
QUICK = [Config(1, 2, 16, 8, 4)]
LEGEND = ("config: L layers, H heads, C embedding width, T block size (tokens), B batch size\n"
          "tokens/s: median of the rounds ± half the gap between the slowest and fastest round")


def stage4(cfg: Config, attention: str) -> LanguageModel:
    return LanguageModel(ModelConfig(
        vocab_size=VOCAB, block_size=cfg.block_size, n_embd=cfg.n_embd, pos="learned",
        n_head=cfg.n_head, n_layer=cfg.n_layer, dropout=0.0, activation="gelu",
        norm="pre", attention=attention))


def stage5(cfg: Config) -> GPT:
    return GPT(GPTConfig(
        vocab_size=VOCAB, block_size=cfg.block_size, n_layer=cfg.n_layer, n_head=cfg.n_head,
        n_embd=cfg.n_embd, dropout=0.0, bias=True, activation="gelu", tie_weights=False))


def n_params(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def batches(cfg: Config, seed: int = 0) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(N_BATCHES):
        data = torch.randint(0, VOCAB, (cfg.batch_size, cfg.block_size + 1), generator=g)
        out.append((data[:, :-1].contiguous(), data[:, 1:].contiguous()))
    return out


class Runner:
    """Times ``steps`` consecutive calls of one model's step; ``round()`` -> seconds."""

    def __init__(self, model: torch.nn.Module, data: list, train: bool):
        self.model, self.data, self.train, self.i = model, data, train, 0
        self.opt = torch.optim.AdamW(model.parameters(), lr=1e-3) if train else None
        model.train(train)

    def step(self) -> None:
        x, y = self.data[self.i % len(self.data)]
        self.i += 1
        if self.train:
            _, loss = self.model(x, y)
            self.opt.zero_grad(set_to_none=True)
            loss.backward()
            self.opt.step()
        else:
            with torch.no_grad():
                self.model(x, y)

    def round(self, steps: int) -> float:
        t0 = time.perf_counter()
        for _ in range(steps):
            self.step()
        return time.perf_counter() - t0


def race(runners: dict[str, Runner], cfg: Config, args: argparse.Namespace) -> dict[str, dict]:
    """Warm every runner up, then time them in turns; tokens/s per runner."""
    for r in runners.values():
        for _ in range(args.warmup):
            r.step()
    rounds: dict[str, list[float]] = {k: [] for k in runners}
    for _ in range(args.repeats):
        for k, r in runners.items():
            rounds[k].append(r.round(args.steps))
    out = {}
    for k, secs in rounds.items():
        rates = [cfg.tokens * args.steps / s for s in secs]
        med = statistics.median(rates)
        out[k] = {"tokens_per_s": med, "ms_per_step": 1000 * statistics.median(secs) / args.steps,
                  "spread": (max(rates) - min(rates)) / med, "rounds_tokens_per_s": rates}
    return out


def fmt_rate(r: dict) -> str:
    return f"{r['tokens_per_s']:>10,.0f} ±{100 * r['spread'] / 2:2.0f}%"


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def busy_note() -> str | None:
    return compare.busy_note("other processes are busy, so these figures are noisy and lower "
                             "than on an idle machine (look at the spread).")


def table(header: list[str], rows: list[list[str]]) -> str:
    """compare.plain_table: the first column (the configuration) left, the figures right."""
    return compare.plain_table(header, rows, right=range(1, len(header)))


def bench_forms(configs: list[Config], args: argparse.Namespace) -> list[dict]:
    print("\n(a) stage 4: list of heads vs batched attention, training step "
          "(forward + backward + AdamW), tokens/s")
    results, rows = [], []
    for cfg in configs:
        torch.manual_seed(0)
        heads, batched = stage4(cfg, "heads"), stage4(cfg, "batched")
        assert n_params(heads) == n_params(batched), "the two forms should hold the same weights"
        data = batches(cfg)
        r = race({"heads": Runner(heads, data, True), "batched": Runner(batched, data, True)},
                 cfg, args)
        speedup = r["batched"]["tokens_per_s"] / r["heads"]["tokens_per_s"]
        results.append({"config": asdict(cfg), "params": n_params(heads), **r,
                        "batched_over_heads": speedup})
        rows.append([cfg.name, f"{n_params(heads):,}", fmt_rate(r["heads"]),
                     fmt_rate(r["batched"]), f"{speedup:.2f}x"])
        print(f"  {cfg.name}: heads {r['heads']['tokens_per_s']:,.0f}, batched "
              f"{r['batched']['tokens_per_s']:,.0f} tokens/s", file=sys.stderr, flush=True)
    print(table(["config", "params", "heads tokens/s", "batched tokens/s", "batched/heads"],
                rows))
    return results


def bench_gpt(configs: list[Config], args: argparse.Namespace) -> list[dict]:
    print("\n(b) stage 5 (GPT) vs stage 4 (batched attention, learned positions), same "
          "configuration, dropout 0, GELU, tokens/s")
    results, rows = [], []
    for cfg in configs:
        torch.manual_seed(0)
        s4, s5 = stage4(cfg, "batched"), stage5(cfg)
        p4, p5 = n_params(s4), n_params(s5)
        assert p5 - p4 == 2 * cfg.n_embd, (p4, p5)  # the final LayerNorm's weight and bias
        data = batches(cfg)
        train = race({"stage4": Runner(s4, data, True), "stage5": Runner(s5, data, True)},
                     cfg, args)
        evals = race({"stage4": Runner(s4, data, False), "stage5": Runner(s5, data, False)},
                     cfg, args)
        tr = train["stage5"]["tokens_per_s"] / train["stage4"]["tokens_per_s"]
        ev = evals["stage5"]["tokens_per_s"] / evals["stage4"]["tokens_per_s"]
        results.append({"config": asdict(cfg), "params_stage4": p4, "params_stage5": p5,
                        "train": train, "eval": evals, "train_stage5_over_stage4": tr,
                        "eval_stage5_over_stage4": ev})
        rows.append([cfg.name, f"{p4:,}", f"{p5:,} (+{p5 - p4})",
                     fmt_rate(train["stage4"]), fmt_rate(train["stage5"]), f"{tr:.2f}x",
                     fmt_rate(evals["stage4"]), fmt_rate(evals["stage5"]), f"{ev:.2f}x"])
        print(f"  {cfg.name}: train {train['stage4']['tokens_per_s']:,.0f} vs "
              f"{train['stage5']['tokens_per_s']:,.0f}, eval {evals['stage4']['tokens_per_s']:,.0f}"
              f" vs {evals['stage5']['tokens_per_s']:,.0f} tokens/s", file=sys.stderr, flush=True)
    print(table(["config", "params s4", "params s5 (+final LN)", "train s4 tokens/s",
                 "train s5 tokens/s", "s5/s4", "eval s4 tokens/s", "eval s5 tokens/s", "s5/s4"],
                rows))
    return results


GEN_CONFIG = dict(n_layer=6, n_head=6, n_embd=384, block_size=256)  # ng-video-lecture's size
GEN_QUICK = dict(n_layer=1, n_head=2, n_embd=16, block_size=16)


def bench_cache(args: argparse.Namespace) -> dict:
    size, tokens = (GEN_QUICK, 40) if args.quick else (GEN_CONFIG, args.gen_tokens)
    print(f"\n(c) stage 5 generation, KV cache vs none: {tokens} greedy tokens from a "
          f"1-character prompt, L{size['n_layer']} H{size['n_head']} C{size['n_embd']} "
          f"T{size['block_size']}")
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=VOCAB, **size)).eval()
    prompt = torch.zeros(1, 1, dtype=torch.long)
    seconds, outputs = {}, {}
    for use_cache in (True, False, True):  # the cache twice: its first run also warms up
        t0 = time.perf_counter()
        outputs[use_cache] = model.generate(prompt, tokens, temperature=0, use_cache=use_cache)
        seconds[use_cache] = time.perf_counter() - t0
    same = torch.equal(outputs[True][:, : size["block_size"]],
                       outputs[False][:, : size["block_size"]])
    speedup = seconds[False] / seconds[True]
    print(table(["", "seconds", "tokens/s"], [
        ["no cache", f"{seconds[False]:.2f}", f"{tokens / seconds[False]:,.0f}"],
        ["KV cache", f"{seconds[True]:.2f}", f"{tokens / seconds[True]:,.0f}"]]))
    print(f"KV cache {speedup:.1f}x faster; the first {size['block_size']} tokens are "
          f"{'identical' if same else 'DIFFERENT'} both ways (past block_size the cache "
          "restarts from the last half window while the no-cache path slides)")
    return {"config": size, "tokens": tokens, "seconds_cache": seconds[True],
            "seconds_no_cache": seconds[False], "speedup": speedup, "identical": same}


def thread_rates(cfg: Config, args: argparse.Namespace) -> dict[str, float]:
    """Training tokens/s of stage 5 at every fixed thread count and with the tuner."""
    top = args.threads
    torch.manual_seed(0)
    runner = Runner(stage5(cfg), batches(cfg), True)
    out = {}
    for label, threads in [*((f"{n} thread{'s' * (n > 1)}", n) for n in range(1, top + 1)),
                           ("chosen by timing", None)]:
        torch.set_num_threads(top)
        tuner = ThreadTuner(threads)  # as the trainers use it
        for _ in range(args.warmup):
            runner.step()
        t0, steps = time.perf_counter(), 0
        while time.perf_counter() - t0 < args.thread_seconds:
            tuner.before_step()
            t = time.perf_counter()
            runner.step()
            tuner.after_step(time.perf_counter() - t)
            steps += 1
        out[label] = cfg.tokens * steps / (time.perf_counter() - t0)
    torch.set_num_threads(top)
    return out


def bench_threads(args: argparse.Namespace) -> dict:
    cfg = QUICK[0] if args.quick else CONFIGS[1]
    print(f"\n(d) thread choice, stage-5 training at {cfg.name}, tokens/s for "
          f"{args.thread_seconds:g} s each (the tuner times every count first, as in training)")
    quiet = thread_rates(cfg, args)
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.5)
        busy = thread_rates(cfg, args)
    finally:
        hog.kill()
        hog.wait()
    rows = [[k, f"{quiet[k]:,.0f}", f"{busy[k]:,.0f}"] for k in quiet]
    print(table(["threads", "quiet machine", "one core busy"], rows))
    best_busy = max(v for k, v in busy.items() if k != "chosen by timing")
    best_quiet = max(v for k, v in quiet.items() if k != "chosen by timing")
    print(f"chosen by timing: {quiet['chosen by timing'] / best_quiet:.2f}x the best fixed "
          f"count on a quiet machine, {busy['chosen by timing'] / best_busy:.2f}x with one "
          "core busy")
    return {"config": asdict(cfg), "quiet": quiet, "busy": busy}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python tools/bench.py", description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--threads", type=int, default=2, help="torch.set_num_threads")
    p.add_argument("--steps", type=int, default=30, help="timed steps per round")
    p.add_argument("--warmup", type=int, default=5, help="untimed steps before the first round")
    p.add_argument("--repeats", type=int, default=3, help="timed rounds; the median is reported")
    p.add_argument("--quick", action="store_true",
                   help=f"only one tiny configuration ({QUICK[0].name}): a smoke run")
    p.add_argument("--gen-tokens", type=int, default=500, help="tokens generated in (c)")
    p.add_argument("--thread-seconds", type=float, default=8.0,
                   help="seconds of training per thread setting in (d)")
    p.add_argument("--json", type=Path, default=None, metavar="PATH", help="also write the figures here")
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    for name in ("threads", "steps", "repeats"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1")
    if args.warmup < 0:
        parser.error("--warmup must be at least 0")
    torch.set_num_threads(args.threads)
    configs = QUICK if args.quick else CONFIGS
    machine = {"torch": torch.__version__, "threads": torch.get_num_threads(), "cpu": cpu_model(),
               "cpus": os.cpu_count(), "python": platform.python_version(), "load": compare.load_average()}
    print(f"torch {machine['torch']}, {machine['threads']} threads, CPU: {machine['cpu']} "
          f"({machine['cpus']} logical CPUs), Python {machine['python']}")
    print(f"{args.steps} timed steps x {args.repeats} rounds after {args.warmup} warmup steps; "
          f"random token batches, vocab {VOCAB}")
    print(LEGEND)
    if note := busy_note():
        print(note)
    t0 = time.perf_counter()
    forms = bench_forms(configs, args)
    gpt = bench_gpt(configs, args)
    cache = bench_cache(args)
    threads = bench_threads(args)
    print(f"\n({time.perf_counter() - t0:.0f} s in all. Peak memory not measured: see --help.)")
    if note := busy_note():
        print(note)
    machine["load_after"] = compare.load_average()
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        settings = vars(args) | {"json": str(args.json)}
        args.json.write_text(json.dumps({"machine": machine, "settings": settings,
                                         "stage4_forms": forms, "stage5_vs_stage4": gpt,
                                         "kv_cache": cache, "threads": threads}, indent=2))
        print(f"json: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
