"""OpenAI's GPT-2 running in this stage's GPT: python -m <stage>.gpt2

Stage 5 is GPT-2's architecture under GPT-2's own names
(``transformer.h.0.attn.c_attn.weight`` ...), so GPT-2's checkpoint loads into
``GPT`` tensor for tensor. One thing differs in how the weights are stored: GPT-2
keeps its four projection matrices per block as ``Conv1D`` weights, shaped
(in, out), where ``nn.Linear`` keeps (out, in), so ``from_gpt2`` transposes them.
GPT-2's tokenizer is the byte-level BPE of stage 1 (``bpe.py``), read from
GPT-2's own ``vocab.json`` and ``merges.txt``.

``--init-from gpt2`` (in sample, visualize, lens and inspect) downloads GPT-2 small
once (about 550 MB, from Hugging Face at a pinned revision, every file checked by
its sha256) into the cache folder. ``--init-from FOLDER`` reads a copy in the same
layout: ``config.json``, ``model.safetensors``, ``vocab.json``, ``merges.txt``.
The weights come as a safetensors file, read by the ``safetensors`` package:
``pip install -e ".[gpt2]"``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from .bpe import BPETokenizer
from .checkpoint import default_checkpoint, load_model
from .download import cache_dir, download
from .errors import UserError
from .model import GPT, GPTConfig
from .tokenizer import CharTokenizer

REPO = "openai-community/gpt2"  # GPT-2 small on Hugging Face
REVISION = "607a30d783dfa663caf39e06633721c8d4cfcd7e"  # pinned: these files, never others
URL = f"https://huggingface.co/{REPO}/resolve/{REVISION}/{{name}}"
FILES = {  # name -> sha256
    "config.json": "0daed7749b4f02b8f76240d5444551d7b08712dab4d0adb8239c56ba823bb7b4",
    "vocab.json": "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783",
    "merges.txt": "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5",
    "model.safetensors": "248dfc3911869ec493c76e65bf2fcf7f615828b0254c12b473182f0f81d3a707",
}
TRANSPOSED = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")
DROPPED = (".attn.bias", ".attn.masked_bias")  # the causal mask, which older files store
# GPT-2 small's sizes (its config.json), for printing the mapping without the weights.
SMALL = dict(vocab_size=50257, block_size=1024, n_layer=12, n_head=12, n_embd=768)


def config_from_hf(hf: dict) -> GPTConfig:
    """Our GPTConfig for a Hugging Face GPT-2 ``config.json``; a setting of GPT-2's that
    this GPT does not have is refused by name."""
    unlike = {"activation_function": ("gelu_new", "gelu_pytorch_tanh"),
              "layer_norm_epsilon": (1e-5,), "scale_attn_weights": (True,),
              "scale_attn_by_inverse_layer_idx": (False,), "reorder_and_upcast_attn": (False,),
              "tie_word_embeddings": (True,)}
    for key, ok in unlike.items():
        if key in hf and hf[key] not in ok:
            raise UserError(f"config.json has {key} = {hf[key]!r}; stage 5's GPT computes "
                            f"{ok[0]!r} (GPT-2's own setting)")
    try:
        return GPTConfig(vocab_size=hf["vocab_size"], block_size=hf["n_positions"],
                         n_layer=hf["n_layer"], n_head=hf["n_head"], n_embd=hf["n_embd"],
                         dropout=0.0, activation="gelu", bias=True, tie_weights=True)
    except KeyError as e:
        raise UserError(f"config.json has no {e.args[0]}: is it a GPT-2 config?") from None


def from_gpt2(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A GPT-2 state dict (Hugging Face names) as this stage's GPT's: the Conv1D weights
    transposed, the mask buffers dropped, ``lm_head`` the token embedding (tied)."""
    ours = {}
    for name, t in state.items():
        if name.endswith(DROPPED):
            continue
        name = name if name.startswith(("transformer.", "lm_head.")) else f"transformer.{name}"
        ours[name] = t.T.contiguous() if name.endswith(TRANSPOSED) else t
    ours.setdefault("lm_head.weight", ours["transformer.wte.weight"])  # tied in GPT-2
    return ours


