"""Stage 3: the train, sample and visualize command-line tools, end to end and on bad input.

Three runs go through a fresh interpreter (``python -m stage3_attention.train``,
``.sample`` and ``.visualize``); they start in the background when the session
starts, so their torch imports overlap with the other tests (see conftest), and
their ``slow`` tests run last. Everything else calls the tools' ``main(argv)`` in
this process: a ``UserError`` must become ``SystemExit(2)`` with an ``error: ...``
line on stderr, and any other exception fails the test just like a traceback would.
"""

from __future__ import annotations

import importlib
import json
import math

import pytest
import torch
from conftest import TINY_TEXT, assert_user_error

import stage3_attention
from stage3_attention.checkpoint import load_model, save_checkpoint
from stage3_attention.model import LanguageModel, ModelConfig
from stage3_attention.report import param_breakdown
from stage3_attention.tokenizer import CharTokenizer

train_cli = importlib.import_module("stage3_attention.train")
sample_cli = importlib.import_module("stage3_attention.sample")
visualize_cli = importlib.import_module("stage3_attention.visualize")

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
TINY_ARGS = ("--max-iters", 30, "--eval-interval", 10, "--eval-iters", 2, "--sample-tokens", 20,
             "--block-size", 8, "--n-embd", 16, "--batch-size", 8, "--device", "cpu")
PATHS: dict = {}  # where the background runs read and write, set by start_background_runs


def save_tiny_checkpoint(folder, corpus):
    """A stage-3 checkpoint saved directly (untrained): enough for sample and visualize."""
    tok = CharTokenizer.from_text(TINY_TEXT)
    torch.manual_seed(0)
    model = LanguageModel(ModelConfig(vocab_size=tok.vocab_size, block_size=8, n_embd=16))
    return save_checkpoint(folder / "ckpt.pt", model, tok, step=0, args={"data": str(corpus)})


def start_background_runs(runs, folder):
    """train on the tiny corpus; sample and visualize on a checkpoint saved right here."""
    corpus = folder / "tiny.txt"
    corpus.write_text(TINY_TEXT, encoding="utf-8")
    ckpt = save_tiny_checkpoint(folder / "saved", corpus)
    PATHS.update(folder=folder, out=folder / "out", ckpt=ckpt, png=folder / "figs" / "attention_grid.png")
    runs.start("stage3.train", "stage3_attention.train", *TINY_ARGS, "--data", corpus,
               "--out-dir", PATHS["out"], cwd=folder)
    runs.start("stage3.sample", "stage3_attention.sample", "--ckpt", ckpt, "--prompt", "\n",
               "--tokens", 20, "--seed", 7, "--device", "cpu", cwd=folder)
    runs.start("stage3.visualize", "stage3_attention.visualize", "--ckpt", ckpt,
               "--prompt", "the cat", "--out-dir", PATHS["png"].parent, "--device", "cpu",
               cwd=folder)


# --- end to end in a fresh interpreter ----------------------------------------------------


@pytest.mark.slow
def test_train_writes_checkpoint_figures_and_metrics(background):
    run, out = background["stage3.train"], PATHS["out"]
    assert run.returncode == 0, run.stderr
    assert "Traceback" not in run.stderr
    for name in ("ckpt.pt", "loss.png", "attention.png", "metrics.json", "vocab.json"):
        assert (out / name).is_file(), name
    assert (out / "loss.png").read_bytes()[:8] == PNG_MAGIC
    assert (out / "attention.png").read_bytes()[:8] == PNG_MAGIC

    metrics = json.loads((out / "metrics.json").read_text(encoding="utf-8"))
    assert metrics["stage"] == "stage3_attention"
    assert metrics["steps"] == 30
    assert metrics["interrupted"] is False
    model, tok, ckpt = load_model(out / "ckpt.pt")
    V, C, T = tok.vocab_size, 16, 8
    assert metrics["params"] == V * C + T * C + 3 * C * C + C * V + V
    assert metrics["params"] == sum(p.numel() for p in model.parameters())
    assert f"{metrics['params']:,} parameters" in run.stdout
    # The count by part, one line each, as the harness computes it.
    parts = param_breakdown(model)
    assert parts == {"token_embedding_table": V * C, "position_embedding_table": T * C,
                     "sa_head": 3 * C * C, "lm_head": C * V + V, "total": metrics["params"]}
    for name, n in parts.items():  # one column of names: the longest, and two spaces
        assert f"  {name:<26}{n:>12,}" in run.stdout.splitlines(), name
    assert ckpt["stage"] == "stage3_attention" and ckpt["step"] == 30
    assert ckpt["config"] == {"vocab_size": V, "block_size": 8, "n_embd": 16, "pos": "learned"}
    # 30 steps on very repetitive text: below the uniform guess, and logged at 0/10/20/30.
    assert metrics["train_loss"] < math.log(V)
    assert [h["step"] for h in ckpt["history"]] == [0, 10, 20, 30]


