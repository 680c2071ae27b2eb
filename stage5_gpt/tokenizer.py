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
from collections.abc import Iterable
from pathlib import Path

from .errors import UserError

FORMAT = "char-tokenizer"


class CharTokenizer:
    """Maps characters to integer ids and back."""

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

    def decode(self, ids: Iterable[int]) -> str:
        """List of ids -> text."""
        ids = [int(i) for i in ids]
        bad = [i for i in ids if not 0 <= i < self.vocab_size]
        if bad:
            raise UserError(f"token ids {bad[:10]} are outside 0..{self.vocab_size - 1}")
        return "".join(self.itos[i] for i in ids)

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
