"""Stage 4: the command-line tools with blocks, heads and dropout, end to end and on bad input.

One run goes through a fresh interpreter (``python -m stage4_block.train``); it starts
in the background when the session starts (see conftest) and its ``slow`` tests run
last. Everything else calls the tools' ``main(argv)`` in this process: a ``UserError``
must become ``SystemExit(2)`` with an ``error: ...`` line, anything else escaping is a crash.

The variants of the block (``--norm post``, ``--norm none``, ``--no-residual``,
``--no-mlp``, ``--attention heads``) each train, save, load back and resume.
"""

from __future__ import annotations

import importlib
import json
import re
from pathlib import Path

import pytest
import torch
from conftest import TINY_TEXT, StopAfter, assert_user_error, read_log

from stage4_block import harness, report
from stage4_block.checkpoint import load_model, save_checkpoint
from stage4_block.errors import UserError
from stage4_block.model import LanguageModel, ModelConfig
from stage4_block.report import param_breakdown
from stage4_block.tokenizer import CharTokenizer
from stage4_block.variants import MultiHeadAttention, VariantConfig, VariantModel, build_model

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
    for name in ("ckpt.pt", "best.pt", "loss.png", "attention.png", "metrics.json",
                 "vocab.json", "log.jsonl"):
        assert (out / name).is_file(), name
    assert (out / "attention.png").read_bytes()[:8] == PNG_MAGIC
    assert (out / "loss.png").read_bytes()[:8] == PNG_MAGIC

    metrics = json.loads((out / "metrics.json").read_text(encoding="utf-8"))
    model, tok, ckpt = load_model(out / "ckpt.pt")
    V, T, C = tok.vocab_size, 8, 16
    assert type(model) is LanguageModel  # no switch: the taught model
    assert metrics["stage"] == "stage4_block" and ckpt["stage"] == "stage4_block"
    assert metrics["steps"] == 30
    parts = {"transformer.wte": V * C, "transformer.wpe": T * C,
             "transformer.h": 2 * block_params(C), "lm_head": C * V + V}
    parts["total"] = sum(parts.values())
    assert param_breakdown(model) == parts
    assert metrics["params"] == parts["total"]
    # The run prints the same breakdown, part by part.
    assert f"stage4_block: {parts['total']:,} parameters, vocab {V}" in run.stdout
    for name, n in parts.items():
        assert re.search(rf"^  {re.escape(name)}\s+{n:,}$", run.stdout, re.M), name
    assert ckpt["config"] == {
        "vocab_size": V, "block_size": 8, "n_layer": 2, "n_head": 2, "n_embd": 16,
        "dropout": 0.1, "activation": "relu",
    }
    assert [r["step"] for r in read_log(out)] == [0, 10, 20, 30]
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
    assert len(metrics["sample"]) == 20
    assert metrics["sample"] == tok.decode(idx[0, 1:].tolist())


# --- in-process runs ----------------------------------------------------------------------


@pytest.fixture
def data(tmp_path) -> Path:
    path = tmp_path / "tiny.txt"
    path.write_text(TINY_TEXT, encoding="utf-8")
    return path


def test_heads_form_trains_samples_without_dropout_and_visualizes(capsys, tmp_path, data,
                                                                  monkeypatch):
    modes = []
    generate = LanguageModel.generate

    def spy(self, *args, **kwargs):
        modes.append(self.training)
        return generate(self, *args, **kwargs)

    monkeypatch.setattr(LanguageModel, "generate", spy)
    out = tmp_path / "heads"
    train_cli.main([*map(str, TINY_ARGS), "--max-iters", "5", "--sample-tokens", "5",
                    "--dropout", "0.3", "--attention", "heads", "--activation", "gelu",
                    "--norm", "post", "--data", str(data), "--out-dir", str(out)])
    assert f"attention:  {out / 'attention.png'}" in capsys.readouterr().out
    assert modes == [False, False]  # the samples before and after training: dropout off
    model, _, ckpt = load_model(out / "ckpt.pt")
    assert type(model) is VariantModel
    assert ckpt["config"]["attention"] == "heads" and ckpt["config"]["norm"] == "post"
    assert ckpt["config"]["activation"] == "gelu"
    assert "transformer.h.1.attn.heads.1.query.weight" in ckpt["model"]
    assert (out / "attention.png").read_bytes()[:8] == PNG_MAGIC

    png = tmp_path / "again" / "attention_grid.png"
    visualize_cli.main(["--ckpt", str(out / "ckpt.pt"), "--prompt", "the cat", "--out-dir",
                        str(png.parent), "--device", "cpu"])
    printed = [line.strip() for line in capsys.readouterr().out.splitlines()]
    assert str(png) in printed and str(png.parent / "loss.png") in printed  # log.jsonl is there
    assert str(png.parent / "attention_layer1.png") in printed
    assert png.read_bytes()[:8] == PNG_MAGIC
    sample_cli.main(["--ckpt", str(out / "ckpt.pt"), "--prompt", "the ", "--tokens", "10",
                     "--device", "cpu"])
    text = capsys.readouterr().out
    assert text.startswith("the ") and len(text) == 4 + 10 + 1


