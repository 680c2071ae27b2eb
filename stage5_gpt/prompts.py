"""The prompts the figures look at: checked against the model, or picked from the data.

A prompt is a short text the model reads once so that we can look at what it
computes (attention weights, predictions). It must fit the model's context
(``block_size``) and use only characters of its vocabulary.
"""

from __future__ import annotations

import torch

from .bpe import BPETokenizer
from .data import load_text, split
from .errors import UserError
from .tokenizer import CharTokenizer

Tokenizer = CharTokenizer | BPETokenizer
GPT2_PROMPT = "Hello, I'm a language model,"  # GPT-2's own example: what --init-from reads


def default_prompt(text: str, length: int) -> str:
    """The first whole line of held-out (validation) text, cut to ``length`` characters."""
    _, val = split(torch.arange(len(text)))
    held_out = text[int(val[0]) :] if len(val) else text
    start = held_out.find("\n") + 1
    line = held_out[start:].lstrip("\n")[:length] or held_out[:length]
    return line


def prompt_from_checkpoint(ckpt: dict | None, length: int) -> str:
    """A line of held-out text from the data the checkpoint was trained on (GPT-2's own
    example sentence for --init-from, which has no checkpoint of ours)."""
    if ckpt is None:
        return GPT2_PROMPT
    data = ckpt.get("args", {}).get("data", "en")
    try:
        text = load_text(data)
    except UserError as e:
        raise UserError(f"cannot read the training text to pick a prompt ({e}); "
                        "pass one with --prompt.") from None
    return default_prompt(text, length)


def encode_prompt(model: torch.nn.Module, tokenizer: Tokenizer, prompt: str) -> torch.Tensor:
    """Check ``prompt`` fits the model and turn it into a (1, T) batch on the model's device."""
    block_size = model.config.block_size
    if not prompt:
        raise UserError("the prompt is empty; give at least one character")
    ids = tokenizer.encode(prompt)
    if len(ids) > block_size:
        raise UserError(
            f"the prompt has {len(ids)} {unit(tokenizer)}s but the model sees at most "
            f"block_size={block_size}; use a shorter --prompt."
        )
    device = next(model.parameters()).device
    return torch.tensor([ids], device=device)  # (1, T)


def pieces(tokenizer: Tokenizer, ids: list[int] | torch.Tensor) -> list[str]:
    """The text of each token: a character for this course's models, a piece of a word
    (or of a character's bytes) for GPT-2's BPE."""
    return [tokenizer.decode([int(i)]) for i in ids]


def unit(tokenizer: Tokenizer) -> str:
    """What one token is, to say so in messages: "character" or "token"."""
    return "character" if isinstance(tokenizer, CharTokenizer) else "token"
