"""Stage 5: the training loop: learning-rate schedule and its flags, optimizer groups,
exact resume, Ctrl-C, presets, precision (--dtype), the attention routes in training, and
checkpoint files (good, foreign, broken)."""

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
from conftest import TINY_TEXT, StopAfter, assert_same, module_env, read_log, start_module

from stage5_gpt import checkpoint, precision
from stage5_gpt import harness as H
from stage5_gpt import report as R
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


REAL_STOP_FLAG = H.StopFlag


def no_figures(mp: pytest.MonkeyPatch) -> None:
    """The PNGs are checked end to end in test_stage5_cli; here they only cost time."""
    mp.setattr(R, "plot_losses", lambda history, path, title="": Path(path))
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
    assert ("transformer.h.0.attn.c_attn.bias" in free) is bias
    assert not any(name.startswith("lm_head.bias") for name in names.values())  # GPT-2's: none


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


@pytest.fixture(scope="module")
def interrupted(tmp_path_factory):
    """A real Ctrl-C: a run of a million steps gets SIGINT once its loop runs."""
    tmp = tmp_path_factory.mktemp("ctrl_c")
    data = tmp / "tiny.txt"
    data.write_text(TINY_TEXT, encoding="utf-8")
    out = tmp / "run"
    argv = tiny_args(data, out, "--eval-interval", 1000)
    with (tmp / "stderr.txt").open("w", encoding="utf-8") as err:
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
    stderr = (tmp / "stderr.txt").read_text(encoding="utf-8")
    return {"argv": argv, "out": out, "stdout": stdout, "stderr": stderr,
            "returncode": returncode}


def test_ctrl_c_saves_a_resumable_checkpoint(interrupted):
    out, stdout, stderr = interrupted["out"], interrupted["stdout"], interrupted["stderr"]
    assert interrupted["returncode"] == 130, stderr  # the shell's code for Ctrl-C, once saved
    assert "Traceback" not in stderr
    m = re.search(r"Ctrl-C: stopping at step (\d+).*--resume", stdout)
    assert m, stdout
    n = int(m.group(1))
    assert 1 <= n < 1_000_000
    metrics = json.loads((out / "metrics.json").read_text(encoding="utf-8"))
    assert metrics["interrupted"] is True and metrics["steps"] == n
    ckpt = load_checkpoint(out / "ckpt.pt")
    assert ckpt["step"] == n and ckpt["args"]["max_iters"] == 1_000_000
    assert all(torch.isfinite(t).all() for t in ckpt["model"].values())
    assert set(checkpoint.RESUMABLE) <= set(ckpt)
    assert [r["step"] for r in read_log(out)] == [0, n]


def test_resume_after_ctrl_c_with_a_new_max_iters(interrupted, capsys, monkeypatch):
    """--resume picks up at exactly the interrupted step and finishes a few more."""
    out, argv = interrupted["out"], interrupted["argv"]
    n = load_checkpoint(out / "ckpt.pt")["step"]
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


def ctrl_c_after(mp: pytest.MonkeyPatch, steps: int) -> None:
    """As if Ctrl-C were pressed after ``steps`` training steps."""
    mp.setattr(H, "StopFlag", StopAfter(steps))


