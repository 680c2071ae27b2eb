"""Stage 5 end to end: ``python -m stage5_gpt.train`` and ``python -m stage5_gpt.sample``
in fresh interpreters (few of them: each costs seconds of imports), plus the
cheaper in-process checks of the same ``main()`` functions."""

from __future__ import annotations

import contextlib
import io
import json
import math
import re

import pytest
import torch
from conftest import TINY_TEXT, assert_user_error, finish, module_env, start_module

from stage5_gpt import sample as S
from stage5_gpt import train as T
from stage5_gpt.checkpoint import load_checkpoint, load_model
from stage5_gpt.model import GPT, GPTConfig
from stage5_gpt.report import param_breakdown

PROMPT = "the "
TOKENS = 20
MODEL = dict(n_layer=2, n_embd=16, n_head=2, block_size=8)


def flags(**kw) -> list[str]:
    return [str(x) for k, v in kw.items() for x in (f"--{k.replace('_', '-')}", v)]


@pytest.fixture(scope="module")
def cli(tmp_path_factory):
    """All subprocesses of this file, in two waves of parallel runs."""
    folder = tmp_path_factory.mktemp("stage5_cli")
    data = folder / "tiny.txt"
    data.write_text(TINY_TEXT, encoding="utf-8")
    out = folder / "out"
    env = module_env(OMP_NUM_THREADS="1")
    first = {
        "train": start_module(
            "stage5_gpt.train", *flags(data=data, out_dir=out, device="cpu", **MODEL,
                                       batch_size=8, max_iters=30, eval_interval=10,
                                       eval_iters=2, lr=1e-2, warmup_iters=5,
                                       sample_tokens=10), env=env),
        "bad_config": start_module(
            "stage5_gpt.train", *flags(data=data, out_dir=folder / "bad", n_embd=30, n_head=4),
            env=env),
    }
    runs = {name: finish(p) for name, p in first.items()}
    assert runs["train"].returncode == 0, runs["train"].stderr
    greedy = flags(ckpt=out / "ckpt.pt", prompt=PROMPT, temperature=0, tokens=TOKENS,
                   device="cpu")
    second = {f"greedy{i}": start_module("stage5_gpt.sample", *greedy, env=env) for i in (1, 2)}
    runs.update({name: finish(p) for name, p in second.items()})
    runs["out"], runs["data"] = out, data
    return runs