@pytest.mark.slow
def test_training_sample_is_reproducible_from_the_checkpoint(background):
    out = PATHS["out"]
    assert background["stage3.train"].returncode == 0
    metrics = json.loads((out / "metrics.json").read_text(encoding="utf-8"))
    model, tok, _ = load_model(out / "ckpt.pt")
    # train samples 20 characters after "\n" with --seed (default 1337), like sample does.
    idx = model.generate(torch.tensor([tok.encode("\n")]), 20,
                         generator=torch.Generator().manual_seed(1337))
    assert metrics["sample"] == tok.decode(idx[0, 1:].tolist())
    assert metrics["sample"] in background["stage3.train"].stdout


@pytest.mark.slow
def test_sample_cli_prints_prompt_and_seeded_continuation(background):
    run = background["stage3.sample"]
    assert run.returncode == 0, run.stderr
    model, tok, _ = load_model(PATHS["ckpt"])
    idx = model.generate(torch.tensor([tok.encode("\n")]), 20,
                         generator=torch.Generator().manual_seed(7))
    assert run.stdout == tok.decode(idx[0].tolist()) + "\n"


@pytest.mark.slow
def test_visualize_cli_writes_the_pngs_and_prints_their_paths(background):
    run = background["stage3.visualize"]
    assert run.returncode == 0, run.stderr
    folder = PATHS["png"].parent
    layer = folder / "attention_layer0.png"
    for png in (PATHS["png"], layer):
        assert png.read_bytes()[:8] == PNG_MAGIC
    # No log.jsonl beside the saved checkpoint: no loss curve.
    assert sorted(p.name for p in folder.iterdir()) == ["attention_grid.png",
                                                        "attention_layer0.png"]
    listed = run.stdout.split(f"figures in {folder}:\n")[1].split()
    assert listed == [str(PATHS["png"]), str(layer)]
    assert f"checkpoint: {PATHS['ckpt']}" in run.stdout and "'the cat'" in run.stdout


@pytest.mark.slow
def test_visualize_of_a_trained_run_draws_its_loss_curve_too(background, capsys):
    assert background["stage3.train"].returncode == 0
    out = PATHS["out"]
    visualize_cli.main(["--ckpt", str(out / "ckpt.pt"), "--device", "cpu"])
    printed = capsys.readouterr().out
    names = ["attention_grid.png", "attention_layer0.png", "loss.png"]
    assert printed.split(f"figures in {out / 'figures'}:\n")[1].split() == [
        str(out / "figures" / name) for name in names]
    for name in names:
        assert (out / "figures" / name).read_bytes()[:8] == PNG_MAGIC


# --- in-process runs: quick, and the same code paths ----------------------------------------


@pytest.fixture
def corpus_file(tmp_path):
    path = tmp_path / "tiny.txt"
    path.write_text(TINY_TEXT, encoding="utf-8")
    return path


@pytest.fixture
def tiny_ckpt(corpus_file):
    return save_tiny_checkpoint(corpus_file.parent, corpus_file)


@pytest.fixture
def stage2_ckpt(tmp_path):
    from stage2_bigram.checkpoint import save_checkpoint as save2
    from stage2_bigram.model import LanguageModel as Bigram
    from stage2_bigram.model import ModelConfig as BigramConfig
    from stage2_bigram.tokenizer import CharTokenizer as Tok2

    tok = Tok2.from_text(TINY_TEXT)
    return save2(tmp_path / "bigram.pt", Bigram(BigramConfig(vocab_size=tok.vocab_size)), tok, 0)


def _error(capsys, main, *argv, fragments=()):
    """``main(argv)`` exits with code 2 and an ``error:`` line; returns (out, err)."""
    with pytest.raises(SystemExit) as e:
        main([str(a) for a in argv])
    assert e.value.code == 2
    captured = capsys.readouterr()
    assert_user_error(captured.err, *fragments)
    return captured


