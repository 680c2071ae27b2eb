"""The attention explorer's export (tools/docs/pages/explorer.py): format and round trip.

The weights are stored as float16 (the three models' files must fit BUDGET_BYTES): reading an
export back gives each trained number rounded to the nearest float16, exactly.

The browser side (the page's forward pass against PyTorch) is tests/test_explorer_browser.py.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from stage5_gpt.checkpoint import save_checkpoint  # noqa: E402
from stage5_gpt.model import GPT, GPTConfig  # noqa: E402
from stage5_gpt.tokenizer import CharTokenizer  # noqa: E402
from tools.docs.pages import explorer  # noqa: E402

BUDGET_BYTES = 8 * 1024 * 1024  # the files of every model together: en, zh, tang (issues 14, 41)


def tiny_checkpoint(tmp_path: Path, **config) -> tuple[Path, GPT, CharTokenizer]:
    torch.manual_seed(0)
    tokenizer = CharTokenizer("ab c\n字")
    model = GPT(GPTConfig(vocab_size=tokenizer.vocab_size, block_size=8, n_layer=2, n_head=2,
                          n_embd=8, **config)).eval()
    with torch.no_grad():  # biases and LayerNorm weights away from their 0 and 1 initial values
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    path = save_checkpoint(tmp_path / "best.pt", model, tokenizer, step=7, best_val=1.25,
                           best_step=5)
    return path, model, tokenizer


def stored(model: GPT) -> dict[str, torch.Tensor]:
    """What an export holds: the state dict but a tied lm_head.weight, which is wte."""
    return {name: t for name, t in model.state_dict().items()
            if not (name == "lm_head.weight" and model.config.tie_weights)}


def rounded(model: GPT) -> GPT:
    """The same model with every weight rounded to float16 and back: what the page reads."""
    state = {k: v.half().float() for k, v in model.state_dict().items()}
    again = GPT(model.config)
    again.load_state_dict(state)
    return again.eval()


@pytest.mark.parametrize("config", [{}, {"bias": False, "tie_weights": False},
                                    {"activation": "relu"}])
def test_export_round_trip_is_exact_up_to_float16_rounding(tmp_path, config):
    path, model, tokenizer = tiny_checkpoint(tmp_path, **config)
    header = explorer.export(path, tmp_path / "out", "en")
    again, vocab, read = explorer.load_export(tmp_path / "out" / "en.json")
    assert vocab == tokenizer.chars and read == header and header["dtype"] == "float16"
    assert read["config"] == {**GPTConfig(vocab_size=6, block_size=8, n_layer=2, n_head=2,
                                          n_embd=8, **config).__dict__}
    ours, theirs = model.state_dict(), again.state_dict()
    assert list(ours) == list(theirs)
    for name in ours:  # each number is the float16 nearest to the trained one, nothing else
        assert theirs[name].dtype == torch.float32
        assert torch.equal(ours[name].half().float(), theirs[name]), name
    idx = torch.tensor([[0, 3, 5, 1, 2]])
    assert torch.equal(rounded(model)(idx)[0], again(idx)[0])
    blob = (tmp_path / "out" / "en.bin").read_bytes()
    assert len(blob) == header["weights_bytes"] == 2 * sum(t.numel() for t in stored(model).values())
    assert ("lm_head.weight" in [t["name"] for t in header["tensors"]]) != model.config.tie_weights
    assert header["weights_sha256"] == hashlib.sha256(blob).hexdigest()
    assert header["checkpoint"] == {"step": 7, "best_val": 1.25}


def test_float16_rounding_is_within_half_a_float16_step(tmp_path):
    """float16 keeps 10 fraction bits: rounding to nearest moves a number by at most 2^-11 of
    its size (2^-25 absolute below 2^-14, where float16 numbers are evenly spaced)."""
    path, model, _ = tiny_checkpoint(tmp_path)
    explorer.export(path, tmp_path, "en")
    again, _, _ = explorer.load_export(tmp_path / "en.json")
    for name, p in model.state_dict().items():
        q = again.state_dict()[name]
        bound = torch.maximum(p.abs() * 2.0**-11, torch.full_like(p, 2.0**-25))
        assert ((q - p).abs() <= bound).all(), name


def test_a_float32_export_is_read_exactly(tmp_path):
    """The format names its dtype; float32 (the page reads it too) round-trips bit for bit."""
    path, model, _ = tiny_checkpoint(tmp_path)
    header = explorer.export(path, tmp_path, "en", dtype="float32")
    again, _, read = explorer.load_export(tmp_path / "en.json")
    assert read["dtype"] == "float32"
    assert header["weights_bytes"] == 4 * sum(t.numel() for t in stored(model).values())
    for name, p in model.state_dict().items():
        assert torch.equal(again.state_dict()[name], p), name


def test_the_header_places_each_tensor_in_state_dict_order(tmp_path):
    path, model, _ = tiny_checkpoint(tmp_path)
    header = explorer.export(path, tmp_path, "en")
    blob = (tmp_path / "en.bin").read_bytes()
    offset = 0
    for t, (name, p) in zip(header["tensors"], stored(model).items(), strict=True):
        assert (t["name"], t["shape"], t["offset"]) == (name, list(p.shape), offset)
        got = torch.frombuffer(bytearray(blob[offset:offset + 2 * p.numel()]), dtype=torch.float16)
        assert torch.equal(got.view(p.shape), p.half())  # little-endian, as this machine
        offset += 2 * p.numel()
    assert offset == len(blob)


def test_a_damaged_weights_file_is_caught(tmp_path):
    path, _, _ = tiny_checkpoint(tmp_path)
    explorer.export(path, tmp_path, "en")
    blob = bytearray((tmp_path / "en.bin").read_bytes())
    blob[10] ^= 1
    (tmp_path / "en.bin").write_bytes(bytes(blob))
    with pytest.raises(AssertionError, match="weights file changed"):
        explorer.load_export(tmp_path / "en.json")


def test_the_shipped_exports_load_and_fit_the_budget():
    folder = ROOT / "docs" / "generated" / "explorer"
    total = sum((folder / f"{lang}.{ext}").stat().st_size
                for lang in explorer.EXAMPLES for ext in ("json", "bin"))
    print(f"explorer model files, {len(explorer.EXAMPLES)} models: {total:,} bytes")
    assert sorted(explorer.EXAMPLES) == ["en", "tang", "zh"]
    assert total <= BUDGET_BYTES
    for lang in explorer.EXAMPLES:
        model, vocab, header = explorer.load_export(folder / f"{lang}.json")
        assert header["lang"] == lang and all(ch in vocab for ch in header["example"])
        assert header["dtype"] == explorer.DTYPE == "float16"