def test_train_cli_prints_breakdown_and_writes_every_file(cli):
    run, out = cli["train"], cli["out"]
    assert "Traceback" not in run.stderr
    vocab = sorted(set(TINY_TEXT))
    parts = param_breakdown(GPT(GPTConfig(vocab_size=len(vocab), **MODEL)))
    assert list(parts) == ["transformer.wte", "transformer.wpe", "transformer.h",
                           "transformer.ln_f", "total"]  # lm_head is wte: tied
    assert f"stage5_gpt: {parts['total']:,} parameters, vocab {len(vocab)}" in run.stdout
    for name, n in parts.items():
        assert re.search(rf"^  {re.escape(name)}\s+{n:,}$", run.stdout, re.M), (name, run.stdout)
    model, _, _ = load_model(out / "ckpt.pt")
    assert param_breakdown(model) == parts
    assert "threads: 1" in run.stdout  # one thread in the environment: nothing to time
    assert re.search(r"^precision: (bfloat16|float32) forward pass "
                     r"\(--dtype auto; --dtype \1 repeats this run\)$", run.stdout, re.M), run.stdout

    for name in ("ckpt.pt", "best.pt"):
        ckpt = torch.load(out / name, weights_only=True)
        assert ckpt["stage"] == "stage5_gpt" and ckpt["vocab"] == vocab
    assert load_checkpoint(out / "ckpt.pt")["step"] == 30

    rows = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 10, 20, 30]
    assert all(math.isfinite(r["train"]) and math.isfinite(r["val"]) for r in rows)
    assert rows[-1]["val"] < rows[0]["val"] - 0.3, "30 steps at lr 1e-2 should learn something"

    for png in ("loss.png", "attention.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", png
    metrics = json.loads((out / "metrics.json").read_text(encoding="utf-8"))
    assert metrics["stage"] == "stage5_gpt" and metrics["steps"] == 30
    assert metrics["params"] == parts["total"] and metrics["interrupted"] is False
    assert metrics["val_loss"] == rows[-1]["val"]
    assert metrics["best_val_loss"] == min(r["val"] for r in rows)
    assert len(metrics["sample"]) == 10 and set(metrics["sample"]) <= set(vocab)
    assert json.loads((out / "vocab.json").read_text(encoding="utf-8"))["chars"] == vocab


def test_train_cli_bad_config_is_a_clean_error(cli):
    run = cli["bad_config"]
    assert run.returncode == 2
    assert_user_error(run.stderr, "n_embd=30", "n_head=4")
    assert run.stdout == ""


def test_sample_cli_greedy_is_reproducible(cli):
    a, b = cli["greedy1"], cli["greedy2"]
    assert a.returncode == b.returncode == 0, a.stderr
    assert "Traceback" not in a.stderr
    assert a.stdout == b.stdout
    text = a.stdout.removesuffix("\n")
    assert text.startswith(PROMPT) and len(text) == len(PROMPT) + TOKENS
    # The same as greedy decoding in this process.
    model, tok, _ = load_model(cli["out"] / "ckpt.pt")
    ids = model.generate(torch.tensor([tok.encode(PROMPT)]), TOKENS, temperature=0)
    assert text == tok.decode(ids[0].tolist())


# ----------------------------------------------------------- the same main(), in-process


def sample_argv(cli, *args: object) -> list[str]:
    return (flags(ckpt=cli["out"] / "ckpt.pt", prompt=PROMPT, tokens=TOKENS, device="cpu")
            + [str(a) for a in args])


def sample_text(cli, *args: object) -> str:
    """What ``python -m stage5_gpt.sample ARGS`` prints, produced in this process."""
    buf = io.StringIO()
    S.generate_text(S.build_parser().parse_args(sample_argv(cli, *args)), out=buf)
    return buf.getvalue()


def test_sample_top_k(cli):
    greedy = cli["greedy1"].stdout
    assert sample_text(cli, "--top-k", 1, "--temperature", 1.0) == greedy
    a = sample_text(cli, "--top-k", 3, "--seed", 5)
    assert a == sample_text(cli, "--top-k", 3, "--seed", 5)
    assert a.startswith(PROMPT) and len(a) == len(PROMPT) + TOKENS + 1
    assert set(a[:-1]) <= set(TINY_TEXT)


def test_sample_main_writes_to_the_current_stdout(cli):
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        S.main(sample_argv(cli, "--temperature", 0))
    assert buf.getvalue() == cli["greedy1"].stdout


@pytest.mark.parametrize("args,fragments", [
    (["--prompt", "the Q"], ["unknown character", "'Q'"]),
    (["--prompt", ""], ["--prompt"]),
    (["--ckpt", "missing.pt"], ["no checkpoint", "missing.pt"]),
])
def test_sample_bad_input_is_a_clean_error(cli, capsys, args, fragments):
    with pytest.raises(SystemExit) as e:
        S.main(sample_argv(cli, *args))
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error:"), err
    for fragment in fragments:
        assert fragment in err


def test_sample_nan_temperature_is_a_clean_error(cli, capsys):
    with pytest.raises(SystemExit) as e:
        S.main(sample_argv(cli, "--temperature", "nan"))
    assert e.value.code == 2


TRAIN_DEFAULTS = T.build_parser().parse_args([])


@pytest.mark.parametrize("module,expected", [
    (T, [f"optimizer steps in total (default: {TRAIN_DEFAULTS.max_iters})",
         f"peak learning rate (default: {TRAIN_DEFAULTS.lr})",
         "--resume", "--tie-weights", "(default: gelu)", "--min-lr", "--dtype", "--preset"]),
    (S, ["tokens to generate (characters, for this course's models) (default: 300)", "(default: 1.0)", "--top-k",
         "most likely (default: all of them)"]),
])
def test_help_shows_defaults(capsys, module, expected):
    with pytest.raises(SystemExit) as e:
        module.main(["--help"])
    assert e.value.code == 0
    text = " ".join(capsys.readouterr().out.split())  # undo argparse's line wrapping
    assert text.startswith(f"usage: python -m stage5_gpt.{module.__name__.split('.')[-1]}")
    for fragment in expected:
        assert fragment in text, fragment
    assert "--compile" not in text  # gone from stage 5
