"""The training harness (harness.py: the same file in stages 2-4, and stage 5's, which adds
precision and processes), report.py, checkpoint.py's --resume and the CLI
plumbing every stage shares: exact resume, the phases of the loop, best/latest
checkpoints, the divergence guard, the CPU threads timed once, "is my loss normal?",
out-dir checks, leftover temporary files, typed flags in checkpoints, tiny temperatures,
closed pipes. Every test runs against every stage that trains."""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import io
import json
import math
import os
import re
import signal
import subprocess
import sys
from argparse import Namespace
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from conftest import REPO_ROOT, TINY_TEXT, StopAfter, assert_same, module_env, read_log

TRAINING_STAGES = ["stage2_bigram", "stage3_attention", "stage4_block", "stage5_gpt"]

# Flags for a model small enough that a 20-step run takes well under a second.
MODEL_FLAGS = {
    "stage2_bigram": ["--block-size", 8],
    "stage3_attention": ["--block-size", 8, "--n-embd", 8],
    # Dropout draws from the global RNG: resume must restore it.
    "stage4_block": ["--block-size", 8, "--n-embd", 8, "--n-head", 2, "--n-layer", 1,
                     "--dropout", 0.1],
    "stage5_gpt": ["--block-size", 8, "--n-embd", 16, "--n-head", 2, "--n-layer", 1,
                   "--dropout", 0.1, "--warmup-iters", 3],
}


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def stage_modules(stage: str) -> SimpleNamespace:
    mods = {name: importlib.import_module(f"{stage}.{name}")
            for name in ("train", "harness", "report", "checkpoint", "model", "sample",
                         "cli")}
    model_cls = getattr(mods["model"], "GPT", None) or mods["model"].LanguageModel
    return SimpleNamespace(stage=stage, model_cls=model_cls, **mods)


@pytest.fixture(params=TRAINING_STAGES)
def S(request) -> SimpleNamespace:
    return stage_modules(request.param)


def tiny_args(S, data: Path, out: Path, *extra: object) -> list[str]:
    return [str(a) for a in (
        "--data", data, "--out-dir", out, "--device", "cpu", "--batch-size", 4,
        "--eval-interval", 5, "--eval-iters", 1, "--sample-tokens", 0,
        *MODEL_FLAGS[S.stage], *extra)]


def no_figures(mp: pytest.MonkeyPatch, S) -> None:
    """The PNGs are checked end to end in the stage CLI tests; here they only cost time."""
    mp.setattr(S.report, "plot_losses", lambda history, path, title="": Path(path))
    if hasattr(S.train, "attention_figure"):
        mp.setattr(S.train, "attention_figure", lambda model, tok, prompt, path: Path(path))


def run(S, argv: list[str]) -> tuple[dict, str]:
    """train() in this process; returns its metrics and what it printed."""
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        metrics = S.train.train(S.train.build_parser().parse_args(argv))
    return metrics, buf.getvalue()


# --------------------------------------------------------------------------- resume


def test_interrupted_then_resumed_with_default_flags_equals_one_run(S, tmp_path, tiny_corpus,
                                                                    monkeypatch):
    """Run A: 20 steps straight. Run B: stopped after 10 (Ctrl-C), then a bare --resume."""
    no_figures(monkeypatch, S)
    a, b = tmp_path / "a", tmp_path / "b"
    metrics_a, _ = run(S, tiny_args(S, tiny_corpus, a, "--max-iters", 20, "--sample-tokens", 4))
    stopper = StopAfter(10)
    with monkeypatch.context() as mp:
        mp.setattr(S.harness, "StopFlag", stopper)
        half_metrics, _ = run(S, tiny_args(S, tiny_corpus, b, "--max-iters", 20,
                                           "--sample-tokens", 4))
    assert stopper.world == 1  # one process: StopFlag(world=1)
    half = S.checkpoint.load_checkpoint(b / "ckpt.pt")
    assert half["step"] == 10 and half_metrics["interrupted"] is True
    # Nothing but --resume (and where to find the run): every setting comes from ckpt.pt.
    metrics_b, printed = run(S, ["--out-dir", str(b), "--resume", "--device", "cpu"])
    assert re.search(r"resuming from .*ckpt\.pt at step 10", printed)
    ca, cb = (S.checkpoint.load_checkpoint(p / "ckpt.pt") for p in (a, b))
    assert ca["step"] == cb["step"] == 20
    first = next(iter(cb["model"]))
    assert not torch.equal(half["model"][first], cb["model"][first]), "the second half trained"
    assert_same(ca["model"], cb["model"], "model")
    assert_same(ca["optimizer"], cb["optimizer"], "optimizer")
    assert_same(ca["rng"], cb["rng"], "rng")
    assert ca["best_val"] == cb["best_val"]

    def losses(rows):
        return {r["step"]: (r["train"], r["val"]) for r in rows}

    # B evaluated step 10 when Ctrl-C stopped it, and not again when it resumed there:
    # the same rows as A, with the same losses.
    assert [r["step"] for r in read_log(b)] == [r["step"] for r in read_log(a)] == [0, 5, 10,
                                                                                  15, 20]
    assert losses(read_log(a)) == losses(read_log(b))
    for key in ("steps", "train_loss", "val_loss", "best_val_loss", "interrupted", "params"):
        assert metrics_a[key] == metrics_b[key], key


