"""GPT-2's byte-level BPE tokenizer, learned from a corpus: python -m <stage>.bpe

The character tokenizer gives every character of the training text one id. GPT-2's
tokenizer is built differently in four ways, and this module builds it the same way,
down to the ids: trained on the same text, it encodes like Hugging Face's GPT-2
tokenizer given the files it saves.

**It starts from bytes, not characters.** UTF-8 writes any text as bytes: an
English letter is one byte, a Chinese character three, an emoji four. With the
256 byte values as the first 256 tokens, every text can be encoded, and no
character is ever unknown: one the training text never had is simply its bytes.

**It merges frequent pairs (byte pair encoding, BPE).** Training counts every
pair of neighbouring tokens in the text, gives the most frequent pair a new id
(256 for the first merge, 257 for the next, ...) and replaces each occurrence of
the pair with it; then counts again. Each merge makes the text one token shorter
wherever the pair occurs. After a few hundred merges, ``t`` + ``h`` is ``th``,
``th`` + ``e`` is ``the``, and the three bytes of ``的`` are one token. The list
of merges, in the order they were learned, *is* the tokenizer: ``encode`` replays
them on new text, always the earliest-learned (lowest rank) pair first.

**It never merges across words.** Before counting, GPT-2 splits the text into
chunks with a regular expression (``GPT2_SPLIT_PATTERN``): a word with the space
before it, a number, a run of punctuation, a run of whitespace, and the endings
``'s 't 're 've 'm 'll 'd``. Merges happen only inside a chunk, so the
vocabulary is spent on words and not on ``dog.`` and ``dog!`` and ``dog?``. A
Chinese clause between two punctuation marks is all letters, so it is a single
chunk, and merges there can join characters into words.

**It writes bytes as printable characters.** GPT-2's files, ``vocab.json``
(token -> id) and ``merges.txt`` (one merge ``a b`` per line), are text; a raw
byte such as a space, a newline or half of a Chinese character cannot stand in
them. So ``bytes_to_unicode`` gives each of the 256 bytes a visible character:
printable ones stand for themselves, the other 68 are shifted to 256 and up.
A space is ``Ġ`` and a newline ``Ċ``, which is why GPT-2's tokens look like
``Ġthe``. This module reads and writes those files, GPT-2's own included.

>>> tok = BPETokenizer.train("the cat sat on the mat, the cat ate", num_merges=4)
>>> [tok.vocab[i] for i in range(256, tok.vocab_size)]  # ids 256, 257, ... in learned order
[b'at', b'he', b'the', b' c']
>>> ids = tok.encode("the hat")  # " hat" never occurred: it is built from smaller pieces
>>> ids, [tok.vocab[i] for i in ids]
([258, 32, 104, 256], [b'the', b' ', b'h', b'at'])
>>> tok.decode(ids)
'the hat'
>>> tok.encode("猫")  # never seen: its three UTF-8 bytes
[231, 140, 171]
>>> tok.decode([231, 140])  # two of those bytes are no character: the replacement mark
'�'
>>> SPLIT.findall("Hello world, it's 2024!\\n")
['Hello', ' world', ',', ' it', "'s", ' 2024', '!', '\\n']
>>> SPLIT.findall("IT'S")  # the endings are lower case only, as in GPT-2
['IT', "'", 'S']
>>> to_printable(b" the\\n")  # how vocab.json and merges.txt write these bytes
'ĠtheĊ'

One known difference from Hugging Face's tokenizers: which characters are letters
(``\\p{L}``) comes from the Unicode tables of the ``regex`` package, as it did in
GPT-2's own code. Letters added after Unicode 16.0 (new scripts such as Sidetic,
Tai Yo or Seal, new CJK ideographs) are letters to a recent ``regex`` but unassigned
to Hugging Face's Rust library, which puts them in the symbol class
``[^\\s\\p{L}\\p{N}]``, so text in them splits into other chunks there. Every other
character, control characters and odd spaces included, splits the same way.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections import Counter, defaultdict
from itertools import pairwise
from pathlib import Path

import regex  # not re: re has no \p{L} (any letter) or \p{N} (any digit)

from .data import DATA_HELP, load_text
from .errors import UserError, utf8_output

Pair = tuple[int, int]  # two neighbouring token ids

# GPT-2's pre-tokenising pattern (its encoder.py): an ending such as 's, or letters,
# digits, other symbols, each with at most one space in front; then runs of whitespace
# (\s+(?!\S) leaves the last space of a run to the word after it).
GPT2_SPLIT_PATTERN = (
    r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
)
SPLIT = regex.compile(GPT2_SPLIT_PATTERN)


def bytes_to_unicode() -> dict[int, str]:
    """Each of the 256 byte values -> a printable character, exactly as GPT-2 does it.

    The 188 bytes that are printable in Latin-1 stand for themselves; the other 68
    (control bytes, the space, 0x7f-0xa0 and 0xad) get chr(256), chr(257), ... in order.

    >>> table = bytes_to_unicode()
    >>> table[ord("A")], table[ord(" ")], table[ord("\\n")], table[0xE4]
    ('A', 'Ġ', 'Ċ', 'ä')
    """
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1),
                 *range(ord("®"), ord("ÿ") + 1)]
    table = {b: chr(b) for b in printable}
    shifted = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + shifted)
            shifted += 1
    return dict(sorted(table.items()))


BYTE_TO_CHAR = bytes_to_unicode()
CHAR_TO_BYTE = {c: b for b, c in BYTE_TO_CHAR.items()}


def to_printable(token: bytes) -> str:
    """A token's bytes as vocab.json and merges.txt write them: b" a" -> 'Ġa'."""
    return "".join(BYTE_TO_CHAR[b] for b in token)