def test_train_with_sinusoidal_positions(capsys, corpus_file, tmp_path):
    out = tmp_path / "sin"
    train_cli.main([*map(str, TINY_ARGS), "--max-iters", "10", "--pos", "sinusoidal",
                    "--data", str(corpus_file), "--out-dir", str(out)])
    assert f"checkpoint: {out / 'ckpt.pt'}" in capsys.readouterr().out
    metrics = json.loads((out / "metrics.json").read_text(encoding="utf-8"))
    assert metrics["steps"] == 10
    model, tok, ckpt = load_model(out / "ckpt.pt")
    assert ckpt["config"]["pos"] == "sinusoidal"
    assert model.config.pos == "sinusoidal"
    V, C = tok.vocab_size, 16
    assert metrics["params"] == V * C + 3 * C * C + C * V + V  # no position parameters
    assert "position_table" not in ckpt["model"]
    for name in ("loss.png", "attention.png"):
        assert (out / name).read_bytes()[:8] == PNG_MAGIC


@pytest.mark.parametrize(
    ("argv", "fragments"),
    [
        (["--n-embd", "0"], ["--n-embd", ">= 1"]),
        (["--pos", "bogus"], ["--pos", "bogus"]),
        (["--block-size", "5000"], ["block_size=5000"]),
        (["--val-fraction", "1.5"], ["--val-fraction", "between 0 and 1"]),
    ],
)
def test_train_bad_values_exit_2(capsys, corpus_file, tmp_path, argv, fragments):
    _error(capsys, train_cli.main, "--data", corpus_file, "--out-dir", tmp_path / "o",
           "--max-iters", 1, "--device", "cpu", *argv, fragments=fragments)
    assert not (tmp_path / "o" / "ckpt.pt").exists()


def test_train_missing_data_file_exits_2(capsys, tmp_path):
    _error(capsys, train_cli.main, "--data", tmp_path / "nope.txt", "--out-dir", tmp_path / "o",
           fragments=["nope.txt"])


def test_train_out_dir_that_is_a_file_exits_2_before_training(capsys, corpus_file, tmp_path):
    blocker = tmp_path / "taken"
    blocker.write_text("not a folder", encoding="utf-8")
    out, _ = _error(capsys, train_cli.main, "--data", corpus_file, "--out-dir", blocker,
                    "--max-iters", 1, "--device", "cpu", fragments=["taken", "not a folder"])
    assert out == ""  # refused before loading data or building a model
    assert blocker.read_text(encoding="utf-8") == "not a folder"


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_train_on_missing_cuda_exits_2(capsys, corpus_file, tmp_path):
    _error(capsys, train_cli.main, "--data", corpus_file, "--out-dir", tmp_path / "o",
           "--max-iters", 1, "--device", "cuda", fragments=["cuda"])


def test_visualize_default_prompt_comes_from_the_training_text(capsys, tiny_ckpt):
    visualize_cli.main(["--ckpt", str(tiny_ckpt), "--device", "cpu"])
    figures = tiny_ckpt.parent / "figures"  # figures/ beside the checkpoint
    printed = capsys.readouterr().out
    pngs = [figures / "attention_grid.png", figures / "attention_layer0.png"]
    assert [line.strip() for line in printed.strip().splitlines()[-2:]] == list(map(str, pngs))
    prompt = printed.split("prompt:", 1)[1].splitlines()[0].strip().strip("'")
    assert prompt and prompt in TINY_TEXT and "\n" not in prompt
    assert len(prompt) == 8  # min(block_size, 24) characters
    for png in pngs:
        assert png.read_bytes()[:8] == PNG_MAGIC


def test_visualize_hands_model_prompt_folder_and_log_to_the_drawing(tiny_ckpt, capsys):
    seen = []

    def draw(model, tok, prompt, out_dir, log):
        seen.append((model.config.block_size, tok.chars, prompt, out_dir, log))
        return [out_dir / "a.png", out_dir / "b.png"]

    args = visualize_cli.build_parser().parse_args(["--ckpt", str(tiny_ckpt), "--prompt", "the",
                                                    "--device", "cpu"])
    paths = visualize_cli.visualize(args, draw)
    folder = tiny_ckpt.parent / "figures"
    assert seen == [(8, sorted(set(TINY_TEXT)), "the", folder, None)]
    assert paths == [folder / "a.png", folder / "b.png"]
    assert capsys.readouterr().out.endswith(f"figures in {folder}:\n  {folder / 'a.png'}\n"
                                            f"  {folder / 'b.png'}\n")
    log = tiny_ckpt.parent / "log.jsonl"
    log.write_text('{"step": 0, "train": 3.0, "val": 3.1}\n', encoding="utf-8")
    visualize_cli.visualize(args, draw)
    assert seen[-1][-1] == log  # a log beside the checkpoint: the loss curve can be drawn