def test_a_bare_resume_keeps_what_the_run_chose_by_timing(S, tmp_path, tiny_corpus, monkeypatch):
    """--threads (and stage 5's --dtype auto) are chosen by timing when not given: ckpt.pt
    keeps the choice and a bare --resume takes it instead of timing again, since another
    thread count sums in another order. The settings given are never rewritten."""
    no_figures(monkeypatch, S)
    out, before, seen = tmp_path / "run", torch.get_num_threads(), {}
    precision = hasattr(S.harness, "autocast")  # stage 5

    def pick(threads, one_step, why="--threads"):  # the timing "chooses" 2 threads
        seen["threads"], seen["why"] = threads, why
        torch.set_num_threads(threads or 2)
        return f"threads: {threads or 2} ({why})"

    def autocast(dtype, device):  # the timing "chooses" bfloat16 (computing float32 here)
        seen["dtype"] = dtype
        return (contextlib.nullcontext(), "bfloat16" if dtype == "auto" else dtype,
                torch.amp.GradScaler("cpu", enabled=False))

    try:
        with monkeypatch.context() as mp:
            mp.setattr(S.harness, "pick_threads", pick)
            if precision:
                mp.setattr(S.harness, "autocast", autocast)
            mp.setattr(S.harness, "StopFlag", StopAfter(10))
            _, first = run(S, tiny_args(S, tiny_corpus, out, "--max-iters", 20))
            saved = S.checkpoint.load_checkpoint(out / "ckpt.pt")
            assert saved["threads"] == 2 and saved["args"]["threads"] is None
            torch.set_num_threads(1)  # what a new timing might choose
            _, printed = run(S, ["--out-dir", str(out), "--resume", "--device", "cpu"])
    finally:
        torch.set_num_threads(before)
    assert seen["threads"] == 2, "the resumed run timed the threads again"
    assert "threads: 2 (the run's own, from ckpt.pt)" in printed, printed
    if precision:
        assert saved["dtype"] == "bfloat16" and saved["args"]["dtype"] == "auto"
        assert seen["dtype"] == "bfloat16", "the resumed run timed the precision again"
        assert "precision: bfloat16 forward pass (the run's own, from ckpt.pt)" in printed
        # The printed choice says how to repeat it, as the thread count's line does.
        assert ("precision: bfloat16 forward pass (--dtype auto; --dtype bfloat16 repeats this "
                "run)") in first, first


def test_resume_refuses_a_flag_that_would_change_the_run(S, tmp_path, tiny_corpus, monkeypatch,
                                                          capsys):
    no_figures(monkeypatch, S)
    out = tmp_path / "run"
    run(S, tiny_args(S, tiny_corpus, out, "--max-iters", 2, "--lr", "0.005"))
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        S.train.main(tiny_args(S, tiny_corpus, out, "--max-iters", 4, "--resume", "--lr", "0.02"))
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --lr 0.02 conflicts with the checkpoint's 0.005")
    # Without the flag, the checkpoint's value is used; the flags as given stay as they were.
    args = S.train.build_parser().parse_args(["--out-dir", str(out), "--resume"])
    given = vars(args).copy()
    with contextlib.redirect_stdout(io.StringIO()):
        r = S.harness.Run(args, S.train.build_parser(), S.train.RESUMED)
    assert r.args.lr == 0.005 and r.args.max_iters == 2 and r.args.data == str(tiny_corpus)
    assert vars(args) == given, "the flags given were rewritten"


def test_resume_with_a_new_max_iters_says_so_and_runs_to_it(S, tmp_path, tiny_corpus,
                                                            monkeypatch):
    no_figures(monkeypatch, S)
    out = tmp_path / "run"
    run(S, tiny_args(S, tiny_corpus, out, "--max-iters", 4))
    metrics, printed = run(S, ["--out-dir", str(out), "--resume", "--device", "cpu",
                               "--max-iters", "8"])
    assert "note: the run was planned for --max-iters 4; it now runs to 8," in printed
    assert metrics["steps"] == 8 and S.checkpoint.load_checkpoint(out / "ckpt.pt")["step"] == 8


def test_resumed_flags_are_every_setting_of_the_run_and_no_more(S):
    """train.py lists what --resume restores (RESUMED): every flag but those of where and
    how long a run goes on. A flag added to train.py without a place here fails."""
    restored = set(S.train.RESUMED)
    assert len(restored) == len(S.train.RESUMED)
    every = set(vars(S.train.build_parser().parse_args([])))
    run_flags = every - restored
    # What a resumed run may change: where it runs, where it writes, how long it goes on.
    assert run_flags <= {"max_iters", "device", "out_dir", "resume", "sample_tokens",
                         "threads", "preset", "dtype"}
    assert {"max_iters", "device", "out_dir", "resume", "sample_tokens"} <= run_flags
    assert {"data", "val_fraction", "block_size", "batch_size", "lr", "seed",
            "eval_interval", "eval_iters"} <= restored


def test_checkpoints_store_typed_flag_values(S, tmp_path, tiny_corpus, monkeypatch):
    no_figures(monkeypatch, S)
    out = tmp_path / "run"
    run(S, tiny_args(S, tiny_corpus, out, "--max-iters", 1))
    saved = S.checkpoint.load_checkpoint(out / "ckpt.pt")["args"]
    assert isinstance(saved["lr"], float) and isinstance(saved["max_iters"], int)
    assert saved["resume"] is False and saved["out_dir"] == str(out)
    assert saved["block_size"] == 8


# --------------------------------------------------------------------------- best / latest


def test_best_checkpoint_keeps_the_lowest_val_not_the_latest(S, tmp_path, tiny_corpus,
                                                            monkeypatch):
    """Scripted val losses that go down, then up: best.pt must stay at the minimum."""
    no_figures(monkeypatch, S)
    vals = iter([3.0, 2.0, 2.5, 1.9999, 2.8])  # steps 0, 5, 10, 15, 20 -> best at 15
    snapshots = {}

    def fake_estimate(model, splits, args, device):
        v = next(vals)
        snapshots[v] = {k: t.clone() for k, t in model.state_dict().items()}
        return {"train": v + 0.1, "val": v}

    monkeypatch.setattr(S.harness, "estimate_loss", fake_estimate)
    out = tmp_path / "run"
    metrics, _ = run(S, tiny_args(S, tiny_corpus, out, "--max-iters", 20))
    best = S.checkpoint.load_checkpoint(out / "best.pt")
    latest = S.checkpoint.load_checkpoint(out / "ckpt.pt")
    assert best["step"] == 15 and best["best_val"] == 1.9999
    assert latest["step"] == 20 and latest["best_val"] == 1.9999
    assert_same(best["model"], snapshots[1.9999], "best")
    assert_same(latest["model"], snapshots[2.8], "latest")
    assert metrics["best_val_loss"] == 1.9999 and metrics["val_loss"] == 2.8
    assert metrics["best_val_step"] == 15
    assert [r["step"] for r in read_log(out)] == [0, 5, 10, 15, 20]
    saved = json.loads((out / "metrics.json").read_text(encoding="utf-8"))
    assert saved["best_val_step"] == 15 and saved["steps"] == 20