def from_printable(text: str) -> bytes:
    """The inverse of ``to_printable``: 'Ġa' -> b" a"."""
    return bytes(CHAR_TO_BYTE[c] for c in text)


def merge(ids: list[int], pair: Pair, new_id: int) -> list[int]:
    """Replace every occurrence of ``pair`` in ``ids``, left to right, by ``new_id``.

    >>> merge([1, 2, 3, 1, 2], (1, 2), 4)
    [4, 3, 4]
    """
    out = []
    i = 0
    while i < len(ids):
        if i + 1 < len(ids) and (ids[i], ids[i + 1]) == pair:
            out.append(new_id)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


def merge_with_changes(ids: list[int], pair: Pair, new_id: int
                       ) -> tuple[list[int], list[tuple[Pair, int]]]:
    """``merge``, and how the pair counts of ``ids`` change: only pairs next to a merge do.

    ``x a b y`` -> ``x N y`` loses (x, a) and (b, y) and gains (x, N) and (N, y). The
    merged pair (a, b) itself is not listed: training drops it altogether.

    >>> merge_with_changes([7, 1, 2, 9], (1, 2), 4)
    ([7, 4, 9], [((7, 1), -1), ((7, 4), 1), ((2, 9), -1), ((4, 9), 1)])
    """
    a, b = pair
    out: list[int] = []
    changes: list[tuple[Pair, int]] = []
    i = 0
    while i < len(ids):
        if i + 1 < len(ids) and (ids[i], ids[i + 1]) == pair:
            if out:  # a left neighbour: (x, a) -> (x, N); x is an N itself in "a b a b"
                changes += [((ids[i - 1], a), -1), ((out[-1], new_id), +1)]
            # A right neighbour: (b, y) -> (N, y), unless y starts the next merge, which
            # counts that pair as its left neighbour.
            if i + 2 < len(ids) and ids[i + 2 : i + 4] != [a, b]:
                changes += [((b, ids[i + 2]), -1), ((new_id, ids[i + 2]), +1)]
            out.append(new_id)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out, changes


