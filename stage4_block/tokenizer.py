"""Character-level tokenizer: every distinct character of the corpus is one token.

The vocabulary is the sorted set of characters, so the ids are stable for a
given text. ``stoi`` maps a character to its id, ``itos`` maps back.

>>> tok = CharTokenizer.from_text("hello")
>>> tok.chars
['e', 'h', 'l', 'o']
>>> tok.encode("hell")
[1, 0, 2, 2]
>>> tok.decode([1, 0, 2, 2, 3])
'hello'
>>> try:
...     tok.encode("help")
... except UserError as e:
...     print(e)
1 unknown character not in the vocabulary of 4: 'p' at position 3. Use only characters that occur in the training text, or retrain on text that contains them.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable
from pathlib import Path

import torch

from .errors import UserError

FORMAT = "char-tokenizer"
UTF32 = f"utf-32-{sys.byteorder[0]}e"  # this machine's byte order: 4 bytes read as one int32


class CharTokenizer:
    """Maps characters to integer ids and back."""

    # --8<-- [start:vocab]
    def __init__(self, chars: Iterable[str]):
        chars = list(chars)
        if not chars:
            raise UserError("the vocabulary is empty: the text has no characters")
        if any(not isinstance(c, str) or len(c) != 1 for c in chars):
            raise UserError("every vocabulary entry must be exactly one character")
        if len(set(chars)) != len(chars):
            raise UserError("the vocabulary lists a character twice")
        self.chars: list[str] = sorted(chars)
        self.stoi: dict[str, int] = {ch: i for i, ch in enumerate(self.chars)}
        self.itos: dict[int, str] = dict(enumerate(self.chars))

    @classmethod
    def from_text(cls, text: str) -> CharTokenizer:
        return cls(set(text))

    @property
    def vocab_size(self) -> int:
        return len(self.chars)
    # --8<-- [end:vocab]

    # --8<-- [start:encode]
    def encode(self, text: str) -> list[int]:
        """Text -> list of ids. Raises ``UserError`` naming every unknown character."""
        try:
            return [self.stoi[c] for c in text]
        except KeyError:
            unknown = [(i, c) for i, c in enumerate(text) if c not in self.stoi]
            raise self._unknown_error(unknown[:10], len(unknown)) from None

    def _unknown_error(self, first: list[tuple[int, str]], total: int) -> UserError:
        """The error for ``total`` unknown characters; ``first`` lists (position, char) pairs."""
        shown = ", ".join(f"{c!r} at position {i}" for i, c in first)
        more = f" (and {total - len(first)} more)" if total > len(first) else ""
        noun = "character" if total == 1 else "characters"
        return UserError(
            f"{total} unknown {noun} not in the vocabulary of {self.vocab_size}: "
            f"{shown}{more}. Use only characters that occur in the training text, "
            "or retrain on text that contains them."
        )
    # --8<-- [end:encode]

    # --8<-- [start:encode_tensor]
    CHUNK = 1 << 16  # characters encoded at a time: about a megabyte of temporaries

    @property
    def dtype(self) -> torch.dtype:
        """The smallest integer dtype that holds every id."""
        if self.vocab_size <= 256:
            return torch.uint8
        if self.vocab_size <= 2**15:
            return torch.int16
        return torch.int32  # Unicode has fewer than 2**31 characters

    def encode_tensor(self, text: str) -> torch.Tensor:
        """Text -> (N,) tensor of the same ids as ``encode``, in the small ``self.dtype``.

        For whole corpora: ``torch.tensor(encode(text))`` builds a Python list first
        (8 bytes per character, more for ids above 256) and then 8 bytes per character
        of int64. Here the ids go straight into a tensor of 1 byte per character (for
        up to 256 distinct characters), a chunk of text at a time. The vocabulary is
        sorted, so the id of a character is the rank of its code point among the
        vocabulary's code points: ``torch.searchsorted`` finds it.

        >>> tok = CharTokenizer.from_text("hello")
        >>> tok.encode_tensor("hell")
        tensor([1, 0, 2, 2], dtype=torch.uint8)
        """
        codes = torch.tensor([ord(c) for c in self.chars], dtype=torch.int32)  # (V,), sorted
        ids = torch.empty(len(text), dtype=self.dtype)
        unknown: list[tuple[int, str]] = []
        total = 0
        for start in range(0, len(text), self.CHUNK):
            chunk = text[start : start + self.CHUNK]
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
            raise self._unknown_error(unknown, total)
        return ids
    # --8<-- [end:encode_tensor]

    # --8<-- [start:decode]
    def decode(self, ids: Iterable[int]) -> str:
        """List of ids -> text."""
        ids = [int(i) for i in ids]
        bad = [i for i in ids if not 0 <= i < self.vocab_size]
        if bad:
            raise UserError(f"token ids {bad[:10]} are outside 0..{self.vocab_size - 1}")
        return "".join(self.itos[i] for i in ids)
    # --8<-- [end:decode]

    # JSON, not pickle: a vocabulary file is data anybody can read and trust.
    def to_dict(self) -> dict:
        return {"format": FORMAT, "version": 1, "chars": self.chars}

    @classmethod
    def from_dict(cls, d: object) -> CharTokenizer:
        if not isinstance(d, dict) or d.get("format") != FORMAT or "chars" not in d:
            raise UserError(f"not a {FORMAT} vocabulary (expected keys 'format' and 'chars')")
        if not isinstance(d["chars"], list):
            raise UserError(f"'chars' of a {FORMAT} vocabulary must be a list of characters")
        return cls(d["chars"])

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), ensure_ascii=False), encoding="utf-8")

    @classmethod
    def load(cls, path: str | Path) -> CharTokenizer:
        try:
            d = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise UserError(f"cannot read vocabulary file {path}: {e}") from None
        return cls.from_dict(d)

    def __repr__(self) -> str:
        return f"CharTokenizer(vocab_size={self.vocab_size})"
