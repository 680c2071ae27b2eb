"""Stage 5: the training loop: learning-rate schedule, optimizer groups, exact
resume, Ctrl-C, divergence, and checkpoint files (good, stale, foreign, broken)."""

from __future__ import annotations

import contextlib
import io
import json
import math
import random
import re
import signal
import threading
from argparse import Namespace
from pathlib import Path

import pytest
import torch
from conftest import assert_same, module_env, read_log, start_module

from stage5_gpt import harness as H
from stage5_gpt import train as T
from stage5_gpt.checkpoint import load_checkpoint, load_model, save_checkpoint
from stage5_gpt.errors import UserError
from stage5_gpt.model import GPT, GPTConfig
from stage5_gpt.tokenizer import CharTokenizer


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def tiny_args(data: Path, out: Path, *extra: object) -> list[str]:
    """A model of ~4k parameters: a 20-step run takes well under a second."""
    return [str(a) for a in (
        "--data", data, "--out-dir", out, "--device", "cpu",
        "--n-layer", 1, "--n-embd", 16, "--n-head", 2, "--block-size", 8, "--batch-size", 4,
        "--dropout", 0.1,  # dropout draws from the global RNG: resume must restore it
        "--eval-interval", 5, "--eval-iters", 1, "--warmup-iters", 3, "--sample-tokens", 0,
        *extra)]


def no_figures(mp: pytest.MonkeyPatch) -> None:
    """The PNGs are checked end to end in test_stage5_cli; here they only cost time."""
    mp.setattr(H, "plot_losses", lambda history, path, title="": Path(path))
    mp.setattr(T, "attention_figure", lambda model, tok, prompt, path: Path(path))


def run(argv: list[str]) -> tuple[dict, str]:
    """train() in this process; returns its metrics and what it printed."""
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        metrics = T.train(T.build_parser().parse_args(argv))
    return metrics, buf.getvalue()


# --------------------------------------------------------------------------- get_lr


def lr_args(**kw) -> Namespace:
    return Namespace(**{"lr": 1e-3, "min_lr": 1e-4, "warmup_iters": 10, "lr_decay_iters": 100,
                        **kw})


def test_lr_warmup_is_linear_up_to_lr():
    args = lr_args()
    warm = [T.get_lr(s, args) for s in range(10)]
    assert warm[0] == pytest.approx(1e-3 / 10)
    for s, lr in enumerate(warm):
        assert lr == pytest.approx(1e-3 * (s + 1) / 10)
    assert warm[-1] == pytest.approx(1e-3)
    assert T.get_lr(10, args) == pytest.approx(1e-3)  # the cosine starts at the peak


def test_lr_cosine_decays_to_min_lr_then_stays():
    args = lr_args()
    decay = [T.get_lr(s, args) for s in range(10, 101)]
    assert all(a >= b for a, b in zip(decay, decay[1:], strict=False))
    # Halfway through the cosine: halfway between lr and min_lr.
    assert T.get_lr(55, args) == pytest.approx((1e-3 + 1e-4) / 2)
    # A quarter of the way: cos(pi/4).
    assert T.get_lr(32.5, args) == pytest.approx(1e-4 + 0.5 * (1 + math.cos(math.pi / 4)) * 9e-4)
    assert T.get_lr(99, args) == pytest.approx(1e-4, rel=0.01)
    assert T.get_lr(100, args) == pytest.approx(1e-4)
    assert T.get_lr(101, args) == T.get_lr(10_000, args) == pytest.approx(1e-4)


def test_lr_without_warmup_starts_at_lr():
    args = lr_args(warmup_iters=0)
    assert T.get_lr(0, args) == pytest.approx(1e-3)
    assert T.get_lr(50, args) == pytest.approx((1e-3 + 1e-4) / 2)


# --------------------------------------------------------------------------- make_optimizer


@pytest.mark.parametrize("tie,bias", [(False, True), (True, True), (True, False)])
def test_optimizer_groups_decay_matrices_only(tie, bias):
    model = GPT(GPTConfig(vocab_size=13, block_size=8, n_layer=2, n_head=2, n_embd=16,
                          tie_weights=tie, bias=bias))
    opt = T.make_optimizer(model, Namespace(weight_decay=0.1, lr=1e-3, beta1=0.9, beta2=0.99))
    decay, no_decay = opt.param_groups
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    assert decay["betas"] == (0.9, 0.99)
    assert all(p.dim() >= 2 for p in decay["params"])
    assert all(p.dim() < 2 for p in no_decay["params"])
    ids = [id(p) for g in opt.param_groups for p in g["params"]]
    assert len(ids) == len(set(ids)), "a parameter is in the optimizer twice"
    names = {id(p): n for n, p in model.named_parameters()}  # shared tensors appear once
    assert set(ids) == set(names)
    decayed = {names[id(p)] for p in decay["params"]}
    assert {"transformer.wte.weight", "transformer.wpe.weight",
            "transformer.h.0.attn.c_attn.weight", "transformer.h.1.mlp.c_fc.weight"} <= decayed
    assert ("lm_head.weight" in decayed) is not tie  # tied: it *is* wte.weight
    free = {names[id(p)] for p in no_decay["params"]}
    assert "transformer.ln_f.weight" in free
    assert ("lm_head.bias" in free) is bias