def test_interrupted_then_resumed_run_equals_one_run(tmp_path, tiny_corpus, monkeypatch):
    """Stopped after 7 of 12 steps and resumed with the same command plus --resume: the same weights,
    optimizer state, losses and learning rates as one run (dropout's RNG and the schedule
    included)."""
    no_figures(monkeypatch)
    flags = ("--max-iters", 12, "--eval-interval", 4, "--lr", 1e-2, "--threads", 1)
    one, _ = run(tiny_args(tiny_corpus, tmp_path / "one", *flags))
    ctrl_c_after(monkeypatch, 7)
    first, printed = run(tiny_args(tiny_corpus, tmp_path / "two", *flags))
    assert first["interrupted"] is True and first["steps"] == 7
    assert "Ctrl-C: stopping at step 7" in printed
    monkeypatch.setattr(H, "StopFlag", REAL_STOP_FLAG)
    two, printed = run(tiny_args(tiny_corpus, tmp_path / "two", *flags, "--resume"))
    assert "resuming from" in printed and two["steps"] == 12 and not two["interrupted"]
    a, b = load_checkpoint(tmp_path / "one" / "ckpt.pt"), load_checkpoint(tmp_path / "two" / "ckpt.pt")
    assert_same(a["model"], b["model"], "model")
    assert_same(a["optimizer"], b["optimizer"], "optimizer")
    # The resumed log has one more row: the evaluation at the interruption (step 7).
    rows_one = [{k: v for k, v in r.items() if k != "time"} for r in read_log(tmp_path / "one")]
    rows_two = [{k: v for k, v in r.items() if k != "time"} for r in read_log(tmp_path / "two")]
    assert [r["step"] for r in rows_one] == [0, 4, 8, 12]
    assert [r["step"] for r in rows_two] == [0, 4, 7, 8, 12]
    assert rows_one == [r for r in rows_two if r["step"] != 7]
    assert one["val_loss"] == two["val_loss"]


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
    from stage5_gpt import presets

    assert T.PRESETS is presets.PRESETS  # presets.py holds them; train.PRESETS still works
    parser = T.build_parser()
    dests = {a.dest for a in parser._actions}
    for name, flags in T.PRESETS.items():
        assert set(flags) <= dests, name
    with pytest.raises(SystemExit):
        T.main(["--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "nanogpt-cpu: --data shakespeare --block-size 64 --batch-size 12" in out
    assert "shakespeare-2min:" in out


# --------------------------------------------------------------------------- --min-lr


@pytest.mark.parametrize("flags,message", [
    (["--lr", "1e-3", "--min-lr", "2e-3"], "error: --min-lr 0.002 is above --lr 0.001"),
    # A preset's --min-lr 1e-4 stays when only --lr is lowered below it.
    (["--preset", "nanogpt-cpu", "--lr", "1e-5"], "error: --min-lr 0.0001 is above --lr 1e-05"),
])
def test_min_lr_above_lr_is_a_one_line_error_before_any_training(tmp_path, tiny_corpus, capsys,
                                                                 flags, message):
    with pytest.raises(SystemExit) as e:
        T.main(tiny_args(tiny_corpus, tmp_path / "run", *flags))
    assert e.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == ""  # no model summary, no sample, no step
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(message), captured.err
    assert "--min-lr at most" in lines[0]
    assert not (tmp_path / "run").exists()


def test_min_lr_equal_to_lr_is_a_constant_rate_after_warmup(tmp_path, tiny_corpus, monkeypatch):
    no_figures(monkeypatch)
    run(tiny_args(tiny_corpus, tmp_path / "run", "--lr", "1e-3", "--min-lr", "1e-3",
                  "--warmup-iters", 2, "--max-iters", 6, "--eval-interval", 2))
    assert [r["lr"] for r in read_log(tmp_path / "run")][1:] == [1e-3] * 3


# --------------------------------------------------------------------------- GPU paths on a CPU


def test_the_flash_kernel_trains_the_same_model(tmp_path, tiny_corpus, monkeypatch):
    """What a GPU runs (F.scaled_dot_product_attention) changes how the model runs, not what
    it computes: trained with the flash kernel or the written math, the model is the same
    (dropout off)."""
    from stage5_gpt import model as model_module
    no_figures(monkeypatch)
    flags = ("--max-iters", 6, "--dropout", 0, "--dtype", "float32", "--lr", 1e-2)
    plain, _ = run(tiny_args(tiny_corpus, tmp_path / "math", *flags))
    calls = []
    sdpa = model_module.F.scaled_dot_product_attention

    def flash(*args, **kwargs):
        calls.append(kwargs)
        return sdpa(*args, **kwargs)

    monkeypatch.setattr(model_module, "FLASH_DEVICES", ("cpu",))  # as on a GPU
    monkeypatch.setattr(model_module.F, "scaled_dot_product_attention", flash)
    other, _ = run(tiny_args(tiny_corpus, tmp_path / "flash", *flags))
    assert calls and all(c["is_causal"] for c in calls)
    assert other["steps"] == plain["steps"] == 6
    assert other["val_loss"] == pytest.approx(plain["val_loss"], abs=1e-4)
    a = load_checkpoint(tmp_path / "math" / "ckpt.pt")["model"]
    b = load_checkpoint(tmp_path / "flash" / "ckpt.pt")["model"]
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(a[k], b[k], atol=1e-4, rtol=1e-3)


# --------------------------------------------------------------------------- precision


def test_bfloat16_training_follows_float32_closely(tmp_path, tiny_corpus, monkeypatch):
    no_figures(monkeypatch)
    runs = {dt: run(tiny_args(tiny_corpus, tmp_path / dt, "--max-iters", 20, "--dropout", 0,
                              "--dtype", dt)) for dt in ("float32", "bfloat16")}
    f32, b16 = runs["float32"][0], runs["bfloat16"][0]
    assert "precision: bfloat16 forward pass (--dtype bfloat16)" in runs["bfloat16"][1]
    assert "precision: float32 forward pass (--dtype float32)" in runs["float32"][1]
    assert b16["val_loss"] != f32["val_loss"], "the bfloat16 run took the float32 path"
    assert b16["val_loss"] == pytest.approx(f32["val_loss"], abs=0.05)


def test_auto_precision_is_a_timed_choice_on_a_cpu():
    precision.bfloat16_is_fast.cache_clear()
    try:
        assert precision.bfloat16_is_fast("mps") is False
        is_fast = precision.bfloat16_is_fast("cpu")  # measured: either answer is right on some CPU
        assert isinstance(is_fast, bool) and precision.bfloat16_is_fast("cpu") is is_fast  # cached
        before = torch.random.get_rng_state()
        precision.bfloat16_is_fast.cache_clear()
        precision.bfloat16_is_fast("cpu")
        assert torch.equal(torch.random.get_rng_state(), before), "it used the global RNG"
        # --dtype auto follows the measurement.
        _, name, scaler = precision.autocast("auto", "cpu")
        assert name == ("bfloat16" if precision.bfloat16_is_fast("cpu") else "float32")
        assert not scaler.is_enabled()
    finally:
        precision.bfloat16_is_fast.cache_clear()


def test_autocast_names_the_precision_of_each_setting():
    context, name, scaler = precision.autocast("bfloat16", "cpu")
    assert name == "bfloat16" and not scaler.is_enabled()
    with context:
        y = torch.randn(4, 8) @ torch.randn(8, 3)
    assert y.dtype == torch.bfloat16
    for dtype, device in (("float32", "cpu"), ("float32", "mps"), ("auto", "mps")):
        context, name, scaler = precision.autocast(dtype, device)
        assert name == "float32" and not scaler.is_enabled(), (dtype, device)
        with context:
            assert (torch.randn(4, 8) @ torch.randn(8, 3)).dtype == torch.float32


@pytest.mark.parametrize("device, dtype, message", [
    ("mps", "bfloat16", "a CPU or a CUDA GPU"), ("xla:0", "bfloat16", "a CPU or a CUDA GPU"),
    ("cpu", "float16", "a CUDA GPU"), ("mps", "float16", "a CUDA GPU"),
    ("cpu", "tf32", "a CUDA GPU")])
def test_autocast_refuses_a_precision_the_device_does_not_have(device, dtype, message):
    with pytest.raises(UserError) as e:
        precision.autocast(dtype, device)
    assert str(e.value) == (f"--dtype {dtype} is for {message}, not {device}; "
                            "use --dtype float32 (or auto).")


@pytest.mark.parametrize("native, chosen", [(True, "bfloat16"), (False, "float16")])
def test_auto_on_a_gpu_takes_bfloat16_where_native_else_float16_with_a_scaler(native, chosen,
                                                                              monkeypatch):
    """An A100 (compute capability 8.0) computes bfloat16; a T4 (7.5) only emulates it, so
    auto takes float16 there, with the gradient scaler on. The GPU is faked: what is
    checked is the choice, asked the way a real GPU is asked (without emulation)."""
    asked = []

    def is_bf16_supported(including_emulation=True):
        asked.append(including_emulation)
        return native

    monkeypatch.setattr(torch.cuda, "is_bf16_supported", is_bf16_supported)
    monkeypatch.setattr(torch, "autocast", lambda kind, dtype: (kind, dtype))
    # (a GradScaler for "cuda" turns itself off without a GPU: what it was asked for is kept)
    monkeypatch.setattr(torch.amp, "GradScaler", lambda device, enabled: (device, enabled))
    precision.bfloat16_is_fast.cache_clear()
    try:
        context, name, scaler = precision.autocast("auto", "cuda:0")
    finally:
        precision.bfloat16_is_fast.cache_clear()
    assert asked == [False] and name == chosen and context == ("cuda", getattr(torch, chosen))
    assert scaler == ("cuda", chosen == "float16")


def test_the_scaler_passes_loss_and_step_through_unchanged_when_it_is_off():
    """The loop calls scaler.scale(loss).backward() and scaler.step(optimizer) whatever the
    precision: off (every precision but float16), it is loss.backward() and optimizer.step()."""
    torch.manual_seed(0)
    a, b = torch.nn.Linear(3, 1), torch.nn.Linear(3, 1)
    b.load_state_dict(a.state_dict())
    x = torch.randn(5, 3)
    oa, ob = torch.optim.SGD(a.parameters(), lr=0.1), torch.optim.SGD(b.parameters(), lr=0.1)
    a(x).pow(2).mean().backward()
    oa.step()
    _, _, scaler = precision.autocast("float32", "cpu")
    scaler.scale(b(x).pow(2).mean()).backward()
    scaler.unscale_(ob)
    scaler.step(ob)
    scaler.update()
    for p, q in zip(a.parameters(), b.parameters(), strict=True):
        assert torch.equal(p, q)


def test_float16_training_scales_the_loss_and_unscales_the_gradients(tmp_path, tiny_corpus,
                                                                     monkeypatch):
    """float16 with its scaler, run on the CPU (which PyTorch's autocast and GradScaler allow)
    in place of a GPU: the run trains, keeps the scaler's state in ckpt.pt for --resume."""
    no_figures(monkeypatch)
    real = precision.autocast
    monkeypatch.setattr(H, "autocast", lambda dtype, device: (
        torch.autocast("cpu", dtype=torch.float16), "float16",
        torch.amp.GradScaler("cpu", init_scale=2.0**10)) if dtype == "float16" else real(
        dtype, device))
    metrics, printed = run(tiny_args(tiny_corpus, tmp_path / "f16", "--max-iters", 12,
                                     "--dtype", "float16"))
    assert "precision: float16 forward pass (--dtype float16)" in printed
    assert math.isfinite(metrics["val_loss"])
    ckpt = load_checkpoint(tmp_path / "f16" / "ckpt.pt")
    assert ckpt["dtype"] == "float16" and ckpt["scaler"]["scale"] > 0


def test_bfloat16_on_a_device_without_it_is_a_one_line_error(tmp_path, tiny_corpus, monkeypatch,
                                                            capsys):
    """The model is on the CPU; the precision is chosen as on a Mac's Apple GPU: the trainer
    must stop with autocast's message before the first training step."""
    no_figures(monkeypatch)
    monkeypatch.setattr(H, "autocast", lambda dtype, device: precision.autocast(dtype, "mps"))
    out = tmp_path / "run"
    with pytest.raises(SystemExit) as e:
        T.main(tiny_args(tiny_corpus, out, "--dtype", "bfloat16"))
    assert e.value.code == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert lines == ["error: --dtype bfloat16 is for a CPU or a CUDA GPU, not mps; "
                     "use --dtype float32 (or auto)."], captured.err
    assert "step" not in captured.out and "precision:" not in captured.out
    assert not (out / "ckpt.pt").exists()
