"""The attention explorer's models: the trained stage-5 GPTs, exported for the browser.

The explorer page (docs/explorer.md, docs/assets/javascripts/explorer.js) runs them in
the reader's browser from two files each in docs/generated/explorer/: ``<lang>.json`` (the
config, the vocabulary, where each tensor sits in the weights file) and ``<lang>.bin``
(every tensor of the state_dict, in order, as little-endian float16). Three models: the
built-in English and Chinese corpora (``en``, ``zh``) and the Tang poems (``tang``).
float16 because the Chinese and Tang models' thousands of embedding rows make the three
models about 15 MB in float32, more than the site's 8 MiB for them (tests/test_explorer.py);
the facts say what the rounding costs (loss, largest logit change, how often the top next
character stays), and what each model expects after a line of Li Bai (VERSE), and why.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

from .. import Draw, Job, Page, store
from .stage5 import CLASSIC_RUNS, RUNS

FORMAT, VERSION = "gpt-stages-explorer", 2
# The models the page runs: stage 5 at its defaults on the two built-in corpora, and on the
# Tang poems (the model a Chinese reader will try a line of verse on).
MODELS = {**RUNS, "tang": CLASSIC_RUNS["tang"]}
EXAMPLES = {"en": "TEACHER: Pip the fox", "zh": "小狐狸说", "tang": "床前明月光，疑是地上"}
VERSE = "床前明月光，疑是地上"  # Li Bai's 静夜思: what comes next is 霜
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


def next_after(model, vocab: list[str], text: str) -> list[tuple[str, float]]:
    """Every character of the vocabulary with its probability of coming next after
    ``text``, most likely first, as the page computes them (temperature 1, no top-k):
    characters the vocabulary lacks are left out of ``text``, as the page leaves them out;
    none left, an empty list (the page then asks for a character the model knows)."""
    import torch

    ids = [vocab.index(c) for c in text if c in vocab][-model.config.block_size:]
    if not ids:
        return []
    with torch.no_grad():
        p = torch.softmax(model(torch.tensor([ids]))[0][0, -1].double(), dim=-1)
    return [(vocab[i], p[i].item()) for i in p.argsort(descending=True).tolist()]


def verse(page: Page, lang: str, model, vocab: list[str], train_text: str, k: int = 3) -> None:
    """What ``model`` (the float16 model the page runs) expects after VERSE: its ``k``
    likeliest next characters, and where 霜 (Li Bai's next character) stands; and what its
    training text holds that says why: how often 上 is followed by 的 and by 霜 there, and
    how often the line itself (…疑是地上霜) is in it."""
    ranked = next_after(model, vocab, VERSE)
    best = ranked[:k]
    frost = [(rank, p) for rank, (c, p) in enumerate(ranked, 1) if c == "霜"]
    page.fact(f"{lang}.verse_known", sum(c in vocab for c in VERSE))
    page.fact(f"{lang}.verse_next", best[0][0] if best else "")
    page.fact(f"{lang}.verse_p", best[0][1] if best else 0.0)
    # one string for both editions (they quote the same facts): 的 20.3% · ， 4.2% · 有 3.5%
    page.fact(f"{lang}.verse_top", " · ".join(f"{c} {p:.1%}" for c, p in best))
    page.fact(f"{lang}.knows_frost", "霜" in vocab)
    page.fact(f"{lang}.verse_frost_rank", frost[0][0] if frost else 0)
    page.fact(f"{lang}.verse_frost", frost[0][1] if frost else 0.0)
    page.fact(f"{lang}.shang_de", train_text.count("上的"))
    page.fact(f"{lang}.shang_frost", train_text.count("上霜"))
    page.fact(f"{lang}.frost_line", train_text.count(VERSE[-4:] + "霜"))
    page.fact(f"{lang}.train_chars", len(train_text))


def write(page: Page) -> None:
    from stage5_gpt.checkpoint import load_model
    from stage5_gpt.data import Corpus, load_text

    store.use_classic_corpora()  # the Tang model's validation windows read the Tang poems
    total = float32 = 0
    for lang, run in MODELS.items():
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
        rounded, vocab, _ = load_export(page.dir / f"{lang}.json")  # what the page runs
        text = load_text(lang)
        train_text = text[:len(Corpus.load(lang, 0.1, tokenizer).train)]  # a token a character
        verse(page, lang, rounded, vocab, train_text)  # every model, on one line of verse
    page.fact("models", len(MODELS))
    page.fact("bytes", total)  # every model's files, as the site serves them
    page.fact("float32_bytes", float32)  # the same files with float32 weights
    page.fact("mb", total / 1e6)
    page.fact("float32_mb", float32 / 1e6)


JOBS = [Job("explorer", lambda page: page.draw(write), runs=tuple(MODELS.values()),
            draws=(Draw(write, reads=tuple(MODELS.values())),),
            files=("stage5_gpt/model.py", "stage5_gpt/data.py"))]
