"""Stage 2: saving and loading checkpoints safely."""

from __future__ import annotations

import os

import pytest
import torch

from stage2_bigram import checkpoint
from stage2_bigram.checkpoint import load_checkpoint, load_model, save_checkpoint
from stage2_bigram.errors import UserError
from stage2_bigram.model import LanguageModel, ModelConfig
from stage2_bigram.tokenizer import CharTokenizer

TEXT = "hello world, 你好 🐍\n"


@pytest.fixture
def trained(tmp_path):
    """A model with non-trivial weights, its tokenizer, and a saved checkpoint."""
    tok = CharTokenizer.from_text(TEXT)
    torch.manual_seed(0)
    model = LanguageModel(ModelConfig(vocab_size=tok.vocab_size))
    with torch.no_grad():
        model.token_embedding_table.weight.normal_()
    path = save_checkpoint(tmp_path / "out" / "ckpt.pt", model, tok, step=42,
                           history=[{"step": 0, "train": 4.0, "val": 4.1}], note="hi")
    return model, tok, path


def _files(folder):
    return sorted(p.name for p in folder.iterdir())


def test_round_trip_gives_the_same_model(trained):
    model, tok, path = trained
    loaded, loaded_tok, ckpt = load_model(path)
    assert not loaded.training  # ready for sampling
    assert loaded_tok.chars == tok.chars
    idx = torch.tensor([tok.encode("hello 你好🐍")])
    assert torch.equal(loaded(idx)[0], model(idx)[0])
    assert ckpt["step"] == 42
    assert ckpt["history"] == [{"step": 0, "train": 4.0, "val": 4.1}]
    assert ckpt["note"] == "hi"
    assert ckpt["stage"] == "stage2_bigram"


def test_checkpoint_is_plain_data_that_loads_with_weights_only(trained):
    _, tok, path = trained
    ckpt = torch.load(path, weights_only=True)
    assert ckpt["format"] == "gpt-stages-checkpoint"
    assert ckpt["vocab"] == tok.chars
    assert ckpt["config"] == {"vocab_size": tok.vocab_size}


def test_save_leaves_only_the_checkpoint_with_normal_permissions(trained):
    _, _, path = trained
    assert _files(path.parent) == ["ckpt.pt"]
    plain = path.parent / "plain.txt"
    plain.write_text("x")
    assert path.stat().st_mode == plain.stat().st_mode  # not private like a mkstemp file


@pytest.mark.parametrize("error", [OSError("disk full"), KeyboardInterrupt()])
def test_a_failing_save_keeps_the_old_checkpoint(trained, monkeypatch, error):
    model, tok, path = trained
    before = path.read_bytes()

    def half_save(obj, f, *args, **kwargs):
        with open(f, "wb") as fh:
            fh.write(b"PK\x03\x04 half a zip")
        raise error

    monkeypatch.setattr(torch, "save", half_save)
    with torch.no_grad():
        model.token_embedding_table.weight.zero_()
    # A full disk is the learner's to fix: one line that says so; Ctrl-C stays Ctrl-C.
    expected = KeyboardInterrupt if isinstance(error, KeyboardInterrupt) else UserError
    with pytest.raises(expected, match=None if expected is KeyboardInterrupt else "Is the disk full"):
        save_checkpoint(path, model, tok, step=43)
    assert path.read_bytes() == before
    assert _files(path.parent) == ["ckpt.pt"]  # the temporary file is gone too
    monkeypatch.undo()
    assert load_model(path)[2]["step"] == 42


@pytest.mark.parametrize("damage", ["truncate", "random", "empty", "text"])
def test_damaged_files_are_user_errors(trained, damage):
    _, _, path = trained
    raw = path.read_bytes()
    content = {
        "truncate": raw[: len(raw) // 2],
        "random": os.urandom(2000),
        "empty": b"",
        "text": b"hello, not a checkpoint\n",
    }[damage]
    path.write_bytes(content)
    with pytest.raises(UserError) as e:
        load_model(path)
    assert "corrupted or truncated" in str(e.value)
    assert "python -m stage2_bigram.train" in str(e.value)


def test_missing_checkpoint_says_to_train_first(tmp_path):
    with pytest.raises(UserError, match=r"no checkpoint at .*python -m stage2_bigram\.train"):
        load_model(tmp_path / "nope.pt")


@pytest.mark.parametrize("obj", [{"weights": torch.zeros(3)}, torch.zeros(3), [1, 2, 3],
                                 {"format": "other"}])
def test_other_pt_files_are_user_errors(tmp_path, obj):
    path = tmp_path / "other.pt"
    torch.save(obj, path)
    with pytest.raises(UserError, match="not a checkpoint of this tutorial"):
        load_model(path)


class Exploit:
    """Pickles into 'create a file when loaded': weights_only must refuse it."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_pickled_code_is_not_run(tmp_path):
    marker = tmp_path / "pwned"
    path = tmp_path / "evil.pt"
    torch.save({"format": "gpt-stages-checkpoint", "x": Exploit(str(marker))}, path)
    assert not marker.exists()
    with pytest.raises(UserError):
        load_model(path)
    assert not marker.exists()


def _rewrite(path, **changes):
    ckpt = torch.load(path, weights_only=True)
    for key, value in changes.items():
        if value is None:
            del ckpt[key]
        else:
            ckpt[key] = value
    torch.save(ckpt, path)


def test_checkpoint_of_another_stage_names_both_stages(trained):
    _, _, path = trained
    _rewrite(path, stage="stage3_attention")
    with pytest.raises(UserError) as e:
        load_model(path)
    msg = str(e.value)
    assert "stage3_attention" in msg and "stage2_bigram" in msg
    assert "python -m stage3_attention.sample" in msg


@pytest.mark.parametrize(
    "changes",
    [
        {"config": {"vocab_size": 3}},  # config disagrees with the vocabulary
        {"config": {"vocab_size": 13, "n_embd": 32}},  # a field this stage does not have
        {"config": "vocab_size=13"},
        {"config": None},
        {"vocab": None},
        {"vocab": ["a", "a"]},
        {"vocab": 7},
        {"model": None},
        {"model": {"token_embedding_table.weight": torch.zeros(5, 5)}},
        {"model": {"something.else": torch.zeros(13, 13)}},
    ],
)
def test_config_or_weights_that_do_not_fit_are_user_errors(trained, changes):
    _, tok, path = trained
    assert tok.vocab_size == 13  # the numbers above assume it
    _rewrite(path, **changes)
    with pytest.raises(UserError, match="does not match this stage's model"):
        load_model(path)


def test_load_checkpoint_checks_only_the_header(trained):
    _, _, path = trained
    assert load_checkpoint(path)["step"] == 42
    assert checkpoint.STAGE == "stage2_bigram"