def test_best_checkpoint_remeasures_to_the_logged_val_loss(S, tmp_path, tiny_corpus,
                                                           monkeypatch):
    no_figures(monkeypatch, S)
    out = tmp_path / "run"
    run(S, tiny_args(S, tiny_corpus, out, "--max-iters", 10))
    rows = read_log(out)
    best_row = min(rows, key=lambda r: r["val"])
    model, tok, ckpt = S.checkpoint.load_model(out / "best.pt")
    assert ckpt["step"] == best_row["step"]
    args = Namespace(**ckpt["args"])
    corpus = importlib.import_module(f"{S.stage}.data").Corpus.load(args.data, args.val_fraction,
                                                                    tok)
    again = S.harness.estimate_loss(model, {"val": corpus.val}, args, "cpu")["val"]
    assert again == pytest.approx(best_row["val"], abs=1e-5)


# --------------------------------------------------------------------------- divergence


def test_nan_loss_stops_and_names_the_last_good_checkpoint(S, tmp_path, tiny_corpus,
                                                           monkeypatch, capsys):
    no_figures(monkeypatch, S)
    real_forward = S.model_cls.forward
    calls = {"train": 0}

    def forward(self, idx, targets=None, *a, **kw):
        logits, loss = real_forward(self, idx, targets, *a, **kw)
        if self.training and targets is not None:
            calls["train"] += 1
            if calls["train"] > 7:  # step 7 onwards
                loss = loss * float("nan")
        return logits, loss

    monkeypatch.setattr(S.model_cls, "forward", forward)
    out = tmp_path / "run"
    with pytest.raises(SystemExit) as e:
        S.train.main(tiny_args(S, tiny_corpus, out, "--max-iters", 20))
    assert e.value.code == 2
    err = capsys.readouterr().err
    last = [line for line in re.split(r"[\r\n]", err) if line.strip()][-1]  # after tqdm's bar
    assert last.startswith("error: the loss became nan at step 7")
    assert str(out / "ckpt.pt") in err and "--lr" in err
    ckpt = S.checkpoint.load_checkpoint(out / "ckpt.pt")
    assert ckpt["step"] == 5  # the last evaluation before things went wrong
    assert all(torch.isfinite(t).all() for t in ckpt["model"].values())
    assert [r["step"] for r in read_log(out)] == [0, 5]
    assert not (out / "metrics.json").exists(), "no metrics of a diverged run"


def test_a_huge_learning_rate_ends_with_a_clear_error_and_a_finite_checkpoint(
        S, tmp_path, tiny_corpus, monkeypatch, capsys):
    """The failure a learner meets: a huge --lr (once wrote NaN weights and exited 0)."""
    no_figures(monkeypatch, S)
    out = tmp_path / "run"
    argv = tiny_args(S, tiny_corpus, out, "--max-iters", 300, "--lr", "1e20",
                     "--eval-interval", 1000)
    if S.stage == "stage2_bigram":
        # A lookup table has nothing to overflow: with no weight decay, Adam moves each
        # score by about lr per step and the run ends with finite (useless) scores.
        S.train.main(argv)
        ckpt = S.checkpoint.load_checkpoint(out / "ckpt.pt")
        assert all(torch.isfinite(t).all() for t in ckpt["model"].values())
        return
    with pytest.raises(SystemExit) as e:
        S.train.main(argv)
    assert e.value.code == 2
    assert "training diverged" in capsys.readouterr().err
    ckpt = S.checkpoint.load_checkpoint(out / "ckpt.pt")
    assert all(torch.isfinite(t).all() for t in ckpt["model"].values())
    S.checkpoint.load_model(out / "ckpt.pt")


def test_last_good_checkpoint_is_really_good_when_weights_blow_up(S, tmp_path, tiny_corpus,
                                                                   monkeypatch):
    no_figures(monkeypatch, S)
    real_forward = S.model_cls.forward
    calls = {"train": 0}

    def forward(self, idx, targets=None, *a, **kw):
        logits, loss = real_forward(self, idx, targets, *a, **kw)
        if self.training and targets is not None:
            calls["train"] += 1
            if calls["train"] == 5:  # step 4: the loss is finite, its gradient is not
                zero = next(self.parameters()).abs().sum() * 0.0
                loss = loss + 0.0 * zero.sqrt()
        return logits, loss

    monkeypatch.setattr(S.model_cls, "forward", forward)
    out = tmp_path / "run"
    with pytest.raises(S.harness.UserError, match="diverged") as e:
        run(S, tiny_args(S, tiny_corpus, out, "--max-iters", 20))
    assert str(out / "ckpt.pt") in str(e.value)
    ckpt = S.checkpoint.load_checkpoint(out / "ckpt.pt")
    assert all(torch.isfinite(t).all() for t in ckpt["model"].values()), \
        f"ckpt.pt (step {ckpt['step']}) holds NaN weights"


# --------------------------------------------------------------------------- bad resumes


def test_resume_without_checkpoint_is_a_user_error(S, tmp_path, tiny_corpus, capsys):
    with pytest.raises(SystemExit) as e:
        S.train.main(tiny_args(S, tiny_corpus, tmp_path / "empty", "--resume"))
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: no checkpoint at") and "ckpt.pt" in err


