"""The training harness (harness.py, the same file in stages 2-5) and the CLI plumbing
every stage shares: exact resume, best/latest checkpoints, the divergence guard,
out-dir checks, leftover temporary files, typed flags in checkpoints, tiny
temperatures, closed pipes. Every test runs against every stage that trains."""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import io
import json
import math
import os
import re
import subprocess
import sys
from argparse import Namespace
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from conftest import REPO_ROOT, TINY_TEXT, assert_same, module_env, read_log

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
            for name in ("train", "harness", "checkpoint", "model", "sample", "cli")}
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
    mp.setattr(S.harness, "plot_losses", lambda history, path, title="": Path(path))
    if hasattr(S.train, "attention_figure"):
        mp.setattr(S.train, "attention_figure", lambda model, tok, prompt, path: Path(path))


def run(S, argv: list[str]) -> tuple[dict, str]:
    """train() in this process; returns its metrics and what it printed."""
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        metrics = S.train.train(S.train.build_parser().parse_args(argv))
    return metrics, buf.getvalue()


class StopAfter:
    """Stands in for harness.StopFlag: 'Ctrl-C' arrives after ``n`` steps."""

    def __init__(self, n: int):
        self.n, self.checks = n, 0

    def __call__(self):
        return self

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    @property
    def stop(self) -> bool:
        self.checks += 1
        return self.checks > self.n


# --------------------------------------------------------------------------- resume


def test_interrupted_then_resumed_with_default_flags_equals_one_run(S, tmp_path, tiny_corpus,
                                                                    monkeypatch):
    """Run A: 20 steps straight. Run B: stopped after 10 (Ctrl-C), then a bare --resume."""
    no_figures(monkeypatch, S)
    a, b = tmp_path / "a", tmp_path / "b"
    metrics_a, _ = run(S, tiny_args(S, tiny_corpus, a, "--max-iters", 20, "--sample-tokens", 4))
    with monkeypatch.context() as mp:
        mp.setattr(S.harness, "StopFlag", StopAfter(10))
        half_metrics, _ = run(S, tiny_args(S, tiny_corpus, b, "--max-iters", 20,
                                           "--sample-tokens", 4))
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

    # B has one more row (the Ctrl-C evaluation at step 10); every shared step agrees.
    la, lb = losses(read_log(a)), losses(read_log(b))
    assert sorted(la) == [0, 5, 10, 15, 20] and set(la) <= set(lb)
    assert all(la[s] == lb[s] for s in la)
    for key in ("steps", "train_loss", "val_loss", "best_val_loss", "interrupted", "params"):
        assert metrics_a[key] == metrics_b[key], key


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
    # Without the flag, the checkpoint's value is used.
    args = S.train.build_parser().parse_args(["--out-dir", str(out), "--resume"])
    with contextlib.redirect_stdout(io.StringIO()):
        S.harness.Run(args, S.train.build_parser())
    assert args.lr == 0.005 and args.max_iters == 2 and args.data == str(tiny_corpus)