def test_visualize_without_the_training_text_asks_for_a_prompt(capsys, tiny_ckpt, corpus_file):
    corpus_file.unlink()
    _error(capsys, visualize_cli.main, "--ckpt", tiny_ckpt, "--device", "cpu",
           fragments=["cannot read the training text", "tiny.txt", "--prompt"])
    assert not (tiny_ckpt.parent / "figures").exists()


def test_a_tool_built_on_the_visualize_parser_names_itself():
    p = visualize_cli.build_parser("lens", "Read the layers: python -m <stage>.lens\n\nMore.")
    assert p.prog == "python -m stage3_attention.lens"
    assert p.description == "Read the layers."
    assert visualize_cli.build_parser().prog == "python -m stage3_attention.visualize"


# --- python -m stage3_attention ------------------------------------------------------------


def test_the_stage_prints_what_it_teaches_and_its_commands(capsys):
    importlib.import_module("stage3_attention.__main__").main([])
    about, commands = capsys.readouterr().out.split("\n\nCommands (each has --help):\n")
    assert about == stage3_attention.__doc__.strip()
    assert about.startswith("Stage 3: one head of causal self-attention.")
    lines = commands.splitlines()
    assert [line.split()[2] for line in lines[:2]] == ["stage3_attention.backward",
                                                       "stage3_attention.bpe"]
    assert lines[2:] == [
        "  python -m stage3_attention.buildup    From averaging the past to self-attention, "
        "in four steps",
        "  python -m stage3_attention.sample     Generate text from a trained checkpoint",
        "  python -m stage3_attention.train      Train this stage's model and save it",
        "  python -m stage3_attention.visualize  Look inside a trained model with figures",
    ]


@pytest.mark.parametrize("command", ["buildup", "sample", "train", "visualize"])
def test_every_listed_command_has_help(capsys, command):
    module = f"stage3_attention.{command}"
    with pytest.raises(SystemExit) as e:
        importlib.import_module(module).main(["--help"])
    assert e.value.code == 0
    assert capsys.readouterr().out.startswith(f"usage: python -m {module}")


@pytest.mark.parametrize(
    ("prompt", "fragments"),
    [
        ("the cat sat", ["11 characters", "block_size=8"]),  # longer than block_size
        ("the CAT", ["'C'", "'A'", "'T'"]),
        ("", ["empty"]),
    ],
)
def test_visualize_bad_prompt_exits_2(capsys, tiny_ckpt, prompt, fragments):
    _error(capsys, visualize_cli.main, "--ckpt", tiny_ckpt, "--prompt", prompt,
           "--out-dir", tiny_ckpt.parent / "x", "--device", "cpu", fragments=fragments)
    assert not (tiny_ckpt.parent / "x").exists()


def test_sample_long_prompt_is_cropped_not_refused(capsys, tiny_ckpt):
    prompt = "the cat sat on the mat."  # 23 characters, block_size is 8
    sample_cli.main(["--ckpt", str(tiny_ckpt), "--prompt", prompt, "--tokens", "5",
                     "--temperature", "0", "--device", "cpu"])
    out = capsys.readouterr().out
    assert out.startswith(prompt) and len(out) == len(prompt) + 5 + 1


@pytest.mark.parametrize(
    ("argv", "fragments"),
    [
        (["--prompt", "the CAT"], ["'C'"]),
        (["--prompt", ""], ["empty"]),
        (["--temperature", "-1"], ["temperature"]),
        (["--temperature", "nan"], ["temperature"]),
        (["--top-k", "0"], ["--top-k"]),
    ],
)
def test_sample_bad_values_exit_2(capsys, tiny_ckpt, argv, fragments):
    _error(capsys, sample_cli.main, "--ckpt", tiny_ckpt, "--device", "cpu", *argv,
           fragments=fragments)


def test_sample_missing_checkpoint_exits_2(capsys, tmp_path):
    _error(capsys, sample_cli.main, "--ckpt", tmp_path / "none.pt", "--device", "cpu",
           fragments=["no checkpoint", "stage3_attention.train"])


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_sample_on_missing_cuda_does_not_blame_the_checkpoint(capsys, tiny_ckpt):
    _, err = _error(capsys, sample_cli.main, "--ckpt", tiny_ckpt, "--device", "cuda",
                    fragments=["cuda"])
    assert "corrupt" not in err and "Delete it" not in err


@pytest.mark.parametrize("tool", ["sample", "visualize"])
def test_stage2_checkpoint_is_refused_naming_both_stages(capsys, stage2_ckpt, tool):
    main = {"sample": sample_cli.main, "visualize": visualize_cli.main}[tool]
    _error(capsys, main, "--ckpt", stage2_ckpt, "--prompt", "the", "--device", "cpu",
           fragments=["stage2_bigram", "stage3_attention"])