def test_resume_after_the_data_file_changed_is_a_user_error(S, tmp_path, monkeypatch):
    no_figures(monkeypatch, S)
    data = tmp_path / "text.txt"
    data.write_text(TINY_TEXT, encoding="utf-8")
    out = tmp_path / "run"
    run(S, tiny_args(S, data, out, "--max-iters", 1))
    # Same file name, fewer characters: the ids would mean other characters now.
    data.write_text("the cat sat on the mat.\n" * 100, encoding="utf-8")
    with pytest.raises(S.harness.UserError, match="vocabulary") as e:
        run(S, tiny_args(S, data, out, "--resume"))
    assert "ckpt.pt" in str(e.value)
    assert S.checkpoint.load_checkpoint(out / "ckpt.pt")["step"] == 1


def test_resume_of_a_checkpoint_without_training_state_is_a_user_error(S, tmp_path, tiny_corpus,
                                                                       capsys):
    flags = S.train.build_parser().parse_args([str(a) for a in MODEL_FLAGS[S.stage]])
    model = S.model_cls(S.train.model_config(flags, 4))
    tok = importlib.import_module(f"{S.stage}.tokenizer").CharTokenizer("abcd")
    S.checkpoint.save_checkpoint(tmp_path / "run" / "ckpt.pt", model, tok, step=1)
    with pytest.raises(SystemExit) as e:
        S.train.main(tiny_args(S, tiny_corpus, tmp_path / "run", "--resume"))
    assert e.value.code == 2
    assert "cannot be resumed" in capsys.readouterr().err


# --------------------------------------------------------------------------- out-dir, tmp files


@pytest.mark.parametrize("where", ["file", "parent_is_file"])
def test_unusable_out_dir_fails_before_any_work(S, tmp_path, tiny_corpus, capsys, where):
    blocker = tmp_path / "blocker"
    blocker.write_text("a file, not a folder", encoding="utf-8")
    out = blocker if where == "file" else blocker / "run"
    with pytest.raises(SystemExit) as e:
        S.train.main(tiny_args(S, tiny_corpus, out, "--max-iters", 5))
    assert e.value.code == 2
    printed, err = capsys.readouterr()
    assert err.startswith("error: --out-dir") and str(out) in err, err
    assert "Traceback" not in err and "step" not in printed, "it trained before checking"


def test_leftover_temporary_checkpoints_are_removed_at_the_next_start(S, tmp_path, tiny_corpus,
                                                                      monkeypatch):
    no_figures(monkeypatch, S)
    out = tmp_path / "run"
    out.mkdir()
    dead = out / "ckpt.pt.2147483646.tmp"  # a pid no process has: its writer was killed
    alive = out / f"best.pt.{os.getppid()}.tmp"  # a running process may still be writing
    other = out / "notes.tmp"
    for f in (dead, alive, other):
        f.write_bytes(b"half a checkpoint")
    run(S, tiny_args(S, tiny_corpus, out, "--max-iters", 1))
    assert not dead.exists()
    assert alive.exists() and other.exists()


# --------------------------------------------------------------------------- sampling


@pytest.mark.parametrize("temperature", [1e-45, 1e-320, 1e-8])
def test_tiny_temperature_is_greedy_not_an_overflow(S, temperature):
    torch.manual_seed(0)
    logits = torch.randn(5, 11) * 30
    picked = S.model.sample_next(logits, temperature,
                                 generator=torch.Generator().manual_seed(0))
    assert torch.equal(picked, logits.argmax(dim=-1, keepdim=True))
    picked = S.model.sample_next(logits, temperature, top_k=3,
                                 generator=torch.Generator().manual_seed(0))
    assert torch.equal(picked, logits.argmax(dim=-1, keepdim=True))


def test_temperature_flag_rejects_nan_inf_and_negatives(S, capsys):
    for bad in ("nan", "inf", "-1"):
        with pytest.raises(SystemExit) as e:
            S.sample.main(["--temperature", bad])
        assert e.value.code == 2
        assert "error: argument --temperature" in capsys.readouterr().err