def no_figures(mp: pytest.MonkeyPatch) -> None:
    """The PNGs are checked above and end to end; in the runs below they only cost time."""
    mp.setattr(report, "plot_losses", lambda history, path, title="": Path(path))
    mp.setattr(train_cli, "attention_figure", lambda model, tok, prompt, path: Path(path))


REAL_STOP_FLAG = harness.StopFlag


def ctrl_c_after(mp: pytest.MonkeyPatch, steps: int | None) -> None:
    """As if Ctrl-C were pressed after ``steps`` training steps (None: never)."""
    mp.setattr(harness, "StopFlag", REAL_STOP_FLAG if steps is None else StopAfter(steps))


# Each switch: its flags, the config fields they set, and a check of the built model.
SWITCHES = {
    "norm-post": (["--norm", "post"], {"norm": "post"},
                  lambda m: all(b.post_norm for b in m.transformer.h)),
    "norm-none": (["--norm", "none"], {"norm": "none"},
                  lambda m: not any(isinstance(x, torch.nn.LayerNorm) for x in m.modules())),
    "no-residual": (["--no-residual"], {"residual": False},
                    lambda m: not any(b.residual for b in m.transformer.h)),
    "no-mlp": (["--no-mlp"], {"mlp": False},
               lambda m: all(b.mlp is None and b.ln_2 is None for b in m.transformer.h)),
    "attention-heads": (["--attention", "heads"], {"attention": "heads"},
                        lambda m: all(type(b.attn) is MultiHeadAttention
                                      for b in m.transformer.h)),
}
PER_BLOCK = {"norm-post": lambda C: 12 * C * C + 10 * C, "norm-none": lambda C: 12 * C * C + 6 * C,
             "no-residual": lambda C: 12 * C * C + 10 * C, "no-mlp": lambda C: 4 * C * C + 3 * C,
             "attention-heads": lambda C: 12 * C * C + 10 * C}


@pytest.mark.parametrize("switch", SWITCHES)
def test_each_switch_trains_saves_and_resumes(switch, capsys, tmp_path, data, monkeypatch):
    """The flag reaches the model, the checkpoint and --resume (which restores it unasked):
    a run of 5 steps stopped by Ctrl-C after 3, then resumed without the flag."""
    no_figures(monkeypatch)
    flags, fields, wired = SWITCHES[switch]
    out = tmp_path / switch
    common = [*map(str, TINY_ARGS), "--data", str(data), "--out-dir", str(out),
              "--sample-tokens", "0", "--eval-interval", "2", "--max-iters", "5"]
    ctrl_c_after(monkeypatch, 3)
    with pytest.raises(SystemExit) as e:  # a run Ctrl-C stopped exits 130, once saved
        train_cli.main([*common, *flags])
    assert e.value.code == 130
    ctrl_c_after(monkeypatch, None)
    printed = capsys.readouterr().out
    assert "Ctrl-C: stopping at step 3" in printed
    model, _, ckpt = load_model(out / "ckpt.pt")
    assert type(model) is VariantModel and wired(model)
    assert {k: ckpt["config"][k] for k in fields} == fields
    assert ckpt["config"] == {
        "vocab_size": model.config.vocab_size, "block_size": 8, "n_layer": 2, "n_head": 2,
        "n_embd": 16, "dropout": 0.1, "activation": "relu",
        "norm": "pre", "attention": "batched", "residual": True, "mlp": True, **fields}
    V, T, C = model.config.vocab_size, 8, 16
    total = V * C + T * C + 2 * PER_BLOCK[switch](C) + C * V + V
    assert param_breakdown(model)["total"] == total
    assert f"stage4_block: {total:,} parameters" in printed
    assert ckpt["step"] == 3
    first = {k: v.clone() for k, v in ckpt["model"].items()}

    # --resume without the flag continues the variant, not the plain block.
    train_cli.main([*common, "--resume"])
    assert "resuming from" in capsys.readouterr().out
    model, _, ckpt = load_model(out / "ckpt.pt")
    assert type(model) is VariantModel and wired(model)
    assert ckpt["step"] == 5 and ckpt["args"]["max_iters"] == 5 and {k: ckpt["config"][k] for k in fields} == fields
    assert ckpt["model"].keys() == first.keys()
    assert any(not torch.equal(ckpt["model"][k], first[k]) for k in first), "no training"
    assert [r["step"] for r in read_log(out)] == [0, 2, 3, 4, 5]
    assert all(torch.isfinite(t).all() for t in ckpt["model"].values())


