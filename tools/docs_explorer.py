"""gen_docs jobs for the attention explorer: the trained stage-5 GPTs, exported for the browser.

The explorer page (docs/explorer.md, docs/assets/javascripts/explorer.js) runs the
built-in English and Chinese stage-5 models in the reader's browser. It reads each
model from two files under docs/generated/explorer/ (the docs build ships that folder):

    <lang>.json  a small header: the model's config, its vocabulary, where each tensor
                 sits in the weights file, and where the weights came from
    <lang>.bin   every tensor of the checkpoint's state_dict, in state_dict order,
                 as little-endian float32 (the trained numbers, not rounded)

The models are the ones the ``stage5_en`` and ``stage5_zh`` jobs train: when such a
job ran in the same ``gen_docs.py`` invocation its checkpoint is exported; otherwise
this job trains with the very same command (same flags, same seed) first.

The header records a hash of the job's inputs (``stage5_gpt/`` and this file) and of
the weights file, so a test can tell that an export is stale: see ``problems``.

    python tools/gen_docs.py --only explorer_en explorer_zh
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

FORMAT = "gpt-stages-explorer"
VERSION = 1
FOLDER = "explorer"  # under docs/generated/
LANGS = {"en": "stage5_en", "zh": "stage5_zh"}  # language -> the gen_docs job that trains it
EXAMPLES = {"en": "TEACHER: Pip the fox", "zh": "小狐狸说"}  # the prompt the page starts with


def export(ckpt_path: Path, out_dir: Path, lang: str, source: dict | None = None) -> dict:
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
    header = {
        "format": FORMAT,
        "version": VERSION,
        "lang": lang,
        "config": dict(ckpt["config"]),
        "vocab": tokenizer.chars,
        "example": EXAMPLES.get(lang, ""),
        "dtype": "float32",
        "weights": f"{lang}.bin",
        "weights_bytes": len(blob),
        "weights_sha256": hashlib.sha256(blob).hexdigest(),
        "tensors": tensors,
        "checkpoint": {"sha256": hashlib.sha256(Path(ckpt_path).read_bytes()).hexdigest(),
                       "step": ckpt.get("step"), "best_val": ckpt.get("best_val"),
                       "best_step": ckpt.get("best_step")},
        **(source or {}),
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"{lang}.bin").write_bytes(blob)
    (out_dir / f"{lang}.json").write_text(json.dumps(header, ensure_ascii=False, indent=1) + "\n",
                                          encoding="utf-8")
    return header


def load_export(json_path: Path):
    """The exported model back in PyTorch: (GPT in eval mode, vocabulary, header).

    The browser test computes its reference logits with this, from the very files the
    page reads."""
    import numpy as np
    import torch

    from stage5_gpt.model import GPT, GPTConfig

    header = json.loads(Path(json_path).read_text(encoding="utf-8"))
    if header.get("format") != FORMAT or header.get("version") != VERSION:
        raise ValueError(f"{json_path} is not a {FORMAT} v{VERSION} header")
    blob = (Path(json_path).parent / header["weights"]).read_bytes()
    model = GPT(GPTConfig(**header["config"]))
    state = {}
    for t in header["tensors"]:
        n = int(np.prod(t["shape"])) if t["shape"] else 1
        a = np.frombuffer(blob, dtype="<f4", count=n, offset=t["offset"]).reshape(t["shape"])
        state[t["name"]] = torch.from_numpy(a.copy())
    model.load_state_dict(state)
    return model.eval(), header["vocab"], header


def problems(json_path: Path, inputs_sha256: str | None = None) -> list[str]:
    """Why an export cannot be trusted ([] when it can): a missing or damaged weights
    file, or (given the current inputs hash of its job) weights of older sources."""
    path = Path(json_path)
    if not path.is_file():
        return [f"{path.name} is missing"]
    header = json.loads(path.read_text(encoding="utf-8"))
    if header.get("format") != FORMAT or header.get("version") != VERSION:
        return [f"{path.name} is not a {FORMAT} v{VERSION} header"]
    found = []
    weights = path.parent / header["weights"]
    if not weights.is_file():
        return [f"{header['weights']} is missing"]
    blob = weights.read_bytes()
    if len(blob) != header["weights_bytes"]:
        found.append(f"{weights.name} has {len(blob)} bytes, the header says "
                     f"{header['weights_bytes']}")
    elif hashlib.sha256(blob).hexdigest() != header["weights_sha256"]:
        found.append(f"{weights.name} is not the file the header describes (sha256 differs)")
    end = max((t["offset"] + 4 * _numel(t["shape"]) for t in header["tensors"]), default=0)
    if end != header["weights_bytes"]:
        found.append(f"the tensors cover {end} bytes of {header['weights_bytes']}")
    if inputs_sha256 is not None and header.get("inputs_sha256") != inputs_sha256:
        found.append(f"{path.name} was exported from other sources than the current ones "
                     f"(stage5_gpt/ or tools/docs_explorer.py changed): it is stale")
    return found


def _numel(shape: list[int]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def explorer_job(work: Path, job, gen_docs, lang: str) -> None:
    """Export the checkpoint of the job that trains ``lang`` (training it here if that job
    did not run in this invocation)."""
    trainer = next(j for j in gen_docs.JOBS if j.name == LANGS[lang])
    out, flags = trainer.params["out"], trainer.params["flags"]
    ckpt = work / out / "best.pt"
    if ckpt.is_file():
        print(f"  exporting the checkpoint job {trainer.name} just trained: {out}/best.pt")
    else:
        gen_docs.run(work, "stage5_gpt.train", "--out-dir", out, *flags)
    sys.path.insert(0, str(gen_docs.ROOT))
    command = " ".join(["python -m stage5_gpt.train --out-dir", out, *flags])
    header = export(ckpt, gen_docs.GEN / FOLDER, lang, source={
        "command": command,
        "inputs_sha256": gen_docs.input_hashes([job])[job.name],
    })
    print(f"  {FOLDER}/{lang}.bin: {header['weights_bytes']:,} bytes, "
          f"best val loss {header['checkpoint']['best_val']:.4f}")


def jobs(Job, gen_docs) -> list:
    out = []
    for lang in LANGS:
        def action(work: Path, job, lang=lang) -> None:  # gen_docs calls action(work, job)
            explorer_job(work, job, gen_docs, lang)
        action.__name__ = f"explorer_{lang}"
        out.append(Job(
            f"explorer_{lang}", f"export the {lang} stage-5 GPT for the attention explorer",
            action, stages=("stage5_gpt",), files=("tools/docs_explorer.py",),
            outputs=(f"{FOLDER}/{lang}.json", f"{FOLDER}/{lang}.bin"), seconds=60))
    return out