@pytest.fixture(scope="module")
def tiny_checkpoints(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("harness_ckpts")
    data = folder / "tiny.txt"
    data.write_text(TINY_TEXT, encoding="utf-8")
    paths = {}
    with pytest.MonkeyPatch.context() as mp:
        for stage in TRAINING_STAGES:
            S = stage_modules(stage)
            no_figures(mp, S)
            run(S, tiny_args(S, data, folder / stage, "--max-iters", 3))
            paths[stage] = folder / stage
    return paths


def test_sample_into_a_closed_pipe_stops_quietly(S, tiny_checkpoints):
    out = tiny_checkpoints[S.stage]
    cmd = (f"{sys.executable} -m {S.stage}.sample --ckpt {out / 'ckpt.pt'} --tokens 20000 "
           "--device cpu | head -c 20")
    proc = subprocess.run(["bash", "-o", "pipefail", "-c", cmd], capture_output=True, text=True,
                          env=module_env(), cwd=REPO_ROOT, timeout=120)
    assert len(proc.stdout) == 20
    assert proc.stderr == "", proc.stderr
    assert proc.returncode == 0


def test_tools_default_to_best_then_fall_back_to_the_latest_checkpoint(S, tiny_checkpoints,
                                                                       tmp_path):
    out = tiny_checkpoints[S.stage]
    assert S.checkpoint.default_checkpoint(out / "best.pt") == out / "best.pt"
    only_latest = tmp_path / "only_latest"
    only_latest.mkdir()
    (only_latest / "ckpt.pt").write_bytes((out / "ckpt.pt").read_bytes())
    assert S.checkpoint.default_checkpoint(only_latest / "best.pt") == only_latest / "ckpt.pt"
    # An explicit other file is taken as it is.
    assert S.checkpoint.default_checkpoint(out / "ckpt.pt") == out / "ckpt.pt"
    assert S.checkpoint.default_checkpoint() == Path("out") / S.stage / "best.pt" or \
        S.checkpoint.default_checkpoint().name == "ckpt.pt"
    assert S.sample.build_parser().get_default("ckpt") == Path("out") / S.stage / "best.pt"


def test_every_float_flag_is_validated(S):
    """No float flag takes argparse's bare float: each says which range it accepts."""
    for parser in (S.train.build_parser(), S.sample.build_parser()):
        for action in parser._actions:
            assert action.type is not float, f"--{action.dest} has no validator"


def test_losses_in_log_and_metrics_are_finite_numbers(S, tiny_checkpoints):
    out = tiny_checkpoints[S.stage]
    rows = read_log(out)
    assert [r["step"] for r in rows] == [0, 3]
    for r in rows:
        assert {"step", "train", "val", "lr", "time"} <= r.keys()
        assert math.isfinite(r["train"]) and math.isfinite(r["val"])
    metrics = json.loads((out / "metrics.json").read_text(encoding="utf-8"))
    assert metrics["stage"] == S.stage and metrics["steps"] == 3
    assert metrics["best_val_loss"] == min(r["val"] for r in rows)


# --------------------------------------------------------------------------- threads


@pytest.fixture
def threads():
    """Puts torch's thread count back after a test that changes it."""
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


class FakeClock:
    """Stands in for ``time`` in pick_threads: ``one_step`` 'takes' ``cost[threads]`` seconds."""

    def __init__(self, cost: dict[int, float]):
        self.cost, self.now, self.calls = cost, 0.0, Counter()

    def perf_counter(self) -> float:
        return self.now

    def one_step(self) -> None:
        n = torch.get_num_threads()
        self.calls[n] += 1
        self.now += self.cost[n]


@pytest.mark.parametrize("cost, best", [
    ({1: 0.010, 2: 0.020, 4: 0.050}, 1),  # another program holds cores: 1 thread is fastest
    ({1: 0.010, 2: 0.006, 4: 0.004}, 4),  # a quiet machine: all of them
    ({1: 0.010, 2: 0.005, 4: 0.007}, 2),
])
def test_pick_threads_keeps_the_fastest_of_the_timed_counts(S, monkeypatch, threads, cost, best):
    torch.set_num_threads(4)
    clock = FakeClock(cost)
    monkeypatch.setattr(S.harness, "time", SimpleNamespace(perf_counter=clock.perf_counter))
    line = S.harness.pick_threads(None, clock.one_step)
    assert torch.get_num_threads() == best
    timed = ", ".join(f"{n}: {cost[n] * 1000:.1f} ms" for n in (1, 2, 4))
    assert line == f"threads: {best} (timed per step: {timed}; --threads {best} repeats this run)"
    assert clock.calls == {1: 4, 2: 4, 4: 4}  # at each count: a warm-up, then three timed steps


def test_pick_threads_times_one_two_four_eight_and_the_machines_count(S, monkeypatch, threads):
    torch.set_num_threads(12)
    clock = FakeClock({1: 0.05, 2: 0.04, 4: 0.03, 8: 0.02, 12: 0.03})
    monkeypatch.setattr(S.harness, "time", SimpleNamespace(perf_counter=clock.perf_counter))
    assert S.harness.pick_threads(None, clock.one_step).startswith("threads: 8 (timed")
    assert sorted(clock.calls) == [1, 2, 4, 8, 12] and torch.get_num_threads() == 8
    torch.set_num_threads(1)  # nothing to choose: no timing at all
    assert S.harness.pick_threads(None, clock.one_step) == "threads: 1"
    assert sum(clock.calls.values()) == 20


def test_threads_flag_pins_the_count_without_timing(S, threads):
    calls = []
    assert S.harness.pick_threads(3, lambda: calls.append(1)) == "threads: 3 (--threads)"
    assert torch.get_num_threads() == 3 and calls == []
    args = S.train.build_parser().parse_args(["--threads", "2"])
    assert args.threads == 2 and S.train.build_parser().get_default("threads") is None


def test_the_timing_step_changes_no_weight_and_no_random_state(S, tmp_path, tiny_corpus,
                                                               monkeypatch, threads):
    """Checked around every call of the timing step in a real run (dropout in stages 4-5
    draws from torch's global RNG)."""
    no_figures(monkeypatch, S)
    torch.set_num_threads(2)  # two counts to time: 1 and 2
    timing_step, counts = S.harness.Run._timing_step, []

    def checked(self):
        weights = {k: v.clone() for k, v in self.model.state_dict().items()}
        rng, batches = torch.get_rng_state(), self.batches.get_state()
        timing_step(self)
        assert_same(self.model.state_dict(), weights, "weights")
        assert all(p.grad is None for p in self.model.parameters()), "a gradient was left"
        assert torch.equal(torch.get_rng_state(), rng), "torch's RNG moved"
        assert torch.equal(self.batches.get_state(), batches), "the batch RNG moved"
        counts.append(torch.get_num_threads())

    monkeypatch.setattr(S.harness.Run, "_timing_step", checked)
    run(S, tiny_args(S, tiny_corpus, tmp_path / "run", "--max-iters", 1))
    assert counts == [1] * 4 + [2] * 4


def test_a_timed_run_equals_a_run_with_the_printed_threads_loss_for_loss(
        S, tmp_path, tiny_corpus, monkeypatch, threads):
    no_figures(monkeypatch, S)
    torch.set_num_threads(2)
    flags = ("--max-iters", 12, "--eval-interval", 3, "--sample-tokens", 12)
    timed_metrics, printed = run(S, tiny_args(S, tiny_corpus, tmp_path / "timed", *flags))
    line = re.search(r"^threads: (\d) \(timed per step: 1: [\d.]+ ms, 2: [\d.]+ ms; "
                     r"--threads (\d) repeats this run\)$", printed, re.M)
    assert line and line[1] == line[2], printed
    pinned_metrics, pinned = run(S, tiny_args(S, tiny_corpus, tmp_path / "pinned", *flags,
                                              "--threads", line[1]))
    assert f"threads: {line[1]} (--threads)" in pinned and "timed per step" not in pinned

    def losses(out):
        return [(r["step"], r["train"], r["val"]) for r in read_log(out)]

    assert losses(tmp_path / "timed") == losses(tmp_path / "pinned")
    assert len(losses(tmp_path / "timed")) == 5  # steps 0, 3, 6, 9, 12
    a, b = (S.checkpoint.load_checkpoint(tmp_path / d / "ckpt.pt") for d in ("timed", "pinned"))
    assert_same(a["model"], b["model"], "model")
    assert_same(a["rng"], b["rng"], "rng")
    assert timed_metrics["sample"] == pinned_metrics["sample"]


# --------------------------------------------------------------------------- the loop's phases


def record_phases(mp: pytest.MonkeyPatch, S) -> list[tuple[str, int]]:
    """Every evaluate() and get_batch() of the training loop, with the step it came at."""
    events: list[tuple[str, int]] = []
    evaluate, get_batch = S.harness.Run.evaluate, S.harness.Run.get_batch

    def spy_evaluate(self):
        events.append(("evaluate", self.step))
        return evaluate(self)

    def spy_get_batch(self):
        events.append(("batch", self.step))
        return get_batch(self)

    mp.setattr(S.harness.Run, "evaluate", spy_evaluate)
    mp.setattr(S.harness.Run, "get_batch", spy_get_batch)
    return events


def batches(first: int, last: int) -> list[tuple[str, int]]:
    return [("batch", s) for s in range(first, last)]


def test_evaluation_comes_first_at_step_0_and_every_eval_interval(S, tmp_path, tiny_corpus,
                                                                  monkeypatch):
    no_figures(monkeypatch, S)
    events = record_phases(monkeypatch, S)
    _, printed = run(S, tiny_args(S, tiny_corpus, tmp_path / "run", "--max-iters", 12))
    assert events == [("evaluate", 0), *batches(0, 5), ("evaluate", 5), *batches(5, 10),
                      ("evaluate", 10), *batches(10, 12), ("evaluate", 12)]  # the last by finish
    # evaluate() prints its own line, once per evaluation; finish() adds the best, in
    # another line (the last losses are not printed twice).
    for step in (0, 5, 10, 12):
        assert printed.count(f"step {step:5d}: train loss") == 1, printed
    assert re.search(r"^best val loss \d+\.\d{4} at step \d+; \d+\.\d s of training$", printed,
                     re.MULTILINE), printed
    assert [r["step"] for r in read_log(tmp_path / "run")] == [0, 5, 10, 12]


@pytest.mark.parametrize("stop, log", [(5, [0, 5, 10, 12]), (7, [0, 5, 7, 10, 12])])
def test_a_resumed_run_does_not_evaluate_its_first_step_twice(S, tmp_path, tiny_corpus,
                                                              monkeypatch, stop, log):
    no_figures(monkeypatch, S)
    out = tmp_path / "run"
    with monkeypatch.context() as mp:
        mp.setattr(S.harness, "StopFlag", StopAfter(stop))
        events = record_phases(mp, S)
        run(S, tiny_args(S, tiny_corpus, out, "--max-iters", 12))
    evaluated = [0, 5] if stop == 7 else [0]
    assert [e for e in events if e[0] == "evaluate"] == [("evaluate", s) for s in evaluated] + [
        ("evaluate", stop)]  # the last one by finish(), at the step Ctrl-C stopped
    with monkeypatch.context() as mp:
        events = record_phases(mp, S)
        run(S, ["--out-dir", str(out), "--resume", "--device", "cpu"])
    assert events == [*batches(stop, 10), ("evaluate", 10), *batches(10, 12), ("evaluate", 12)]
    assert [r["step"] for r in read_log(out)] == log


def test_ctrl_c_sets_the_stop_flag_and_a_second_one_interrupts(S):
    previous = signal.getsignal(signal.SIGINT)
    processes = S.stage == "stage5_gpt"  # StopFlag(world, device): several processes
    with (S.harness.StopFlag(1, "cpu") if processes else S.harness.StopFlag()) as flag:
        asked = (lambda: flag.stop) if processes else (lambda: flag.pressed)
        assert asked() is False
        signal.raise_signal(signal.SIGINT)
        assert asked() is True
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signal.SIGINT)  # pressed again: out now
    assert signal.getsignal(signal.SIGINT) is previous