def test_ablation_flags_together_train_resume_and_sample(capsys, tmp_path, data, monkeypatch):
    """--norm none --no-residual --no-mlp together: attention only, no LayerNorm, no residual."""
    no_figures(monkeypatch)
    out = tmp_path / "ablated"
    common = [*map(str, TINY_ARGS), "--data", str(data), "--out-dir", str(out),
              "--sample-tokens", "0", "--max-iters", "6"]
    ctrl_c_after(monkeypatch, 4)
    with pytest.raises(SystemExit) as e:  # a run Ctrl-C stopped exits 130, once saved
        train_cli.main([*common, "--norm", "none", "--no-residual", "--no-mlp"])
    assert e.value.code == 130
    ctrl_c_after(monkeypatch, None)
    model, _, ckpt = load_model(out / "ckpt.pt")
    assert ckpt["step"] == 4
    assert {k: ckpt["config"][k] for k in ("norm", "residual", "mlp")} == {
        "norm": "none", "residual": False, "mlp": False}
    assert not any(".mlp." in k or ".ln_" in k for k in ckpt["model"])  # the parts are gone
    V, T, C = model.config.vocab_size, 8, 16
    attn_only = 3 * C * C + C * C + C  # q, k, v and c_proj: no MLP, no LayerNorm
    assert param_breakdown(model)["total"] == V * C + T * C + 2 * attn_only + C * V + V
    # A flag that contradicts the checkpoint is refused, not silently dropped.
    with pytest.raises(SystemExit) as e:
        train_cli.main([*common, "--resume", "--attention", "heads"])
    assert e.value.code == 2
    assert_user_error(capsys.readouterr().err, "--attention heads", "batched")
    train_cli.main([*common, "--resume"])
    _, _, ckpt = load_model(out / "ckpt.pt")
    assert ckpt["step"] == 6 and ckpt["config"]["residual"] is False
    assert ckpt["config"]["mlp"] is False and ckpt["config"]["norm"] == "none"
    capsys.readouterr()
    sample_cli.main(["--ckpt", str(out / "ckpt.pt"), "--prompt", "the ", "--tokens", "5",
                     "--device", "cpu"])
    assert capsys.readouterr().out.startswith("the ")


# --- checkpoints of variants --------------------------------------------------------------


@pytest.mark.parametrize("kw", [{}, {"norm": "post", "attention": "heads"},
                                {"mlp": False, "residual": False}, {"norm": "none"}], ids=str)
def test_a_checkpoint_loads_back_as_the_model_that_wrote_it(tmp_path, kw):
    tok = CharTokenizer.from_text(TINY_TEXT)
    cfg = VariantConfig(vocab_size=tok.vocab_size, block_size=8, n_layer=2, n_head=2,
                        n_embd=16, **kw)
    torch.manual_seed(0)
    model = build_model(cfg)
    with torch.no_grad():  # not the init: loading must bring back these exact numbers
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    path = save_checkpoint(tmp_path / "ckpt.pt", model, tok, step=7)
    loaded, tok2, ckpt = load_model(path)
    assert type(loaded) is type(model) is (LanguageModel if not kw else VariantModel)
    assert type(loaded.config) is (ModelConfig if not kw else VariantConfig)
    assert loaded.config == model.config and tok2.chars == tok.chars and ckpt["step"] == 7
    assert loaded.state_dict().keys() == model.state_dict().keys()
    for k, v in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[k], v), k
    idx = torch.tensor([tok.encode("the cat")])
    model.eval()
    assert torch.equal(loaded(idx)[0], model(idx)[0])
    assert not loaded.training


@pytest.mark.parametrize(("change", "fragment"), [
    ({"norm": "middle"}, "norm must be one of"),
    ({"ffwd": True}, "ffwd"),  # a checkpoint from before the flag was called --mlp
    ({"pos": "learned"}, "pos"),  # before --pos left stage 4
])
def test_a_checkpoint_with_an_unknown_config_is_a_user_error(tmp_path, change, fragment):
    tok = CharTokenizer("abcd")
    model = build_model(VariantConfig(vocab_size=4, block_size=4, n_layer=1, n_head=2,
                                      n_embd=8, norm="post"))
    path = save_checkpoint(tmp_path / "ckpt.pt", model, tok, step=1)
    raw = torch.load(path, weights_only=True)
    raw["config"].update(change)
    torch.save(raw, path)
    with pytest.raises(UserError, match="does not match this stage's model") as e:
        load_model(path)
    assert fragment in str(e.value) and str(path) in str(e.value)


# --- bad input ----------------------------------------------------------------------------


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
        (["--no-ffwd"], ["unrecognized arguments: --no-ffwd"]),  # the flag is --no-mlp now
        (["--pos", "learned"], ["unrecognized arguments: --pos"]),  # stage 4 learns positions
    ],
)
def test_train_bad_values_exit_2(capsys, tmp_path, data, argv, fragments):
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
