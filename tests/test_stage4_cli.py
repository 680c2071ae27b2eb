"""Stage 4: the command-line tools with blocks, heads and dropout, end to end and on bad input.

One real subprocess run of ``python -m stage4_block.train``; everything else calls the
tools' ``main()`` in-process (same code, no interpreter start-up): a ``UserError`` must
become ``SystemExit(2)`` with one ``error: ...`` line, anything else escaping is a crash.
"""

from __future__ import annotations

import importlib
import json

import pytest
import torch
from conftest import TINY_TEXT, assert_user_error, finish, module_env, start_module

from stage4_block.checkpoint import load_model
from stage4_block.model import LanguageModel

train_cli = importlib.import_module("stage4_block.train")
sample_cli = importlib.import_module("stage4_block.sample")
visualize_cli = importlib.import_module("stage4_block.visualize")

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
TINY_ARGS = ("--n-layer", 2, "--n-head", 2, "--n-embd", 16, "--block-size", 8,
             "--max-iters", 30, "--eval-interval", 10, "--eval-iters", 2, "--sample-tokens", 20,
             "--batch-size", 8, "--device", "cpu")


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """Tiny tensors: a second intra-op thread only adds waiting (badly so on a busy machine)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def block_params(C: int) -> int:
    return 3 * C * C + (C * C + C) + (4 * C * C + 4 * C) + (4 * C * C + C) + 4 * C


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    folder = tmp_path_factory.mktemp("stage4_cli")
    data = folder / "tiny.txt"
    data.write_text(TINY_TEXT, encoding="utf-8")
    out = folder / "out"
    run = finish(start_module("stage4_block.train", *TINY_ARGS, "--data", data, "--out-dir", out,
                              cwd=folder, env=module_env(OMP_NUM_THREADS="1")))
    return out, run


@pytest.mark.slow
def test_train_writes_checkpoint_figures_and_metrics(trained):
    out, run = trained
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
    }
    assert not model.training  # loaded for inference: dropout off
    assert len(metrics["sample"]) == 20


def test_attention_heads_form_trains_and_visualizes(capsys, tmp_path):
    data = tmp_path / "tiny.txt"
    data.write_text(TINY_TEXT, encoding="utf-8")
    out = tmp_path / "heads"
    train_cli.main([*map(str, TINY_ARGS), "--max-iters", "5", "--attention", "heads",
                    "--activation", "gelu", "--norm", "post", "--data", str(data),
                    "--out-dir", str(out)])
    assert f"attention:  {out / 'attention.png'}" in capsys.readouterr().out
    _, _, ckpt = load_model(out / "ckpt.pt")
    assert ckpt["config"]["attention"] == "heads" and ckpt["config"]["norm"] == "post"
    assert any(k.startswith("blocks.0.attn.heads.1.query") for k in ckpt["model"])
    assert (out / "attention.png").read_bytes()[:8] == PNG_MAGIC

    png = tmp_path / "again.png"
    visualize_cli.main(["--ckpt", str(out / "ckpt.pt"), "--prompt", "the cat", "--out", str(png),
                        "--device", "cpu"])
    assert capsys.readouterr().out.strip() == f"attention heatmap: {png}"
    assert png.read_bytes()[:8] == PNG_MAGIC
    sample_cli.main(["--ckpt", str(out / "ckpt.pt"), "--prompt", "the ", "--tokens", "10",
                     "--device", "cpu"])
    text = capsys.readouterr().out
    assert text.startswith("the ") and len(text) == 4 + 10 + 1


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
    ],
)
def test_train_bad_values_exit_2(capsys, tmp_path, argv, fragments):
    data = tmp_path / "tiny.txt"
    data.write_text(TINY_TEXT, encoding="utf-8")
    err = _error(capsys, train_cli.main, "--data", data, "--out-dir", tmp_path / "o",
                 "--max-iters", 1, "--device", "cpu", *argv, fragments=fragments)
    if not err.startswith("usage:"):  # argparse adds its usage; our own errors are one line
        assert len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "o").exists()


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


@pytest.mark.xfail(strict=True, reason="train() draws its before/after samples with the model "
                   "in training mode (estimate_loss() ends with model.train()), so dropout is "
                   "active while generating; sample.py generates in eval mode")
def test_training_samples_are_drawn_with_dropout_off(capsys, tmp_path, monkeypatch):
    modes = []
    generate = LanguageModel.generate

    def spy(self, *args, **kwargs):
        modes.append(self.training)
        return generate(self, *args, **kwargs)

    monkeypatch.setattr(LanguageModel, "generate", spy)
    data = tmp_path / "tiny.txt"
    data.write_text(TINY_TEXT, encoding="utf-8")
    train_cli.main([*map(str, TINY_ARGS), "--max-iters", "2", "--sample-tokens", "5",
                    "--dropout", "0.2", "--data", str(data), "--out-dir", str(tmp_path / "o")])
    capsys.readouterr()
    assert modes == [False, False]  # the sample before and the sample after training