# --------------------------------------------------------------------------- parameters


class Toy(torch.nn.Module):
    """Named like GPT-2: transformer.wte, transformer.h, lm_head."""

    def __init__(self, tie: bool):
        super().__init__()
        self.transformer = torch.nn.ModuleDict(dict(
            wte=torch.nn.Embedding(5, 3),
            h=torch.nn.ModuleList([torch.nn.Linear(3, 3), torch.nn.Linear(3, 3)])))
        self.lm_head = torch.nn.Linear(3, 5)
        if tie:
            self.lm_head.weight = self.transformer.wte.weight


def test_param_breakdown_groups_by_part_and_counts_a_tied_weight_once(S):
    untied = S.report.param_breakdown(Toy(tie=False))
    assert untied == {"transformer.wte": 15, "transformer.h": 24, "lm_head": 20, "total": 59}
    assert list(untied) == ["transformer.wte", "transformer.h", "lm_head", "total"]
    tied = S.report.param_breakdown(Toy(tie=True))
    assert tied == {"transformer.wte": 15, "transformer.h": 24, "lm_head": 5, "total": 44}


def test_param_breakdown_of_gpt_with_tied_weights():
    from stage5_gpt.model import GPT, GPTConfig
    from stage5_gpt.report import param_breakdown

    V, T, C = 11, 4, 8
    config = dict(vocab_size=V, block_size=T, n_embd=C, n_head=2, n_layer=2)
    untied, tied = GPT(GPTConfig(**config, tie_weights=False)), GPT(GPTConfig(**config))
    parts, tparts = param_breakdown(untied), param_breakdown(tied)
    assert list(parts) == ["transformer.wte", "transformer.wpe", "transformer.h",
                           "transformer.ln_f", "lm_head", "total"]
    assert parts["transformer.wte"] == tparts["transformer.wte"] == V * C
    assert parts["transformer.wpe"] == T * C and parts["transformer.ln_f"] == 2 * C
    assert parts["transformer.h"] == sum(p.numel() for p in untied.transformer.h.parameters())
    assert parts["lm_head"] == C * V and "lm_head" not in tparts  # tied: nothing of its own
    assert parts["total"] == sum(p.numel() for p in untied.parameters())
    assert tparts["total"] == parts["total"] - V * C == sum(p.numel() for p in tied.parameters())