def learn_merges(text: str, num_merges: int) -> list[Pair]:
    """The first ``num_merges`` merges of byte-level BPE on ``text``, in the order learned.

    Merge ``i`` makes token ``256 + i``. Each step merges the most frequent pair; of
    pairs as frequent, the one with the smallest ids, so the merges depend on the text
    only. Stops early when every chunk has become one token.

    Counting every pair again after each merge is simple but slow: most of a second per
    merge on the Chinese corpus, minutes for 300. Here the counts are kept up to date
    instead: a merge changes only the chunks that hold the pair, and in them only the
    pairs next to each merge (``merge_with_changes``), so 300 merges take seconds.
    """
    if num_merges < 0:
        raise UserError(f"the number of merges must be 0 or more, got {num_merges}")
    # Each distinct chunk once, with how often it occurs: " the" is merged once, not 5,000 times.
    chunk_counts = Counter(SPLIT.findall(text))
    words = [list(chunk.encode("utf-8")) for chunk in chunk_counts]  # token ids of each chunk
    weights = list(chunk_counts.values())  # how often each chunk occurs
    counts: Counter[Pair] = Counter()  # pair -> occurrences in the whole text
    holders: defaultdict[Pair, set[int]] = defaultdict(set)  # pair -> chunks that may hold it
    for w, ids in enumerate(words):
        for p in pairwise(ids):
            counts[p] += weights[w]
            holders[p].add(w)

    merges: list[Pair] = []
    for new_id in range(256, 256 + num_merges):
        if not counts:
            break  # every chunk is a single token: nothing left to merge
        pair = min(counts, key=lambda p: (-counts[p], p))  # most frequent, then smallest ids
        for w in holders.pop(pair):
            words[w], changes = merge_with_changes(words[w], pair, new_id)
            for p, sign in changes:
                counts[p] += sign * weights[w]
                if sign > 0:
                    holders[p].add(w)
                elif counts[p] == 0:
                    del counts[p]  # gone from the text: never pick it
        del counts[pair]
        merges.append(pair)
    return merges


