"""The attention explorer's models: the trained stage-5 GPTs, exported for the browser.

The explorer page (docs/explorer.md, docs/assets/javascripts/explorer.js) runs them in
the reader's browser from two files each in docs/generated/explorer/: ``<lang>.json`` (the
config, the vocabulary, where each tensor sits in the weights file) and ``<lang>.bin``
(every tensor of the state_dict, in order, as little-endian float16). float16 because the
Chinese model's 3,100 embedding and output rows make the two models about 10 MB in float32,
more than the site's 8 MB for them (tests/test_explorer.py); the facts say what the
rounding costs (loss, largest logit change, how often the top next character stays).
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

from .. import Draw, Job, Page
from .stage5 import RUNS

FORMAT, VERSION = "gpt-stages-explorer", 2
EXAMPLES = {"en": "TEACHER: Pip the fox", "zh": "小狐狸说"}  # the prompt the page starts with
DTYPE = "float16"  # how the weights are stored; the page computes in float64 all the same
NUMPY = {"float32": "<f4", "float16": "<f2"}  # little-endian, whatever this machine is
WINDOWS = 32  # validation windows of block_size characters on which the rounding is measured


def export(ckpt_path: Path, out_dir: Path, lang: str, dtype: str = DTYPE) -> dict:
    """Write ``<lang>.json`` and ``<lang>.bin`` from a stage-5 checkpoint; returns the header."""
    from stage5_gpt.checkpoint import load_model

    model, tokenizer, ckpt = load_model(ckpt_path)
    tensors, chunks, offset = [], [], 0
    for name, t in model.state_dict().items():
        if name == "lm_head.weight" and model.config.tie_weights:
            continue  # tied: the page reads wte for it
        # float32 first (exact), then numpy rounds each value to the nearest float16
        data = t.detach().float().contiguous().numpy().astype(NUMPY[dtype]).tobytes()
        tensors.append({"name": name, "shape": list(t.shape), "offset": offset})
        chunks.append(data)
        offset += len(data)
    blob = b"".join(chunks)
    header = {"format": FORMAT, "version": VERSION, "lang": lang, "config": dict(ckpt["config"]),
              "vocab": tokenizer.chars, "example": EXAMPLES[lang], "dtype": dtype,
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
    very files the page reads (the browser test compares its logits with the page's). The
    float16 weights become float32 exactly: every float16 number is a float32 number."""
    import numpy as np
    import torch

    from stage5_gpt.model import GPT, GPTConfig

    header = json.loads(Path(json_path).read_text(encoding="utf-8"))
    blob = (Path(json_path).parent / header["weights"]).read_bytes()
    assert hashlib.sha256(blob).hexdigest() == header["weights_sha256"], "weights file changed"
    model = GPT(GPTConfig(**header["config"]))
    dtype = NUMPY[header.get("dtype", "float32")]
    state = {t["name"]: torch.from_numpy(np.frombuffer(
        blob, dtype=dtype, count=int(np.prod(t["shape"])), offset=t["offset"]
    ).astype(np.float32).reshape(t["shape"])) for t in header["tensors"]}
    state.setdefault("lm_head.weight", state["transformer.wte.weight"])  # tied
    model.load_state_dict(state)
    return model.eval(), header["vocab"], header


def windows(lang: str, tokenizer, T: int):
    """WINDOWS evenly spaced windows of T characters of the validation text, and their
    targets: (x, y), each (WINDOWS, T)."""
    import torch

    from stage5_gpt.data import Corpus

    val = Corpus.load(lang, 0.1, tokenizer).val.long()
    starts = torch.linspace(0, len(val) - T - 1, WINDOWS).long()
    return (torch.stack([val[s:s + T] for s in starts]),
            torch.stack([val[s + 1:s + T + 1] for s in starts]))


def rounding(exact, json_path: Path, x, y) -> dict:
    """What storing the weights as float16 changes, on the windows: the mean loss before
    and after, the largest change of a logit, the share of positions whose most likely
    next character stays the same."""
    import torch
    import torch.nn.functional as F

    rounded, _, _ = load_export(json_path)
    with torch.no_grad():
        a, b = exact(x)[0], rounded(x)[0]
    loss = {name: F.cross_entropy(z.flatten(0, 1), y.flatten()).item()
            for name, z in (("loss_float32", a), ("loss_float16", b))}
    return {**loss, "max_logit_change": (a - b).abs().max().item(),
            "same_top1": (a.argmax(-1) == b.argmax(-1)).float().mean().item(),
            "positions": x.numel()}


def looks_back(model, x) -> dict:
    """The page's "things to try": the largest mean weight a head of layer 0 puts on the
    character 1 (and 2) before the query, on the windows."""
    import torch

    with torch.no_grad():
        first = model.attention_maps(x)[:, 0]  # layer 0: (B, nh, T, T)
    return {f"l0_back{d}": first.diagonal(-d, -2, -1).mean((0, 2)).max().item() for d in (1, 2)}


def write(page: Page) -> None:
    from stage5_gpt.checkpoint import load_model

    total = float32 = 0
    for lang, run in RUNS.items():
        ckpt = page.folder(run) / "best.pt"
        header = export(ckpt, page.dir, lang)
        total += header["weights_bytes"] + (page.dir / f"{lang}.json").stat().st_size
        params = sum(math.prod(t["shape"]) for t in header["tensors"])  # numbers stored
        float32 += 4 * params + (page.dir / f"{lang}.json").stat().st_size
        page.fact(f"{lang}.vocab_size", header["config"]["vocab_size"])
        page.fact(f"{lang}.stored_numbers", params)
        exact, tokenizer, _ = load_model(ckpt)  # the float32 model, read once for both
        x, y = windows(lang, tokenizer, exact.config.block_size)
        measured = rounding(exact, page.dir / f"{lang}.json", x, y) | looks_back(exact, x)
        for name, value in measured.items():
            page.fact(f"{lang}.{name}", value)
    page.fact("bytes", total)  # both models' files, as the site serves them
    page.fact("float32_bytes", float32)  # the same files with float32 weights
    page.fact("mb", total / 1e6)
    page.fact("float32_mb", float32 / 1e6)


JOBS = [Job("explorer", lambda page: page.draw(write), runs=tuple(RUNS.values()),
            draws=(Draw(write, reads=tuple(RUNS.values())),),
            files=("stage5_gpt/model.py", "stage5_gpt/data.py"))]