# --------------------------------------------------------------------------- is my loss normal?


def settings_for(S, argv: list[str], text: str) -> dict:
    """The settings key the harness computes for a run with these flags."""
    parser = S.train.build_parser()
    return S.report.run_settings(parser.parse_args(argv), S.train.RESUMED, text)


def reference(settings: dict, val: float, *, name: str = "defaults", data: str = "en",
              command: str = "python -m stage.train", tol: float = 0.01,
              seconds: float = 1e6) -> dict:
    return {"name": name, "command": command, "data": data, "settings": settings,
            "val_loss": val, "best_val_loss": val, "train_seconds": seconds, "tolerance": tol}


def write_references(path: Path, *refs: dict, device: str = "cpu",
                     version: str | None = None) -> Path:
    path.write_text(json.dumps({
        "made_by": "a test", "torch": version or torch.__version__, "device": device,
        "tolerance_is": "a test's margin", "references": list(refs),
    }), encoding="utf-8")
    return path


@pytest.fixture
def reference_run(S, tmp_path, tiny_corpus, monkeypatch):
    """A tiny run's flags and metrics, with the stage's reference file moved to tmp_path."""
    no_figures(monkeypatch, S)
    path = tmp_path / f"{S.stage}.json"
    monkeypatch.setattr(S.report, "REFERENCES", path)
    argv = tiny_args(S, tiny_corpus, tmp_path / "first", "--max-iters", 6)
    metrics, printed = run(S, argv)
    assert "is this loss normal?" not in printed  # no reference file: nothing to say
    return SimpleNamespace(argv=argv, metrics=metrics, path=path, corpus=tiny_corpus,
                           settings=settings_for(S, argv, TINY_TEXT), tmp=tmp_path)


def again(S, r, *extra: object) -> str:
    """The same run in a fresh --out-dir (plus ``extra`` flags); what it printed."""
    i = r.argv.index("--out-dir")
    argv = [*r.argv[:i + 1], str(r.tmp / "again"), *r.argv[i + 2:], *map(str, extra)]
    return run(S, argv)[1]


def test_the_references_live_in_the_repositorys_references_folder(S):
    assert S.report.REFERENCES == REPO_ROOT / "references" / f"{S.stage}.json"
    assert S.report.REFERENCES.is_file()
    assert not (REPO_ROOT / S.stage / "reference.json").exists()


def test_same_settings_print_the_reference_and_an_in_range_verdict(S, reference_run):
    r = reference_run
    write_references(r.path, reference(r.settings, r.metrics["val_loss"] + 0.005, tol=0.01))
    printed = again(S, r)
    assert (f"is this loss normal? reference for these settings (defaults): val loss "
            f"{r.metrics['val_loss'] + 0.005:.4f} +- 0.0100") in printed
    assert f"val loss {r.metrics['val_loss']:.4f}, within the expected range" in printed
    assert "Likely causes" not in printed and "time:" not in printed


def test_without_an_exact_reference_the_nearest_is_named_with_the_flags_that_differ(
        S, reference_run):
    r = reference_run
    other = r.tmp / "other.txt"  # another corpus than the reference's
    other.write_text(TINY_TEXT.replace("cat", "cow"), encoding="utf-8")
    lr = r.settings["lr"]
    far = reference({**r.settings, "seed": 1, "lr": 0.5, "batch_size": 2}, 2.0, name="far",
                    data="tiny.txt", command="python -m x.train --far")
    near = reference(r.settings, 2.0, name="tiny", data="tiny.txt",
                     command=f"python -m {S.stage}.train --data tiny.txt")
    write_references(r.path, far, near)
    printed = again(S, r, "--data", other, "--lr", 0.02)
    assert (f"is this loss normal? no reference for exactly these settings; the nearest is "
            f"'tiny' (python -m {S.stage}.train --data tiny.txt), which differs in "
            f"--data ({other} here, tiny.txt there), --lr (0.02 here, {lr} there). Every "
            "reference is listed in docs/troubleshooting.md (中文: docs/zh/troubleshooting.md)"
            ) in printed.splitlines()
    assert "within the expected range" not in printed
    # One flag changed: only that flag is named.
    printed = again(S, r, "--seed", 7)
    assert (f"the nearest is 'tiny' (python -m {S.stage}.train --data tiny.txt), which "
            f"differs in --seed (7 here, {r.settings['seed']} there). Every reference") in printed


def test_a_run_out_of_range_gets_the_likely_causes(S, reference_run):
    r = reference_run
    ref = r.metrics["val_loss"] + 0.5
    write_references(r.path, reference(r.settings, ref, tol=0.1, seconds=1e-4), device="mps",
                     version="1.0.0")
    printed = again(S, r)
    assert (f"val loss {r.metrics['val_loss']:.4f}, 0.4000 below the expected range "
            f"{ref - 0.1:.4f} to {ref + 0.1:.4f}. Likely causes:") in printed
    assert "it trained on cpu, the reference on mps" in printed
    assert f"torch {torch.__version__} here, 1.0.0 for the reference" in printed


def test_a_slow_run_gets_the_busy_machine_hint(S):
    """Past twice the reference's seconds (and only then), the hint about a busy machine."""
    ref = {"name": "defaults", "val_loss": 1.5, "tolerance": 0.01, "best_val_loss": 1.5,
           "train_seconds": 10.0}
    data = {"made_by": "test", "torch": torch.__version__, "device": "cpu", "tolerance_is": "x"}
    metrics = {"val_loss": 1.5, "interrupted": False, "steps": 10}
    compare = S.report.compare_to_reference
    slow = compare({**metrics, "train_seconds": 25.0}, ref, data, "cpu", False)
    ok = compare({**metrics, "train_seconds": 15.0}, ref, data, "cpu", False)
    resumed = compare({**metrics, "train_seconds": 25.0}, ref, data, "cpu", True)
    hint = "2.5x the reference's: a slower CPU, or a busy machine"
    assert any(hint in line and "--threads N pins the count" in line for line in slow), slow
    assert not any("busy machine" in line for line in ok + resumed)


