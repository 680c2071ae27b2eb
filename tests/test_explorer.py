"""The attention explorer's export (tools/docs_explorer.py): format, round trip, staleness.

The browser side (the page's forward pass against PyTorch) is tests/test_explorer_browser.py.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from stage5_gpt.checkpoint import save_checkpoint  # noqa: E402
from stage5_gpt.model import GPT, GPTConfig  # noqa: E402
from stage5_gpt.tokenizer import CharTokenizer  # noqa: E402

BUDGET_BYTES = 8 * 1024 * 1024  # model files of both languages together (issue 14)


def load_tool(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "tools" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


explorer = load_tool("docs_explorer")


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


@pytest.mark.parametrize("config", [{}, {"bias": False, "tie_weights": True},
                                    {"activation": "relu"}])
def test_export_round_trip_is_exact(tmp_path, config):
    path, model, tokenizer = tiny_checkpoint(tmp_path, **config)
    header = explorer.export(path, tmp_path / "out", "xx", source={"inputs_sha256": "abc"})
    again, vocab, read = explorer.load_export(tmp_path / "out" / "xx.json")
    assert vocab == tokenizer.chars and read == header
    assert read["config"] == {**GPTConfig(vocab_size=6, block_size=8, n_layer=2, n_head=2,
                                          n_embd=8, **config).__dict__}
    ours, theirs = model.state_dict(), again.state_dict()
    assert list(ours) == list(theirs)
    for name in ours:
        assert torch.equal(ours[name], theirs[name]), name
    idx = torch.tensor([[0, 3, 5, 1, 2]])
    assert torch.equal(model(idx)[0], again(idx)[0])
    blob = (tmp_path / "out" / "xx.bin").read_bytes()
    assert len(blob) == header["weights_bytes"] == 4 * sum(t.numel() for t in ours.values())
    assert header["weights_sha256"] == hashlib.sha256(blob).hexdigest()
    assert header["checkpoint"] == {"sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
                                    "step": 7, "best_val": 1.25, "best_step": 5}
    assert explorer.problems(tmp_path / "out" / "xx.json", "abc") == []


def test_the_header_places_each_tensor_in_state_dict_order(tmp_path):
    path, model, _ = tiny_checkpoint(tmp_path)
    header = explorer.export(path, tmp_path, "xx")
    blob = (tmp_path / "xx.bin").read_bytes()
    offset = 0
    for t, (name, p) in zip(header["tensors"], model.state_dict().items(), strict=True):
        assert (t["name"], t["shape"], t["offset"]) == (name, list(p.shape), offset)
        got = torch.frombuffer(bytearray(blob[offset:offset + 4 * p.numel()]), dtype=torch.float32)
        assert torch.equal(got.view(p.shape), p)
        offset += 4 * p.numel()
    assert offset == len(blob)


def test_stale_or_damaged_exports_are_caught(tmp_path):
    path, _, _ = tiny_checkpoint(tmp_path)
    explorer.export(path, tmp_path, "xx", source={"inputs_sha256": "old"})
    head, bin_ = tmp_path / "xx.json", tmp_path / "xx.bin"
    assert explorer.problems(head, "old") == []
    assert "stale" in " ".join(explorer.problems(head, "new"))
    blob = bytearray(bin_.read_bytes())
    blob[10] ^= 1
    bin_.write_bytes(bytes(blob))
    assert "sha256" in " ".join(explorer.problems(head, "old"))
    bin_.write_bytes(bytes(blob[:-4]))
    assert "bytes" in " ".join(explorer.problems(head, "old"))
    bin_.unlink()
    assert explorer.problems(head) == ["xx.bin is missing"]
    head.write_text(json.dumps({"format": "something else"}), encoding="utf-8")
    assert "not a gpt-stages-explorer" in explorer.problems(head)[0]
    assert explorer.problems(tmp_path / "nope.json") == ["nope.json is missing"]


def test_load_export_refuses_another_format(tmp_path):
    (tmp_path / "x.json").write_text(json.dumps({"format": "x"}), encoding="utf-8")
    with pytest.raises(ValueError, match="not a gpt-stages-explorer"):
        explorer.load_export(tmp_path / "x.json")


def current_hashes() -> dict[str, str]:
    """The inputs hash of each explorer job now: what a fresh export records."""
    gen_docs = load_tool("gen_docs")
    jobs = [j for j in gen_docs.JOBS if j.name.startswith("explorer_")]
    assert [j.name for j in jobs] == [f"explorer_{lang}" for lang in explorer.LANGS]
    return {j.name.removeprefix("explorer_"): gen_docs.input_hashes([j])[j.name] for j in jobs}


def test_the_shipped_exports_are_current_and_within_budget():
    """Fails when stage5_gpt/ or the exporter changed since the weights were exported."""
    folder = ROOT / "docs" / "generated" / explorer.FOLDER
    hashes = current_hashes()
    found = {lang: explorer.problems(folder / f"{lang}.json", hashes[lang]) for lang in hashes}
    assert not any(found.values()), (
        f"{found}: run python tools/gen_docs.py --only explorer_en explorer_zh")
    total = sum((folder / f"{lang}.{ext}").stat().st_size for lang in hashes for ext in ("json", "bin"))
    print(f"explorer model files, both languages: {total:,} bytes")
    assert total <= BUDGET_BYTES
    for lang, trainer in explorer.LANGS.items():
        header = json.loads((folder / f"{lang}.json").read_text(encoding="utf-8"))
        assert header["lang"] == lang and header["example"]
        assert all(ch in header["vocab"] for ch in header["example"])
        gen_docs = sys.modules["gen_docs"]
        flags = next(j for j in gen_docs.JOBS if j.name == trainer).params["flags"]
        assert header["command"].endswith(" ".join(flags))  # the model the stage-5 page trains
