"""A whole corpus as token ids in little memory: ``encode_compact``.

Skip this file on a first reading: it computes ``torch.tensor(tokenizer.encode(text))``,
the lesson's encoding, in a fraction of the memory. That line first builds a Python
list, 8 bytes per character for the pointer and 32 more for every id above 256 (one
Python int each), then a tensor of 8 bytes per character. Here the ids go straight
into a tensor of the smallest integer type that holds them (1 byte per character for
up to 256 distinct characters), a chunk of text at a time.

How: the vocabulary is sorted, so the id of a character is the rank of its code point
among the vocabulary's code points. A chunk of text encoded as UTF-32 is one int32
per character; ``torch.searchsorted`` finds each one's rank.

``python tools/memory.py`` measures the peak memory of ``Corpus.load`` on a 50 MB text,
which uses this, and with ``--plain`` the same load with the lesson's line instead:
here about 2 and 17 times the file's size (tests/test_stage1_data.py checks the first
stays under 4).

>>> tok = CharTokenizer.from_text("hello")
>>> encode_compact(tok, "hell")
tensor([1, 0, 2, 2], dtype=torch.uint8)
"""

from __future__ import annotations

import sys

import torch

from .tokenizer import CharTokenizer

CHUNK = 1 << 16  # characters encoded at a time: about a megabyte of temporaries
UTF32 = f"utf-32-{sys.byteorder[0]}e"  # this machine's byte order: 4 bytes read as one int32


def smallest_dtype(vocab_size: int) -> torch.dtype:
    """The smallest integer dtype that holds every id below ``vocab_size``."""
    if vocab_size <= 256:
        return torch.uint8
    if vocab_size <= 2**15:
        return torch.int16
    return torch.int32  # Unicode has fewer than 2**31 characters


def encode_compact(tokenizer: CharTokenizer, text: str) -> torch.Tensor:
    """The ids of ``tokenizer.encode(text)`` as an (N,) tensor of ``smallest_dtype``; an
    unknown character raises the same error as ``encode``."""
    codes = torch.tensor([ord(c) for c in tokenizer.chars], dtype=torch.int32)  # (V,), sorted
    ids = torch.empty(len(text), dtype=smallest_dtype(tokenizer.vocab_size))
    unknown: list[tuple[int, str]] = []
    total = 0
    for start in range(0, len(text), CHUNK):
        chunk = text[start : start + CHUNK]
        utf32 = bytearray(chunk.encode(UTF32, "surrogatepass"))
        points = torch.frombuffer(utf32, dtype=torch.int32)  # one code point per character
        pos = torch.searchsorted(codes, points, out_int32=True).clamp_(max=len(codes) - 1)
        bad = codes[pos] != points  # not in the vocabulary
        if bad.any():
            total += int(bad.sum())
            where = bad.nonzero().flatten()[: 10 - len(unknown)].tolist()
            unknown += [(start + i, chunk[i]) for i in where]
        ids[start : start + len(chunk)] = pos
    if total:
        raise tokenizer._unknown_error(unknown, total)
    return ids