class BPETokenizer:
    """Byte-level BPE: text -> UTF-8 bytes -> token ids, by the merges, and back.

    ``vocab`` maps each id to its bytes; ``merges`` maps a pair of ids to the id it
    becomes, in rank order (the dict's order: rank 0 was learned first). A token that is
    neither a byte nor made by a merge, such as GPT-2's ``<|endoftext|>``, is in
    ``vocab`` for decoding, but ``encode`` never produces it.
    """

    def __init__(self, vocab: dict[int, bytes], merges: dict[Pair, int]):
        self.vocab = vocab
        self.merges = merges
        self.ranks = {pair: rank for rank, pair in enumerate(merges)}
        # The id of each byte: the byte itself when trained here, not in GPT-2's vocab.json.
        single = {token[0]: i for i, token in vocab.items() if len(token) == 1}
        missing = [b for b in range(256) if b not in single]
        if missing:
            raise UserError(f"the vocabulary has no token for byte {missing[0]:#04x} "
                            f"({BYTE_TO_CHAR[missing[0]]!r}) and {len(missing) - 1} other "
                            "bytes; byte-level BPE needs all 256 to encode any text")
        self.byte_ids = [single[b] for b in range(256)]
        self.cache: dict[str, list[int]] = {}  # chunk -> ids: each word is merged once

    @classmethod
    def train(cls, text: str, num_merges: int) -> BPETokenizer:
        """Learn ``num_merges`` merges from ``text``; ids 0..255 are the bytes."""
        vocab = {b: bytes([b]) for b in range(256)}
        merges = {}
        for new_id, (a, b) in enumerate(learn_merges(text, num_merges), start=256):
            vocab[new_id] = vocab[a] + vocab[b]
            merges[a, b] = new_id
        return cls(vocab, merges)

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    def encode(self, text: str) -> list[int]:
        """Text -> ids: split into chunks, then merge each chunk's bytes."""
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as e:  # a lone surrogate, e.g. from undecodable argv bytes
            raise UserError(f"the text has a character UTF-8 cannot encode ({e.object[e.start]!r} "
                            f"at position {e.start}): pass text in UTF-8") from None
        ids = []
        for chunk in SPLIT.findall(text):
            if chunk not in self.cache:
                self.cache[chunk] = self.encode_chunk(chunk.encode("utf-8"))
            ids.extend(self.cache[chunk])
        return ids

    def encode_chunk(self, chunk: bytes) -> list[int]:
        """One chunk's bytes -> ids, as GPT-2's ``bpe()`` does it: of the neighbouring
        pairs that have a merge, apply the one learned first, everywhere; repeat."""
        ids = [self.byte_ids[b] for b in chunk]
        while len(ids) >= 2:
            pair = min(pairwise(ids), key=lambda p: self.ranks.get(p, math.inf))
            if pair not in self.ranks:
                break  # no pair left that was ever merged
            ids = merge(ids, pair, self.merges[pair])
        return ids

    def decode(self, ids: list[int]) -> str:
        """Ids -> text. A token can hold part of a character, so the joined bytes are
        decoded with ``errors="replace"``: bytes that make no character become '�'."""
        try:
            data = b"".join(self.vocab[int(i)] for i in ids)
        except KeyError as e:
            raise UserError(f"token id {e.args[0]} is not in the vocabulary (ids 0.."
                            f"{self.vocab_size - 1}); was it made by another tokenizer?"
                            ) from None
        return data.decode("utf-8", errors="replace")

    # --- GPT-2's files: vocab.json (token -> id) and merges.txt (one merge a line) ----

    def save(self, folder: str | Path) -> None:
        """Write ``vocab.json`` and ``merges.txt`` into ``folder``, in GPT-2's format."""
        folder = Path(folder)
        vocab = {to_printable(token): i for i, token in sorted(self.vocab.items())}
        lines = [f"{to_printable(self.vocab[a])} {to_printable(self.vocab[b])}"
                 for a, b in self.merges]
        try:
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "vocab.json").write_text(  # indent=0: one token a line
                json.dumps(vocab, ensure_ascii=False, indent=0) + "\n", encoding="utf-8")
            (folder / "merges.txt").write_text(
                "\n".join(["#version: 0.2", *lines]) + "\n", encoding="utf-8")
        except OSError as e:
            raise UserError(f"cannot write vocab.json and merges.txt into {folder}: {e}"
                            ) from None

    @classmethod
    def load(cls, vocab_path: str | Path, merges_path: str | Path) -> BPETokenizer:
        """Read GPT-2's ``vocab.json`` and ``merges.txt``, or the ones ``save`` wrote."""
        vocab_path, merges_path = Path(vocab_path), Path(merges_path)
        try:
            token_ids = json.loads(read_text(vocab_path))
        except json.JSONDecodeError as e:
            raise UserError(f"{vocab_path} is not valid JSON ({e.msg}, line {e.lineno}); "
                            'vocab.json maps each token to its id: {"Ġthe": 262, ...}') from None
        if not isinstance(token_ids, dict) or any(type(i) is not int  # (True is no id)
                                                  for i in token_ids.values()):
            raise UserError(f"{vocab_path} must be one JSON object of token -> whole number, "
                            'like GPT-2\'s {"!": 0, "\\"": 1, ...}')
        if sorted(token_ids.values()) != list(range(len(token_ids))):
            raise UserError(f"{vocab_path}: the ids must be 0..{len(token_ids) - 1}, each "
                            "once; is the file complete?")
        for token in token_ids:
            odd = [c for c in token if c not in CHAR_TO_BYTE]
            if odd:
                raise UserError(f"{vocab_path}: token {token!r} has {odd[0]!r}, which is "
                                "not one of GPT-2's 256 byte characters; is this a "
                                "byte-level BPE vocabulary?")
        vocab = {i: from_printable(token) for token, i in token_ids.items()}

        merges: dict[Pair, int] = {}
        for n, line in enumerate(read_text(merges_path).split("\n"), start=1):
            line = line.rstrip("\r")  # a file saved on Windows
            if not line or (n == 1 and line.startswith("#version")):
                continue
            parts = line.split()
            if len(parts) != 2:
                raise UserError(f"{merges_path} line {n}: {line!r} is not two tokens with "
                                "a space between them, like 'Ġ t'")
            for part in [*parts, "".join(parts)]:
                if part not in token_ids:
                    raise UserError(f"{merges_path} line {n}: {part!r} is not in "
                                    f"{vocab_path}; give the two files that belong together")
            merges[token_ids[parts[0]], token_ids[parts[1]]] = token_ids["".join(parts)]
        return cls(vocab, merges)