@pytest.mark.parametrize("content", ["{not json", "[]", '{"references": [{"settings": {}}]}',
                                     '{"references": 3}'])
def test_a_broken_reference_file_never_stops_the_run(S, reference_run, content):
    r = reference_run
    r.path.write_text(content, encoding="utf-8")
    printed = again(S, r)
    assert f"is this loss normal? {S.stage}.json is unreadable" in printed
    assert (r.tmp / "again" / "metrics.json").is_file()  # the run finished all the same


def test_the_report_is_one_block_that_a_transcript_can_leave_out(S, reference_run,
                                                                  monkeypatch):
    """There is no switch (COURSE_NO_REFERENCE) any more: the report is always printed, as
    one line starting "is this loss normal?" and indented lines after it, which is what
    the docs' transcripts cut out."""
    r = reference_run
    write_references(r.path, reference(r.settings, r.metrics["val_loss"] + 0.5, tol=0.1),
                     device="mps", version="1.0.0")
    monkeypatch.setenv("COURSE_NO_REFERENCE", "1")
    lines = again(S, r).splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("is this loss normal?"))
    end = start + 1
    while end < len(lines) and lines[end].startswith("  "):
        end += 1
    block, rest = lines[start:end], lines[:start] + lines[end:]
    assert any("Likely causes" in line for line in block)
    assert any(line.startswith("  - it trained on cpu") for line in block)
    assert any(line.startswith("  - otherwise") for line in block)
    assert not any(line.startswith(("is this loss normal?", "  - ", "  this run", "  from "))
                   or "Likely causes" in line or "expected range" in line for line in rest), rest


def test_an_interrupted_run_gets_no_verdict(tmp_path):
    from stage2_bigram import report as ref

    path = write_references(tmp_path / "r.json", reference({"seed": 1}, 2.0))
    metrics = {"val_loss": 9.0, "interrupted": True, "steps": 10, "train_seconds": 1.0,
               "data": "en"}
    lines = ref.reference_report(metrics, {"seed": 1}, "cpu", path=path)
    assert lines[-1] == "  this run stopped at step 10, before the end: no verdict"
    assert ref.reference_report(metrics, {"seed": 1}, "cpu", path=tmp_path / "no") == []


def test_the_settings_key_names_the_corpus_by_its_text_not_by_the_flag(S, tmp_path):
    copy = tmp_path / "en.txt"
    text = importlib.import_module(f"{S.stage}.data").load_text("en")
    copy.write_text(text, encoding="utf-8")
    parser = S.train.build_parser()
    by_name = S.report.run_settings(parser.parse_args([]), S.train.RESUMED, text)
    by_path = settings_for(S, ["--data", str(copy)], copy.read_text(encoding="utf-8"))
    assert by_name == by_path and "data" not in by_name
    assert settings_for(S, ["--max-iters", "7"], text) != by_name  # the length counts
    assert settings_for(S, ["--threads", "1", "--device", "cpu"], text) == by_name


def test_shipped_references_match_the_default_settings(S):
    """The reference file tools.docs wrote is keyed so that a run at the defaults finds it,
    and every reference has what the report prints."""
    data = json.loads(S.report.REFERENCES.read_text(encoding="utf-8"))
    for ref in data["references"]:
        assert {"name", "command", "data", "settings", "val_loss", "best_val_loss",
                "train_seconds", "tolerance"} <= ref.keys(), ref["name"]
    text = importlib.import_module(f"{S.stage}.data").load_text("en")
    defaults = next(r for r in data["references"] if r["name"] == "defaults, --data en")
    corpora = {r["data"] for r in data["references"] if r["name"].startswith(("defaults", "--max-iters"))}
    assert corpora == {"en", "zh", "shakespeare", "tang"}  # every built-in and classic corpus
    assert defaults["settings"] == settings_for(S, [], text) and defaults["data"] == "en"
    assert 0 < defaults["tolerance"] < 0.2 and math.isfinite(defaults["val_loss"])


# --------------------------------------------------------------------------- weight decay


def test_weight_decay_is_what_the_docs_say(S, tmp_path, tiny_corpus, monkeypatch):
    """Stages 2-4: none (PyTorch's default 0.01 would be an undisclosed pull towards 0);
    stage 5: --weight-decay on the matrices, none on biases and LayerNorm."""
    no_figures(monkeypatch, S)
    seen = {}
    start = S.harness.Run.start

    def spy(self, model, optimizer):
        seen["groups"] = [(g["weight_decay"], [p.dim() for p in g["params"]])
                          for g in optimizer.param_groups]
        return start(self, model, optimizer)

    monkeypatch.setattr(S.harness.Run, "start", spy)
    run(S, tiny_args(S, tiny_corpus, tmp_path / "run", "--max-iters", 1))
    if S.stage == "stage5_gpt":
        (decay, dims), (no_decay, small) = seen["groups"]
        assert decay == 0.1 and min(dims) == 2 and no_decay == 0.0 and max(small) == 1
    else:
        assert [wd for wd, _ in seen["groups"]] == [0.0]
    docs = (REPO_ROOT / "docs" / "stage2_bigram.md").read_text(encoding="utf-8")
    assert "`weight_decay=0.0` in stages 2 to 4" in docs


def test_a_learning_rate_that_would_overflow_inside_torch_is_refused(S, capsys):
    """--lr 1e38 once ended in a RuntimeError from deep inside Adam's step."""
    with pytest.raises(SystemExit) as e:
        S.train.build_parser().parse_args(["--lr", "1e38"])
    assert e.value.code == 2
    assert "--lr: must be at most 1e+30, got 1e38" in capsys.readouterr().err
    assert S.train.build_parser().parse_args(["--lr", "1e30"]).lr == 1e30