# --------------------------------------------------------------------------- resume


def test_resume_with_a_longer_run_says_so_and_decays_over_the_new_length(tmp_path, tiny_corpus,
                                                                         monkeypatch):
    """A 10-step run extended to 20: the schedule's horizon follows --max-iters (it once
    stayed at the first run's 10, leaving the learning rate at --min-lr from step 10)."""
    no_figures(monkeypatch)
    out = tmp_path / "run"
    run(tiny_args(tiny_corpus, out, "--max-iters", 10))
    _, printed = run(tiny_args(tiny_corpus, out, "--max-iters", 20, "--resume"))
    assert "planned for --max-iters 10; it now runs to 20" in printed
    ckpt = load_checkpoint(out / "ckpt.pt")
    args = Namespace(**ckpt["args"])
    assert args.max_iters == 20 and args.lr_decay_iters is None
    last_lr = ckpt["optimizer"]["param_groups"][0]["lr"]  # the lr of step 19
    assert last_lr == pytest.approx(T.get_lr(19, args)) and last_lr > args.min_lr
    assert T.get_lr(12, args) > 5 * args.min_lr


# --------------------------------------------------------------------------- Ctrl-C


def test_ctrl_c_saves_a_resumable_checkpoint(tmp_path, tiny_corpus, capsys, monkeypatch):
    out = tmp_path / "run"
    argv = tiny_args(tiny_corpus, out, "--eval-interval", 1000)
    with (tmp_path / "stderr.txt").open("w", encoding="utf-8") as err:
        proc = start_module("stage5_gpt.train", *argv, "--max-iters", 1_000_000, stderr=err,
                            env=module_env(PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1"))
        watchdog = threading.Timer(120, proc.kill)  # never hang the suite on a stuck child
        watchdog.start()
        try:
            seen = []
            for line in proc.stdout:
                seen.append(line)
                if line.startswith("step"):  # the loop runs: Ctrl-C is now handled
                    break
            assert seen and seen[-1].startswith("step"), "".join(seen)
            proc.send_signal(signal.SIGINT)
            # Read on through the same text stream (communicate() would skip its buffer).
            stdout = "".join(seen) + proc.stdout.read()
            returncode = proc.wait(timeout=120)
        finally:
            watchdog.cancel()
    stderr = (tmp_path / "stderr.txt").read_text(encoding="utf-8")
    assert returncode == 0, stderr
    assert "Traceback" not in stderr
    m = re.search(r"Ctrl-C: stopping at step (\d+).*--resume", stdout)
    assert m, stdout
    n = int(m.group(1))
    assert 1 <= n < 1_000_000
    metrics = json.loads((out / "metrics.json").read_text(encoding="utf-8"))
    assert metrics["interrupted"] is True and metrics["steps"] == n
    ckpt = load_checkpoint(out / "ckpt.pt")
    assert ckpt["step"] == n
    assert all(torch.isfinite(t).all() for t in ckpt["model"].values())

    # --resume picks up at exactly that step and finishes a few more.
    no_figures(monkeypatch)
    capsys.readouterr()
    T.main(argv + ["--max-iters", str(n + 3), "--resume"])
    printed = capsys.readouterr().out
    assert re.search(rf"resuming from .*ckpt\.pt at step {n}\b", printed), printed
    metrics = json.loads((out / "metrics.json").read_text(encoding="utf-8"))
    assert metrics["interrupted"] is False and metrics["steps"] == n + 3
    assert load_checkpoint(out / "ckpt.pt")["step"] == n + 3
    steps = [r["step"] for r in read_log(out)]
    assert steps[0] == 0 and steps[-2:] == [n, n + 3]


# --------------------------------------------------------------------------- divergence


# --------------------------------------------------------------------------- samples


def test_training_samples_with_dropout_off(tmp_path, tiny_corpus, monkeypatch):
    no_figures(monkeypatch)
    modes = []
    real_generate = GPT.generate

    def generate(self, *a, **kw):
        modes.append(self.training)
        return real_generate(self, *a, **kw)

    monkeypatch.setattr(GPT, "generate", generate)
    run(tiny_args(tiny_corpus, tmp_path / "run", "--max-iters", 2, "--sample-tokens", 3,
                  "--dropout", 0.3))
    assert len(modes) == 2
    assert modes == [False, False], "sampled in train mode (dropout active)"


# --------------------------------------------------------------------------- bad resumes


def test_resume_with_different_data_is_a_user_error(tmp_path, tiny_corpus, monkeypatch):
    no_figures(monkeypatch)
    out = tmp_path / "run"
    run(tiny_args(tiny_corpus, out, "--max-iters", 1))
    other = tmp_path / "other.txt"
    other.write_text("xyz qrs 0123456789\n" * 100, encoding="utf-8")
    with pytest.raises(UserError, match="vocabulary|--data"):
        run(tiny_args(other, out, "--max-iters", 3, "--resume"))


# --------------------------------------------------------------------------- checkpoint files


@pytest.fixture
def good_ckpt(tmp_path) -> Path:
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=4, block_size=4, n_layer=1, n_head=2, n_embd=8))
    return save_checkpoint(tmp_path / "good.pt", model, CharTokenizer("abcd"), step=3,
                           history=[{"step": 3, "val": 1.0}])