def test_resumed_flags_are_every_setting_of_the_run_and_no_more(S):
    parser = S.train.build_parser()
    restored = set(S.harness.resumed_flags(parser))
    every = {a.dest for a in parser._actions if a.dest != "help"}
    run_flags = every - restored
    # What a resumed run may change: where it runs, where it writes, how long it goes on.
    assert run_flags <= {"max_iters", "device", "out_dir", "resume", "sample_tokens", "compile",
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
        run(S, tiny_args(S, data, out, "--max-iters", 3, "--resume"))
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


def test_thread_tuner_keeps_the_fastest_count_and_rechecks(S, monkeypatch):
    clock = {"now": 0.0}
    monkeypatch.setattr(S.harness.time, "monotonic", lambda: clock["now"])
    before = torch.get_num_threads()
    torch.set_num_threads(4)
    try:
        tuner = S.harness.ThreadTuner(None, trial=3, every=10.0)
        assert tuner.choices == [1, 2, 4]
        busy = {1: 0.010, 2: 0.020, 4: 0.050}  # another program holds cores: 1 is fastest
        notes = []
        for _ in range(9):  # three steps at each count
            tuner.before_step()
            notes.append(tuner.after_step(busy[torch.get_num_threads()]))
        assert torch.get_num_threads() == 1 and tuner.best == 1
        assert [n for n in notes if n] == ["threads: 1 (ms per step: 1: 10.0, 2: 20.0, 4: 50.0)"]
        tuner.before_step()
        tuner.after_step(0.010)
        assert not tuner.plan, "no re-check before `every` seconds"
        clock["now"] = 11.0  # the machine went quiet: 4 threads are fastest now
        quiet = {1: 0.010, 2: 0.006, 4: 0.004}
        tuner.after_step(0.010)
        notes = []
        for _ in range(9):
            tuner.before_step()
            notes.append(tuner.after_step(quiet[torch.get_num_threads()]))
        assert torch.get_num_threads() == 4
        assert [n for n in notes if n] == ["threads: 4 (ms per step: 1: 10.0, 2: 6.0, 4: 4.0)"]
    finally:
        torch.set_num_threads(before)


def test_threads_flag_pins_the_count(S):
    before = torch.get_num_threads()
    try:
        tuner = S.harness.ThreadTuner(3)
        assert torch.get_num_threads() == 3 and not tuner.plan
        tuner.before_step()
        assert tuner.after_step(1.0) is None and torch.get_num_threads() == 3
        args = S.train.build_parser().parse_args(["--threads", "2"])
        assert args.threads == 2 and S.train.build_parser().get_default("threads") is None
    finally:
        torch.set_num_threads(before)


# --------------------------------------------------------------------------- is my loss normal?


def settings_for(S, argv: list[str], text: str) -> dict:
    """The settings key the harness computes for a run with these flags."""
    parser = S.train.build_parser()
    return S.harness.run_settings(parser.parse_args(argv), S.harness.resumed_flags(parser), text)


def write_reference(path: Path, settings: dict, val: float, *, tol: float = 0.01,
                    seconds: float = 1e6, device: str = "cpu", version: str | None = None,
                    name: str = "defaults") -> Path:
    path.write_text(json.dumps({
        "made_by": "a test", "torch": version or torch.__version__, "device": device,
        "tolerance_is": "a test's margin",
        "references": [{"name": name, "settings": settings, "val_loss": val,
                        "best_val_loss": val, "train_seconds": seconds, "tolerance": tol}],
    }), encoding="utf-8")
    return path


@pytest.fixture
def reference_run(S, tmp_path, tiny_corpus, monkeypatch):
    """A tiny run's flags and metrics, with the stage's reference file moved to tmp_path."""
    no_figures(monkeypatch, S)
    monkeypatch.delenv(S.harness.NO_REFERENCE, raising=False)
    monkeypatch.setattr(S.harness, "REFERENCE", tmp_path / "reference.json")
    argv = tiny_args(S, tiny_corpus, tmp_path / "first", "--max-iters", 6)
    metrics, printed = run(S, argv)
    assert "is this loss normal?" not in printed  # no reference file: nothing to say
    return SimpleNamespace(argv=argv, metrics=metrics, path=tmp_path / "reference.json",
                           settings=settings_for(S, argv, TINY_TEXT), tmp=tmp_path)


def again(S, r, *extra: object) -> str:
    """The same run in a fresh --out-dir (plus ``extra`` flags); what it printed."""
    i = r.argv.index("--out-dir")
    argv = [*r.argv[:i + 1], str(r.tmp / "again"), *r.argv[i + 2:], *map(str, extra)]
    return run(S, argv)[1]


def test_same_settings_print_the_reference_and_an_in_range_verdict(S, reference_run):
    r = reference_run
    write_reference(r.path, r.settings, r.metrics["val_loss"] + 0.005, tol=0.01)
    printed = again(S, r)
    assert (f"is this loss normal? reference for these settings (defaults): val loss "
            f"{r.metrics['val_loss'] + 0.005:.4f} +- 0.0100") in printed
    assert f"val loss {r.metrics['val_loss']:.4f}, within the expected range" in printed
    assert "Likely causes" not in printed and "time:" not in printed


def test_a_changed_flag_has_no_reference(S, reference_run):
    r = reference_run
    write_reference(r.path, r.settings, r.metrics["val_loss"], name="--preset tiny")
    printed = again(S, r, "--seed", 7)
    assert ("is this loss normal? no reference for these settings (there is one for: "
            "--preset tiny)") in printed
    assert "within the expected range" not in printed


def test_a_run_out_of_range_gets_the_likely_causes(S, reference_run):
    r = reference_run
    ref = r.metrics["val_loss"] + 0.5
    write_reference(r.path, r.settings, ref, tol=0.1, seconds=1e-4, device="mps",
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
    slow = S.harness.compare_to_reference({**metrics, "train_seconds": 25.0}, ref, data, "cpu",
                                          False)
    ok = S.harness.compare_to_reference({**metrics, "train_seconds": 15.0}, ref, data, "cpu",
                                        False)
    resumed = S.harness.compare_to_reference({**metrics, "train_seconds": 25.0}, ref, data,
                                             "cpu", True)
    hint = "2.5x the reference's: a slower CPU, or a busy machine"
    assert any(hint in line and "--threads N pins the count" in line for line in slow), slow
    assert not any("busy machine" in line for line in ok + resumed)


@pytest.mark.parametrize("content", ["{not json", "[]", '{"references": [{"settings": {}}]}',
                                     '{"references": 3}'])
def test_a_broken_reference_file_never_stops_the_run(S, reference_run, content):
    r = reference_run
    r.path.write_text(content, encoding="utf-8")
    printed = again(S, r)
    assert "is this loss normal? reference.json is unreadable" in printed
    assert (r.tmp / "again" / "metrics.json").is_file()  # the run finished all the same


def test_no_comparison_when_switched_off(S, reference_run, monkeypatch):
    r = reference_run
    write_reference(r.path, r.settings, r.metrics["val_loss"])
    monkeypatch.setenv(S.harness.NO_REFERENCE, "1")
    assert "is this loss normal?" not in again(S, r)


def test_an_interrupted_run_gets_no_verdict(tmp_path):
    from stage2_bigram import harness

    path = write_reference(tmp_path / "r.json", {"seed": 1}, 2.0)
    metrics = {"val_loss": 9.0, "interrupted": True, "steps": 10, "train_seconds": 1.0}
    lines = harness.reference_report(metrics, {"seed": 1}, "cpu", path=path)
    assert lines[-1] == "  this run stopped at step 10, before the end: no verdict"
    assert harness.reference_report(metrics, {"seed": 1}, "cpu", path=tmp_path / "no") == []


def test_the_settings_key_names_the_corpus_by_its_text_not_by_the_flag(S, tmp_path):
    copy = tmp_path / "en.txt"
    text = importlib.import_module(f"{S.stage}.data").load_text("en")
    copy.write_text(text, encoding="utf-8")
    parser = S.train.build_parser()
    by_name = S.harness.run_settings(parser.parse_args([]), S.harness.resumed_flags(parser),
                                     text)
    by_path = settings_for(S, ["--data", str(copy)], copy.read_text(encoding="utf-8"))
    assert by_name == by_path and "data" not in by_name
    assert settings_for(S, ["--max-iters", "7"], text) != by_name  # the length counts
    assert settings_for(S, ["--threads", "1", "--device", "cpu"], text) == by_name


def test_shipped_reference_matches_the_default_settings(S):
    """The reference file gen_docs wrote is keyed so that a run at the defaults finds it."""
    path = REPO_ROOT / S.stage / "reference.json"
    if not path.exists():
        pytest.skip(f"{path.name} not generated yet: python tools/gen_docs.py --only reference")
    data = json.loads(path.read_text(encoding="utf-8"))
    text = importlib.import_module(f"{S.stage}.data").load_text("en")
    defaults = next(r for r in data["references"] if r["name"] == "defaults")
    assert defaults["settings"] == settings_for(S, [], text)
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


def test_the_presets_curve_reads_val_loss_and_seconds_off_a_real_log(tmp_path, tiny_corpus,
                                                                     monkeypatch):
    """tools/docs_presets.py draws val loss against seconds from the harness's log.jsonl."""
    spec = importlib.util.spec_from_file_location("docs_presets",
                                                  REPO_ROOT / "tools" / "docs_presets.py")
    presets = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(presets)
    S = stage_modules("stage5_gpt")
    no_figures(monkeypatch, S)
    out = tmp_path / "run"
    run(S, tiny_args(S, tiny_corpus, out, "--max-iters", 10))
    curve = presets.read_curve(out)
    rows = [r for r in read_log(out) if "val" in r]
    assert len(curve) == len(rows) >= 2
    assert [v for _, v in curve] == [r["val"] for r in rows]
    assert [t for t, _ in curve] == sorted(t for t, _ in curve)
    best = min(v for _, v in curve)
    assert presets.first_below(curve, best) == next(t for t, v in curve if v == best)
    assert presets.first_below(curve, best - 1.0) is None


def test_a_learning_rate_that_would_overflow_inside_torch_is_refused(S, capsys):
    """--lr 1e38 once ended in a RuntimeError from deep inside Adam's step."""
    with pytest.raises(SystemExit) as e:
        S.train.build_parser().parse_args(["--lr", "1e38"])
    assert e.value.code == 2
    assert "--lr: must be at most 1e+30, got 1e38" in capsys.readouterr().err
    assert S.train.build_parser().parse_args(["--lr", "1e30"]).lr == 1e30