def read_text(path: Path) -> str:
    """A UTF-8 text file; a missing or unreadable one is a ``UserError``."""
    if not path.is_file():
        raise UserError(f"no such file: {path}. Give GPT-2's vocab.json and merges.txt, "
                        f"or the ones `python -m {__package__}.bpe --out FOLDER` writes.")
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise UserError(f"cannot read {path} as UTF-8 text: {e}") from None


# --- python -m <stage>.bpe ---------------------------------------------------------------


def piece(token: bytes, quote: bool = False) -> str:
    """A token as text to print (a newline as ⏎), or its bytes in hex when it is only
    part of a character: b"\\xe7\\x9a" -> '<e7 9a>'."""
    try:
        text = token.decode("utf-8").replace("\n", "⏎")
    except UnicodeDecodeError:
        return "<" + token.hex(" ") + ">"
    return repr(text) if quote else text


def describe(token: bytes) -> str:
    """The quoted ``piece``, and what a token beyond ASCII holds."""
    shown = piece(token, quote=True)
    if token.isascii():
        return shown
    if shown.startswith("<"):  # not quoted: hex
        return f"{shown}  (part of a character)"
    n = len(token.decode("utf-8"))
    return f"{shown}  ({'a whole character' if n == 1 else f'{n} characters'})"


def report(text: str, tok: BPETokenizer, seconds: float, show: int) -> None:
    """Print what the merges did to ``text``."""
    ids = tok.encode(text)
    n_bytes, learned = len(text.encode("utf-8")), tok.vocab_size - 256
    print(f"  {len(text):,} characters, {n_bytes:,} UTF-8 bytes")
    print(f"  {learned} merges learned in {seconds:.1f} s: a vocabulary of 256 bytes + "
          f"{learned} = {tok.vocab_size} tokens")
    print(f"  {len(ids):,} tokens: {n_bytes / len(ids):.2f}x fewer than bytes, "
          f"{len(ids) / len(text):.2f} tokens per character")

    print(f"\nthe first {min(show, learned)} merges (id: pair -> new token):")
    for (a, b), new_id in list(tok.merges.items())[:show]:
        pair = f"{piece(tok.vocab[a], quote=True)} + {piece(tok.vocab[b], quote=True)}"
        print(f"  {new_id:>5}: {pair} -> {describe(tok.vocab[new_id])}")
    longest = sorted(tok.vocab.values(), key=lambda t: (-len(t), t))[:10]
    print("the longest tokens: " + ", ".join(piece(t, quote=True) for t in longest))

    line = next((line for line in text.splitlines() if len(line) >= 40), text)[:60]
    pieces = [piece(tok.vocab[i]) for i in tok.encode(line)]
    print(f"\na line of the corpus, {len(line)} characters -> {len(pieces)} tokens:")
    print("  |" + "|".join(pieces) + "|")


def main(argv: list[str] | None = None) -> None:
    utf8_output()
    parser = argparse.ArgumentParser(
        prog=f"python -m {__package__}.bpe",
        description="Learn GPT-2's byte-level BPE from a corpus and show what its merges do.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--data", default="en", help=DATA_HELP)
    parser.add_argument("--merges", type=int, default=300, help="how many merges to learn")
    parser.add_argument("--show", type=int, default=20, help="how many merges to print")
    parser.add_argument("--out", metavar="FOLDER", default=argparse.SUPPRESS,
                        help="save vocab.json and merges.txt (GPT-2's format) in this folder")
    args = parser.parse_args(argv)
    try:
        text = load_text(args.data)
        start = time.perf_counter()
        tok = BPETokenizer.train(text, args.merges)
        seconds = time.perf_counter() - start
        if getattr(args, "out", None):
            tok.save(args.out)
    except UserError as e:
        parser.exit(2, f"error: {e}\n")
    print(f"corpus: {args.data}")
    report(text, tok, seconds, args.show)
    if getattr(args, "out", None):
        print(f"\nsaved vocab.json and merges.txt in {args.out}")


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:  # the reader went away (... | head): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(0)
