"""Stage 4: the command-line tools with blocks, heads and dropout, end to end and on bad input.

One run goes through a fresh interpreter (``python -m stage4_block.train``); it starts
in the background when the session starts (see conftest) and its ``slow`` tests run
last. Everything else calls the tools' ``main(argv)`` in this process: a ``UserError``
must become ``SystemExit(2)`` with an ``error: ...`` line, anything else escaping is a crash.
"""

from __future__ import annotations

import importlib
import json

import pytest
import torch
from conftest import TINY_TEXT, assert_user_error

from stage4_block.checkpoint import load_model
from stage4_block.model import LanguageModel

train_cli = importlib.import_module("stage4_block.train")
sample_cli = importlib.import_module("stage4_block.sample")
visualize_cli = importlib.import_module("stage4_block.visualize")

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
TINY_ARGS = ("--n-layer", 2, "--n-head", 2, "--n-embd", 16, "--block-size", 8,
             "--max-iters", 30, "--eval-interval", 10, "--eval-iters", 2, "--sample-tokens", 20,
             "--batch-size", 8, "--device", "cpu")
PATHS: dict = {}  # set by start_background_runs


def block_params(C: int) -> int:
    return 3 * C * C + (C * C + C) + (4 * C * C + 4 * C) + (4 * C * C + C) + 4 * C


def start_background_runs(runs, folder):
    corpus = folder / "tiny.txt"
    corpus.write_text(TINY_TEXT, encoding="utf-8")
    PATHS.update(out=folder / "out")
    runs.start("stage4.train", "stage4_block.train", *TINY_ARGS, "--data", corpus,
               "--out-dir", PATHS["out"], cwd=folder)


# --- end to end in a fresh interpreter ----------------------------------------------------


@pytest.mark.slow
def test_train_writes_checkpoint_figures_and_metrics(background):
    run, out = background["stage4.train"], PATHS["out"]
    assert run.returncode == 0, run.stderr
    assert "Traceback" not in run.stderr
    for name in ("ckpt.pt", "loss.png", "attention.png", "metrics.json", "vocab.json"):
        assert (out / name).is_file(), name
    assert (out / "attention.png").read_bytes()[:8] == PNG_MAGIC
    assert (out / "loss.png").read_bytes()[:8] == PNG_MAGIC

    metrics = json.loads((out / "metrics.json").read_text(encoding="utf-8"))
    model, tok, ckpt = load_model(out / "ckpt.pt")
    V, T, C = tok.vocab_size, 8, 16
    assert metrics["stage"] == "stage4_block" and ckpt["stage"] == "stage4_block"
    assert metrics["steps"] == 30
    assert metrics["params"] == V * C + T * C + 2 * block_params(C) + C * V + V
    assert metrics["params"] == sum(p.numel() for p in model.parameters())
    assert ckpt["config"] == {
        "vocab_size": V, "block_size": 8, "n_embd": 16, "pos": "learned", "n_head": 2,
        "n_layer": 2, "dropout": 0.1, "activation": "relu", "norm": "pre", "attention": "batched",
        "residual": True, "ffwd": True,
    }
    assert not model.training  # loaded for inference: dropout off


@pytest.mark.slow
def test_training_sample_is_drawn_with_dropout_off(background):
    """The run trains with dropout 0.1; its sample must still be the eval-mode model's."""
    out = PATHS["out"]
    assert background["stage4.train"].returncode == 0
    metrics = json.loads((out / "metrics.json").read_text(encoding="utf-8"))
    model, tok, _ = load_model(out / "ckpt.pt")
    idx = model.generate(torch.tensor([tok.encode("\n")]), 20,
                         generator=torch.Generator().manual_seed(1337))
    assert metrics["sample"] == tok.decode(idx[0, 1:].tolist())


# --- in-process runs ----------------------------------------------------------------------


def test_heads_form_trains_samples_without_dropout_and_visualizes(capsys, tmp_path,
                                                                  monkeypatch):
    modes = []
    generate = LanguageModel.generate

    def spy(self, *args, **kwargs):
        modes.append(self.training)
        return generate(self, *args, **kwargs)

    monkeypatch.setattr(LanguageModel, "generate", spy)
    data = tmp_path / "tiny.txt"
    data.write_text(TINY_TEXT, encoding="utf-8")
    out = tmp_path / "heads"
    train_cli.main([*map(str, TINY_ARGS), "--max-iters", "5", "--sample-tokens", "5",
                    "--dropout", "0.3", "--attention", "heads", "--activation", "gelu",
                    "--norm", "post", "--data", str(data), "--out-dir", str(out)])
    assert f"attention:  {out / 'attention.png'}" in capsys.readouterr().out
    assert modes == [False, False]  # the samples before and after training: dropout off
    _, _, ckpt = load_model(out / "ckpt.pt")
    assert ckpt["config"]["attention"] == "heads" and ckpt["config"]["norm"] == "post"
    assert any(k.startswith("blocks.1.attn.heads.1.query") for k in ckpt["model"])
    assert (out / "attention.png").read_bytes()[:8] == PNG_MAGIC

    png = tmp_path / "again" / "attention_grid.png"
    visualize_cli.main(["--ckpt", str(out / "ckpt.pt"), "--prompt", "the cat", "--out-dir",
                        str(png.parent), "--device", "cpu"])
    printed = [line.strip() for line in capsys.readouterr().out.splitlines()]
    assert str(png) in printed and str(png.parent / "loss.png") in printed  # log.jsonl is there
    assert png.read_bytes()[:8] == PNG_MAGIC
    sample_cli.main(["--ckpt", str(out / "ckpt.pt"), "--prompt", "the ", "--tokens", "10",
                     "--device", "cpu"])
    text = capsys.readouterr().out
    assert text.startswith("the ") and len(text) == 4 + 10 + 1