def load_gpt2(folder: Path, device: str = "cpu") -> tuple[GPT, BPETokenizer]:
    """A GPT-2 folder (config.json, model.safetensors, vocab.json, merges.txt) -> our GPT
    in eval mode, and GPT-2's tokenizer."""
    missing = [name for name in FILES if not (folder / name).is_file()]
    if missing:
        raise UserError(f"{folder} lacks {', '.join(missing)}: --init-from FOLDER needs GPT-2's "
                        f"{', '.join(FILES)} (as on huggingface.co/{REPO})")
    try:
        from safetensors.torch import load_file
    except ImportError:
        raise UserError('GPT-2\'s weights are a safetensors file: pip install -e ".[gpt2]" '
                        "(or pip install safetensors), then try again.") from None
    try:
        hf = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        state = load_file(folder / "model.safetensors")
    except (OSError, ValueError) as e:  # safetensors raises its own errors, ValueErrors
        raise UserError(f"cannot read GPT-2's files in {folder}: {str(e)[:200]}") from None
    model = GPT(config_from_hf(hf))
    try:
        model.load_state_dict(from_gpt2(state))
    except RuntimeError as e:
        raise UserError(f"{folder}/model.safetensors does not fit its config.json: "
                        f"{str(e)[:300]}") from None
    tokenizer = BPETokenizer.load(folder / "vocab.json", folder / "merges.txt")
    return model.to(device).eval(), tokenizer


def fetch_gpt2() -> Path:
    """GPT-2 small's four files in the cache folder, downloaded once and checked."""
    folder = cache_dir() / f"gpt2-{REVISION[:12]}"
    for name, sha256 in FILES.items():
        download(URL.format(name=name), folder / name, sha256, local="--init-from FOLDER")
    return folder


def init_from(name: str, device: str = "cpu") -> tuple[GPT, BPETokenizer]:
    """``--init-from``: "gpt2" (downloaded once) or a folder in the same layout."""
    folder = fetch_gpt2() if name == "gpt2" else Path(name)
    if name != "gpt2" and not folder.is_dir():
        raise UserError(f"--init-from {name}: not a folder. Give gpt2 (GPT-2 small, downloaded "
                        "once) or a folder with GPT-2's config.json, model.safetensors, "
                        "vocab.json and merges.txt.")
    return load_gpt2(folder, device)


def add_init_from(parser: argparse.ArgumentParser) -> None:
    """The --init-from flag of the tools that read a trained model."""
    parser.add_argument("--init-from", metavar="gpt2|FOLDER", default=None,
                        help="OpenAI's GPT-2 small instead of --ckpt: gpt2 downloads it once "
                             "(about 550 MB); FOLDER reads a copy in the same layout")


def load_for_tool(args: argparse.Namespace, device: str
                  ) -> tuple[GPT, CharTokenizer | BPETokenizer, dict | None, Path]:
    """The model a tool reads: GPT-2 (--init-from, no checkpoint of ours) or --ckpt.
    Returns the model in eval mode, its tokenizer, the checkpoint and where it came from."""
    if getattr(args, "init_from", None):
        model, tokenizer = init_from(args.init_from, device)
        return model, tokenizer, None, fetch_gpt2() if args.init_from == "gpt2" else Path(args.init_from)
    path = default_checkpoint(args.ckpt)
    model, tokenizer, ckpt = load_model(path, device)
    return model, tokenizer, ckpt, path


def mapping(config: GPTConfig) -> list[tuple[str, tuple[int, ...], str]]:
    """(our name, our shape, GPT-2's name and shape) for every weight of one block and the rest."""
    model = GPT(config)
    rows = []
    for name, p in model.named_parameters():  # a tied weight once: lm_head is wte
        if ".h." in name and ".h.0." not in name:
            continue  # every block is like block 0
        shape = tuple(p.shape)
        theirs = f"{name} {shape[::-1]}, transposed" if name.endswith(TRANSPOSED) else name
        rows.append((name, shape, theirs))
    return rows


def main(argv: list[str] | None = None) -> None:
    argparse.ArgumentParser(
        prog=f"python -m {__package__}.gpt2",
        description="Print how GPT-2 small's weights map onto stage 5's GPT: each of our "
                    "tensors, its shape, and its name in GPT-2's checkpoint. Nothing is "
                    "downloaded: the shapes come from GPT-2 small's sizes.").parse_args(argv)
    config = GPTConfig(**SMALL)
    with torch.device("meta"):  # shapes only: no memory, no weights
        rows = mapping(config)
        params = sum(p.numel() for p in GPT(config).parameters())
    print(f"{'stage 5 (ours)':<34} {'shape':<14} GPT-2's checkpoint")
    for name, shape, theirs in rows:
        print(f"{name:<34} {str(shape):<14} {theirs}")
    print(f"(transformer.h.1 to h.{config.n_layer - 1} like h.0; lm_head.weight is "
          f"transformer.wte.weight: tied)\n{params:,} parameters. Run it: "
          f"python -m {__package__}.sample --init-from gpt2 --prompt \"Hello, I'm a language model,\"")


if __name__ == "__main__":
    sys.exit(main())
