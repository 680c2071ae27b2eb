"""The attention explorer's models: the trained stage-5 GPTs, exported for the browser.

The explorer page (docs/explorer.md, docs/assets/javascripts/explorer.js) runs the
built-in English and Chinese models in the reader's browser, from two files each in
docs/generated/explorer/: ``<lang>.json`` (the config, the vocabulary, where each tensor
sits in the weights file) and ``<lang>.bin`` (every tensor of the state_dict, in order,
as little-endian float32: the trained numbers, not rounded).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from .. import Job, Page
from .stage5 import RUNS

FORMAT, VERSION = "gpt-stages-explorer", 1
EXAMPLES = {"en": "TEACHER: Pip the fox", "zh": "小狐狸说"}  # the prompt the page starts with


def export(ckpt_path: Path, out_dir: Path, lang: str) -> dict:
    """Write ``<lang>.json`` and ``<lang>.bin`` from a stage-5 checkpoint; returns the header."""
    import torch

    from stage5_gpt.checkpoint import load_model

    model, tokenizer, ckpt = load_model(ckpt_path)
    tensors, chunks, offset = [], [], 0
    for name, t in model.state_dict().items():
        data = t.detach().to(torch.float32).contiguous().numpy().astype("<f4").tobytes()
        tensors.append({"name": name, "shape": list(t.shape), "offset": offset})
        chunks.append(data)
        offset += len(data)
    blob = b"".join(chunks)
    header = {"format": FORMAT, "version": VERSION, "lang": lang, "config": dict(ckpt["config"]),
              "vocab": tokenizer.chars, "example": EXAMPLES[lang], "dtype": "float32",
              "weights": f"{lang}.bin", "weights_bytes": len(blob),
              "weights_sha256": hashlib.sha256(blob).hexdigest(), "tensors": tensors,
              "checkpoint": {"step": ckpt.get("step"), "best_val": ckpt.get("best_val")}}
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"{lang}.bin").write_bytes(blob)
    (out_dir / f"{lang}.json").write_text(json.dumps(header, ensure_ascii=False, indent=1) + "\n",
                                          encoding="utf-8")
    return header


def load_export(json_path: Path):
    """The exported model back in PyTorch: (GPT in eval mode, vocabulary, header), from the
    very files the page reads (the browser test compares its logits with the page's)."""
    import numpy as np
    import torch

    from stage5_gpt.model import GPT, GPTConfig

    header = json.loads(Path(json_path).read_text(encoding="utf-8"))
    blob = (Path(json_path).parent / header["weights"]).read_bytes()
    assert hashlib.sha256(blob).hexdigest() == header["weights_sha256"], "weights file changed"
    model = GPT(GPTConfig(**header["config"]))
    state = {t["name"]: torch.from_numpy(np.frombuffer(
        blob, dtype="<f4", count=int(np.prod(t["shape"])), offset=t["offset"]
    ).reshape(t["shape"]).copy()) for t in header["tensors"]}
    model.load_state_dict(state)
    return model.eval(), header["vocab"], header


def write(page: Page) -> None:
    for lang, run in RUNS.items():
        export(page.folder(run) / "best.pt", page.dir, lang)


JOBS = [Job("explorer", write, runs=tuple(RUNS.values()), files=("stage5_gpt/model.py",))]