def test_ablation_flags_train_save_resume_and_sample(capsys, tmp_path):
    """--norm none --no-residual --no-ffwd reach the model, the checkpoint and --resume."""
    data = tmp_path / "tiny.txt"
    data.write_text(TINY_TEXT, encoding="utf-8")
    out = tmp_path / "ablated"
    common = [*map(str, TINY_ARGS), "--data", str(data), "--out-dir", str(out),
              "--sample-tokens", "0"]
    train_cli.main([*common, "--max-iters", "4", "--norm", "none", "--no-residual", "--no-ffwd"])
    model, _, ckpt = load_model(out / "ckpt.pt")
    assert {k: ckpt["config"][k] for k in ("norm", "residual", "ffwd")} == {
        "norm": "none", "residual": False, "ffwd": False}
    assert not any(".ffwd." in k or ".ln" in k for k in ckpt["model"])  # the parts are gone
    V, T, C = model.config.vocab_size, 8, 16
    attn_only = 3 * C * C + C * C + C  # q, k, v and c_proj: no feed-forward, no LayerNorm
    assert sum(p.numel() for p in model.parameters()) == V * C + T * C + 2 * attn_only + C * V + V
    # --resume without the flags continues the ablated run, not a whole block.
    train_cli.main([*common, "--max-iters", "6", "--resume"])
    _, _, ckpt = load_model(out / "ckpt.pt")
    assert ckpt["step"] == 6 and ckpt["config"]["residual"] is False
    assert ckpt["config"]["ffwd"] is False and ckpt["config"]["norm"] == "none"
    capsys.readouterr()
    sample_cli.main(["--ckpt", str(out / "ckpt.pt"), "--prompt", "the ", "--tokens", "5",
                     "--device", "cpu"])
    assert capsys.readouterr().out.startswith("the ")


def _error(capsys, main, *argv, fragments=()) -> str:
    with pytest.raises(SystemExit) as e:
        main([str(a) for a in argv])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert_user_error(err, *fragments)
    return err


@pytest.mark.parametrize(
    ("argv", "fragments"),
    [
        (["--n-embd", "30", "--n-head", "4"], ["n_embd=30", "n_head=4"]),
        (["--dropout", "1.5"], ["dropout", "1.5"]),
        (["--n-layer", "0"], ["--n-layer"]),
        (["--activation", "tanh"], ["--activation", "tanh"]),
        (["--norm", "middle"], ["--norm", "middle"]),
        (["--attention", "flash"], ["--attention", "flash"]),
        (["--residual=no"], ["--residual"]),
    ],
)
def test_train_bad_values_exit_2(capsys, tmp_path, argv, fragments):
    data = tmp_path / "tiny.txt"
    data.write_text(TINY_TEXT, encoding="utf-8")
    err = _error(capsys, train_cli.main, "--data", data, "--out-dir", tmp_path / "o",
                 "--max-iters", 1, "--device", "cpu", *argv, fragments=fragments)
    if not err.startswith("usage:"):  # argparse adds its usage; our own errors are one line
        assert len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "o" / "ckpt.pt").exists()


@pytest.fixture
def stage3_ckpt(tmp_path):
    from stage3_attention.checkpoint import save_checkpoint as save3
    from stage3_attention.model import LanguageModel as Model3
    from stage3_attention.model import ModelConfig as Config3
    from stage3_attention.tokenizer import CharTokenizer as Tok3

    tok = Tok3.from_text(TINY_TEXT)
    model = Model3(Config3(vocab_size=tok.vocab_size, block_size=8, n_embd=16))
    return save3(tmp_path / "stage3.pt", model, tok, 0)


@pytest.mark.parametrize("tool", ["sample", "visualize"])
def test_stage3_checkpoint_is_refused_naming_both_stages(capsys, stage3_ckpt, tool):
    main = {"sample": sample_cli.main, "visualize": visualize_cli.main}[tool]
    _error(capsys, main, "--ckpt", stage3_ckpt, "--prompt", "the", "--device", "cpu",
           fragments=["stage3_attention", "stage4_block"])
