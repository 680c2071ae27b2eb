"""Stage 2: the train and sample command lines, end to end and their errors.

One run goes through a fresh interpreter (``python -m stage2_bigram.train``,
stopped with Ctrl-C); it starts in the background when the session starts, so
its torch import overlaps with the other tests (see conftest). Everything else
calls ``main(argv)`` in this process, where an unexpected exception fails the
test just like a traceback would.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import math
import sys
from pathlib import Path

import pytest
import torch
from conftest import TINY_TEXT, TINY_TEXT_ZH, assert_user_error

import stage2_bigram
from stage2_bigram import sample, train
from stage2_bigram.checkpoint import load_model
from stage2_bigram.tokenizer import CharTokenizer

TINY = ["--max-iters", "30", "--eval-interval", "10", "--eval-iters", "2", "--sample-tokens", "20"]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def start_background_runs(runs, folder):
    """``python -m stage2_bigram.train`` with a huge --max-iters (see conftest); it gets
    Ctrl-C as soon as it prints its first "step" line."""
    if sys.platform == "win32":
        return
    corpus = folder / "tiny.txt"
    corpus.write_text(TINY_TEXT, encoding="utf-8")
    runs.start_ctrl_c(
        "stage2.interrupt", "stage2_bigram.train", "--data", corpus, "--out-dir",
        folder / "interrupt", "--max-iters", 10**7, "--eval-interval", 10**7,
        "--eval-iters", 1, "--sample-tokens", 5, "--batch-size", 4,
        when="step", stderr_path=folder / "interrupt.err",
    )


# --- in-process: --help and bad settings --------------------------------------------


def _exit_code(capsys, fn, *argv):
    with pytest.raises(SystemExit) as e:
        fn([str(a) for a in argv])
    out, err = capsys.readouterr()
    return e.value.code, out, err


def test_train_help_documents_every_default(capsys):
    code, out, _ = _exit_code(capsys, train.main, "--help")
    assert code == 0
    flat = " ".join(out.split())
    for action in train.build_parser()._actions:
        if action.dest != "help" and action.default is not None:
            assert f"(default: {action.default})" in flat, action.dest
    # No default (None): the help says in words what happens, and "None" is never shown.
    assert "(default: the fastest count, timed once at the start)" in flat
    assert "None" not in flat and flat.count("(default:") == len(train.build_parser()._actions) - 1
    assert "(default: 3000)" in flat and "(default: 0.01)" in flat


def test_sample_help_documents_defaults(capsys):
    code, out, _ = _exit_code(capsys, sample.main, "--help")
    assert code == 0
    flat = " ".join(out.split())
    assert "(default: 1.0)" in flat and "(default: 300)" in flat and "0 = greedy" in flat
    assert "most likely (default: all of them)" in flat and "None" not in flat


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["--max-iters", "-1"], "must be a whole number >= 0"),
        (["--lr", "0"], "must be a number > 0"),
        (["--lr", "nan"], "must be a number > 0"),
        (["--lr", "inf"], "must be a number > 0"),
        (["--block-size", "0"], "must be a whole number >= 1"),
        (["--batch-size", "-4"], "must be a whole number >= 1"),
        (["--eval-interval", "0"], "must be a whole number >= 1"),
        (["--eval-iters", "0"], "must be a whole number >= 1"),
        (["--max-iters", "ten"], "invalid non_negative_int value"),
        (["--device", "tpu"], "invalid choice"),
        (["--val-fraction", "0"], "between 0 and 1"),
        (["--data", "missing.txt"], "no such file: missing.txt"),
        (["--block-size", "4000"], "the train split has"),
    ],
)
def test_train_bad_settings_exit_2(capsys, monkeypatch, tiny_corpus, tmp_path, args, fragment):
    monkeypatch.chdir(tmp_path)  # relative paths (missing.txt) resolve in here
    argv = ["--data", tiny_corpus, "--out-dir", tmp_path / "out", *TINY, *args]
    code, _, err = _exit_code(capsys, train.main, *argv)
    assert code == 2
    assert_user_error(err, fragment)
    assert not (tmp_path / "out").exists()  # nothing written for a run that never started


def test_train_val_split_too_short(capsys, tmp_path):
    path = tmp_path / "small.txt"
    path.write_text("abcdefghijklmnopqrstuvwxyz" * 4, encoding="utf-8")  # val: 11 tokens
    code, _, err = _exit_code(capsys, train.main, "--data", path, "--block-size", 16,
                              "--out-dir", tmp_path / "out", *TINY)
    assert code == 2
    assert_user_error(err, "the val split has 11 tokens", "--val-fraction")


@pytest.mark.skipif(torch.backends.mps.is_available(), reason="this machine has mps")
def test_train_unavailable_device_exit_2(capsys, tiny_corpus, tmp_path):
    code, _, err = _exit_code(capsys, train.main, "--data", tiny_corpus, "--device", "mps",
                              "--out-dir", tmp_path / "out", *TINY)
    assert code == 2
    assert_user_error(err, "mps")


def test_train_out_dir_that_is_a_file_exit_2(capsys, tiny_corpus, tmp_path):
    blocker = tmp_path / "out"
    blocker.write_text("not a folder")
    code, _, err = _exit_code(capsys, train.main, "--data", tiny_corpus, "--out-dir", blocker,
                              "--max-iters", 1, "--eval-iters", 1, "--sample-tokens", 1)
    assert code == 2
    assert_user_error(err, str(blocker))


# --- in-process: python -m stage2_bigram --------------------------------------------


def test_the_stage_prints_what_it_teaches_and_its_commands(capsys):
    stage_main = importlib.import_module("stage2_bigram.__main__").main
    assert stage_main([]) is None
    out = capsys.readouterr().out
    about, commands = out.split("\n\nCommands (each has --help):\n")
    assert about == stage2_bigram.__doc__.strip()
    lines = commands.splitlines()
    assert [line.split()[2] for line in lines] == [
        "stage2_bigram.backward", "stage2_bigram.bpe", "stage2_bigram.sample",
        "stage2_bigram.train"]
    assert lines[0] == ("  python -m stage2_bigram.backward  What loss.backward() computes, worked "
                        "out by hand")
    assert lines[2:] == [
        "  python -m stage2_bigram.sample    Generate text from a trained checkpoint",
        "  python -m stage2_bigram.train     Train this stage's model and save it",
    ]
    code, out, _ = _exit_code(capsys, stage_main, "--help")
    assert code == 0 and "Stage 2: the bigram model, the first language model." in out


@pytest.mark.parametrize("module", ["stage2_bigram.sample", "stage2_bigram.train"])
def test_every_listed_command_has_help(capsys, module):
    code, out, _ = _exit_code(capsys, importlib.import_module(module).main, "--help")
    assert code == 0 and out.startswith(f"usage: python -m {module}")


# --- in-process: sampling ---------------------------------------------------------


@pytest.fixture(scope="module")
def trained_zh(tmp_path_factory):
    """A complete tiny run of the train CLI in this process, on Chinese + English +
    emoji text: (output folder, what it printed)."""
    d = tmp_path_factory.mktemp("stage2_zh")
    corpus = d / "zh.txt"
    corpus.write_text(TINY_TEXT_ZH, encoding="utf-8")
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = train.main(["--data", str(corpus), "--out-dir", str(d / "out"), "--device", "cpu",
                           "--block-size", "4", "--batch-size", "8", *TINY])
    assert code is None, err.getvalue()
    return d / "out", out.getvalue()


@pytest.fixture(scope="module")
def ckpt_zh(trained_zh):
    return trained_zh[0] / "ckpt.pt"


def test_train_end_to_end(trained_zh):
    out, stdout = trained_zh
    assert sorted(p.name for p in out.iterdir()) == ["best.pt", "ckpt.pt", "log.jsonl",
                                                     "loss.png", "metrics.json", "vocab.json"]
    assert (out / "loss.png").read_bytes().startswith(PNG_MAGIC)

    metrics = json.loads((out / "metrics.json").read_text(encoding="utf-8"))
    assert metrics["stage"] == "stage2_bigram"
    assert metrics["steps"] == 30 and metrics["interrupted"] is False
    assert math.isfinite(metrics["train_loss"]) and math.isfinite(metrics["val_loss"])
    assert len(metrics["sample"]) == 20

    model, tok, ckpt = load_model(out / "ckpt.pt")
    assert CharTokenizer.load(out / "vocab.json").chars == tok.chars
    assert tok.chars == sorted(set(TINY_TEXT_ZH))
    history = ckpt["history"]
    assert [h["step"] for h in history] == [0, 10, 20, 30]
    assert history[-1]["train"] < history[0]["train"] - 0.1  # it learned something
    assert history[-1]["train"] == pytest.approx(metrics["train_loss"])
    assert "step    30: train loss" in stdout
    assert f"sample after training:\n{metrics['sample']}\n" in stdout
    V = tok.vocab_size
    assert metrics["params"] == V * V
    assert stdout.startswith(f"stage2_bigram: {V * V:,} parameters, vocab {V}, ")
    assert "token_embedding_table" not in stdout  # one part: no breakdown to print


def test_sample_with_a_prompt_is_greedy_at_temperature_zero(capsys, ckpt_zh):
    code = sample.main(["--ckpt", str(ckpt_zh), "--prompt", "你好", "--tokens", "25",
                        "--temperature", "0", "--device", "cpu"])
    assert code is None
    out = capsys.readouterr().out
    assert out.endswith("\n")
    text = out[:-1]
    model, tok, _ = load_model(ckpt_zh)
    idx = torch.tensor([tok.encode("你好")])
    for _ in range(25):
        idx = torch.cat([idx, model(idx)[0][:, -1].argmax(-1, keepdim=True)], dim=1)
    assert text == tok.decode(idx[0].tolist())
    assert text.startswith("你好") and len(text) == 2 + 25


def test_sample_seed_controls_the_output(capsys, ckpt_zh):
    def run(seed):
        sample.main(["--ckpt", str(ckpt_zh), "--tokens", "60", "--seed", str(seed),
                     "--device", "cpu"])
        return capsys.readouterr().out

    assert run(1) == run(1)
    assert run(1) != run(2)


def test_sample_unknown_prompt_character(capsys, ckpt_zh):
    code, out, err = _exit_code(capsys, sample.main, "--ckpt", ckpt_zh, "--prompt", "你好€",
                                "--device", "cpu")
    assert code == 2 and out == ""
    assert_user_error(err, "'€' at position 2")
    assert err.startswith("error: ") and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["--prompt", ""], "--prompt is empty"),
        (["--temperature", "-1"], "--temperature: must be a number >= 0"),
        (["--top-k", "0"], "must be a whole number >= 1"),
        (["--tokens", "-5"], "must be a whole number >= 0"),
    ],
)
def test_sample_bad_settings_exit_2(capsys, ckpt_zh, args, fragment):
    code, _, err = _exit_code(capsys, sample.main, "--ckpt", ckpt_zh, "--device", "cpu", *args)
    assert code == 2
    assert_user_error(err, fragment)


def test_sample_nan_temperature_exit_2(capsys, ckpt_zh):
    code, _, err = _exit_code(capsys, sample.main, "--ckpt", ckpt_zh, "--temperature", "nan",
                              "--device", "cpu")
    assert code == 2
    assert_user_error(err, "temperature")


def test_sample_without_a_checkpoint(capsys, tmp_path):
    code, _, err = _exit_code(capsys, sample.main, "--ckpt", tmp_path / "none.pt")
    assert code == 2
    assert_user_error(err, "no checkpoint at", "python -m stage2_bigram.train")


def test_sample_with_a_damaged_checkpoint(capsys, tmp_path):
    bad = tmp_path / "ckpt.pt"
    bad.write_bytes(b"\x00" * 100)
    code, _, err = _exit_code(capsys, sample.main, "--ckpt", bad)
    assert code == 2
    assert_user_error(err, "corrupted or truncated")


# --- subprocess runs (started in the background, see conftest) -----------------


@pytest.mark.slow
@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_ctrl_c_stops_training_and_still_saves(background):
    # Also the end-to-end run of ``python -m stage2_bigram.train`` in a fresh interpreter.
    run = background["stage2.interrupt"]
    out = Path(run.args[run.args.index("--out-dir") + 1])
    assert "step     0: train loss" in run.stdout, run.stdout + run.stderr  # it was training
    assert run.returncode == 130, run.stderr  # the shell's code for Ctrl-C, once it saved
    assert "Traceback" not in run.stderr
    assert "Ctrl-C: stopping at step" in run.stdout and "--resume" in run.stdout
    model, _, ckpt = load_model(out / "ckpt.pt")
    metrics = json.loads((out / "metrics.json").read_text(encoding="utf-8"))
    assert metrics["interrupted"] is True
    assert ckpt["step"] == metrics["steps"] < 10**7
    assert math.isfinite(metrics["train_loss"]) and math.isfinite(metrics["val_loss"])
    assert (out / "loss.png").read_bytes().startswith(PNG_MAGIC)
    assert CharTokenizer.load(out / "vocab.json").chars == sorted(set(TINY_TEXT))