def test_good_checkpoint_round_trip(good_ckpt):
    raw = torch.load(good_ckpt, weights_only=True)
    assert raw["stage"] == "stage5_gpt" and raw["step"] == 3
    model, tok, ckpt = load_model(good_ckpt)
    assert not model.training and tok.chars == list("abcd")
    assert_same(model.state_dict(), raw["model"], "model")
    assert not list(good_ckpt.parent.glob("*.tmp")), "temporary file left behind"


@pytest.mark.parametrize("damage", ["truncated", "random", "empty", "not_ours"])
def test_damaged_checkpoint_is_a_user_error(good_ckpt, damage):
    data = good_ckpt.read_bytes()
    if damage == "truncated":
        good_ckpt.write_bytes(data[: len(data) // 2])
    elif damage == "random":
        good_ckpt.write_bytes(random.Random(0).randbytes(4096))
    elif damage == "empty":
        good_ckpt.write_bytes(b"")
    else:
        torch.save({"model": {}, "step": 1}, good_ckpt)
    for load in (load_checkpoint, load_model):
        with pytest.raises(UserError, match=re.escape(str(good_ckpt))):
            load(good_ckpt)


def test_stage4_checkpoint_is_refused_by_name(tmp_path, tiny_corpus, capsys):
    from stage4_block.checkpoint import save_checkpoint as save4
    from stage4_block.model import LanguageModel, ModelConfig
    from stage4_block.tokenizer import CharTokenizer as Tok4

    model4 = LanguageModel(ModelConfig(vocab_size=4, block_size=4, n_embd=8, n_head=2, n_layer=1))
    path = save4(tmp_path / "run" / "ckpt.pt", model4, Tok4("abcd"), step=1)
    with pytest.raises(UserError) as e:
        load_model(path)
    assert "stage4_block" in str(e.value) and "stage5_gpt" in str(e.value)
    # --resume on it: the same message, the CLI way.
    with pytest.raises(SystemExit) as e:
        T.main(tiny_args(tiny_corpus, tmp_path / "run", "--resume"))
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and "stage4_block" in err


def test_corrupted_ckpt_on_resume_is_a_cli_error(tmp_path, tiny_corpus, capsys):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "ckpt.pt").write_bytes(b"PK\x03\x04 this is not a zip")
    with pytest.raises(SystemExit) as e:
        T.main(tiny_args(tiny_corpus, tmp_path / "run", "--resume"))
    assert e.value.code == 2
    assert "corrupted or truncated" in capsys.readouterr().err


# --------------------------------------------------------------------------- bad flags


@pytest.mark.parametrize("flags,fragment", [
    (["--n-embd", "30", "--n-head", "4"], "n_embd=30"),
    (["--block-size", "5000"], "block_size=5000"),
])
def test_bad_training_values_are_user_errors(tmp_path, tiny_corpus, capsys, flags, fragment):
    with pytest.raises(SystemExit) as e:
        T.main(tiny_args(tiny_corpus, tmp_path / "run", *flags))
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and fragment in err
    assert not (tmp_path / "run" / "ckpt.pt").exists()


@pytest.mark.parametrize("flag,value,range_text", [
    ("--beta1", "1.5", "[0, 1)"), ("--dropout", "1.5", "[0, 1)"),
    ("--val-fraction", "1", "between 0 and 1"), ("--min-lr", "-1", ">= 0"),
])
def test_bad_float_flags_are_refused_by_their_validator(tmp_path, tiny_corpus, capsys, flag,
                                                        value, range_text):
    with pytest.raises(SystemExit) as e:
        T.main(tiny_args(tiny_corpus, tmp_path / "run", flag, value))
    assert e.value.code == 2
    err = capsys.readouterr().err  # argparse's own message: usage, then "...: error: ..."
    assert f"error: argument {flag}" in err and range_text in err and "Traceback" not in err
    assert not (tmp_path / "run").exists()


# --------------------------------------------------------------------------- presets


def test_a_preset_sets_defaults_and_given_flags_still_win(tmp_path, tiny_corpus, monkeypatch):
    no_figures(monkeypatch)
    out = tmp_path / "run"
    with contextlib.redirect_stdout(io.StringIO()):
        T.main(["--preset", "shakespeare-2min", "--data", str(tiny_corpus), "--out-dir", str(out),
                "--max-iters", "2", "--n-embd", "16", "--n-layer", "1", "--eval-iters", "1",
                "--sample-tokens", "0", "--device", "cpu"])
    saved = load_checkpoint(out / "ckpt.pt")["args"]
    preset = T.PRESETS["shakespeare-2min"]
    for k in ("batch_size", "lr", "bias", "dropout", "warmup_iters", "block_size"):
        assert saved[k] == preset[k], k
    assert saved["max_iters"] == 2 and saved["n_embd"] == 16  # given flags win
    assert saved["data"] == str(tiny_corpus) and saved["preset"] == "shakespeare-2min"


def test_presets_are_listed_in_help_and_hold_only_real_flags(capsys):
    parser = T.build_parser()
    dests = {a.dest for a in parser._actions}
    for name, flags in T.PRESETS.items():
        assert set(flags) <= dests, name
    with pytest.raises(SystemExit):
        T.main(["--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "nanogpt-cpu: --data shakespeare --block-size 64 --batch-size 12" in out
    assert "shakespeare-2min:" in out


# --------------------------------------------------------------------------- GPU paths on a CPU


@pytest.mark.slow
def test_compile_trains_the_same_model(tmp_path, tiny_corpus, monkeypatch):
    """--compile (torch.compile) changes how the model runs, not what it computes."""
    no_figures(monkeypatch)
    flags = ("--max-iters", 3, "--dropout", 0, "--dtype", "float32")
    plain, _ = run(tiny_args(tiny_corpus, tmp_path / "plain", *flags))
    compiled, printed = run(tiny_args(tiny_corpus, tmp_path / "compiled", *flags, "--compile"))
    assert compiled["steps"] == 3
    assert compiled["val_loss"] == pytest.approx(plain["val_loss"], abs=1e-4)



# --------------------------------------------------------------------------- precision


def test_bfloat16_training_follows_float32_closely(tmp_path, tiny_corpus, monkeypatch):
    no_figures(monkeypatch)
    runs = {dt: run(tiny_args(tiny_corpus, tmp_path / dt, "--max-iters", 20, "--dropout", 0,
                              "--dtype", dt)) for dt in ("float32", "bfloat16")}
    f32, b16 = runs["float32"][0], runs["bfloat16"][0]
    assert "precision: bfloat16 forward pass" in runs["bfloat16"][1]
    assert "precision: float32 forward pass" in runs["float32"][1]
    assert b16["val_loss"] != f32["val_loss"], "the bfloat16 run took the float32 path"
    assert b16["val_loss"] == pytest.approx(f32["val_loss"], abs=0.05)


def test_auto_precision_is_a_timed_choice_on_a_cpu(monkeypatch):
    T.bfloat16_is_fast.cache_clear()
    try:
        assert T.bfloat16_is_fast("mps") is False
        fast = T.bfloat16_is_fast("cpu")  # measured: either answer is right on some CPU
        assert isinstance(fast, bool) and T.bfloat16_is_fast("cpu") is fast  # cached
        before = torch.random.get_rng_state()
        T.bfloat16_is_fast.cache_clear()
        T.bfloat16_is_fast("cpu")
        assert torch.equal(torch.random.get_rng_state(), before), "it used the global RNG"
    finally:
        T.bfloat16_is_fast.cache_clear()


def test_bfloat16_on_a_device_without_it_is_a_clear_error(tmp_path, tiny_corpus, monkeypatch,
                                                         capsys):
    monkeypatch.setattr(T.Run, "__init__", _fake_run_on("mps"))
    with pytest.raises(SystemExit) as e:
        T.main(tiny_args(tiny_corpus, tmp_path / "run", "--dtype", "bfloat16"))
    assert e.value.code == 2
    assert "--dtype bfloat16 is for a CPU or a CUDA GPU, not mps" in capsys.readouterr().err


def _fake_run_on(device: str):
    real = T.Run.__init__

    def init(self, args, parser):
        args.device = "cpu"
        real(self, args, parser)
        self.device = device  # as if this machine had an Apple GPU

    return init
