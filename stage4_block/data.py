"""Text in, batches of token ids out.

The pipeline every later stage reuses::

    text = load_text("en")                     # built-in corpus, a file, or "shakespeare"
    tok = CharTokenizer.from_text(text)        # characters -> ids
    data = torch.tensor(tok.encode(text))      # (N,) ids
    train, val = split(data, 0.1)              # first 90% / last 10%
    x, y = get_batch(train, 4, 8)              # (B, T) each; y is x shifted by one

``Corpus.load`` does all of it, with ``encode_compact`` (compact.py) for the third line:
the same ids in a fraction of the memory, which a large corpus needs.

>>> data = torch.arange(10)
>>> train, val = split(data, val_fraction=0.2)
>>> train.tolist(), val.tolist()
([0, 1, 2, 3, 4, 5, 6, 7], [8, 9])
>>> x, y = get_batch(train, batch_size=2, block_size=3, generator=torch.Generator().manual_seed(2))
>>> x.tolist(), y.tolist()
([[3, 4, 5], [2, 3, 4]], [[4, 5, 6], [3, 4, 5]])
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from torch.utils.data import Dataset

from . import tang
from .compact import encode_compact
from .download import cache_dir, download
from .errors import UserError
from .tokenizer import CharTokenizer

CORPUS_DIR = Path(__file__).parent / "corpus"
BUILTIN = {"en": "en.txt", "zh": "zh.txt"}

SHAKESPEARE_URL = (
    "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"
)
SHAKESPEARE_SHA256 = "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"
DATA_HELP = (
    "training text: 'en' (built-in English), 'zh' (built-in Chinese), 'shakespeare' (Tiny "
    "Shakespeare) or 'tang' (Tang poems), both downloaded once and cached, or the path of "
    "any UTF-8 file (or of a folder holding the 58 files of the Tang poems)"
)


def resolve(source: str) -> Path:
    """A --data value -> the path of a text file."""
    if source in BUILTIN:
        return CORPUS_DIR / BUILTIN[source]
    if source == "shakespeare":
        return download(SHAKESPEARE_URL, cache_dir() / "tinyshakespeare.txt", SHAKESPEARE_SHA256)
    if source == "tang":
        return tang.text_file(cache_dir())
    if Path(source).is_dir():  # a local copy of the Tang poems' files
        return tang.text_file(cache_dir(), Path(source))
    return Path(source)


def load_text(source: str = "en") -> str:
    """Read a corpus as text. Bad files raise ``UserError`` saying what to do."""
    path = resolve(source)
    if not path.is_file():
        raise UserError(f"no such file: {path}. --data takes {DATA_HELP}.")
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise UserError(f"cannot read {path}: {e}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UserError(
            f"{path} is not UTF-8 text (byte {raw[e.start]:#04x} at offset {e.start}). "
            "Convert it first, e.g. `iconv -f GBK -t UTF-8 in.txt > out.txt`."
        ) from None
    del raw  # a big corpus: never hold the bytes, the text and a copy of it at once
    text = text.removeprefix("\ufeff").replace("\r\n", "\n")  # BOM and Windows line ends
    if not text or text.isspace():  # (not text.strip(): that would copy the text)
        raise UserError(f"{path} is empty: there is nothing to learn from.")
    return text


def split(data: torch.Tensor, val_fraction: float = 0.1) -> tuple[torch.Tensor, torch.Tensor]:
    """First (1 - val_fraction) of the tokens for training, the rest for validation.

    A contiguous cut, not a shuffle: validation text is text the model never saw.
    """
    if not 0.0 < val_fraction < 1.0:
        raise UserError(f"val_fraction must be between 0 and 1 (exclusive), got {val_fraction}")
    n = int(len(data) * (1.0 - val_fraction))
    return data[:n], data[n:]


def check_length(data: torch.Tensor, block_size: int, name: str = "data") -> None:
    """A (block_size + 1)-token window must fit: block_size inputs plus one target."""
    if block_size < 1:
        raise UserError(f"block_size must be at least 1, got {block_size}")
    if len(data) < block_size + 1:
        raise UserError(
            f"the {name} split has {len(data)} tokens but block_size={block_size} needs at "
            f"least {block_size + 1}. Use a longer text, a smaller --block-size, or a "
            "different --val-fraction."
        )


def get_batch(
    data: torch.Tensor,
    batch_size: int,
    block_size: int,
    generator: torch.Generator | None = None,
    device: str | torch.device = "cpu",
) -> tuple[torch.Tensor, torch.Tensor]:
    """A random batch of windows: ``x`` is (B, T), ``y`` is ``x`` shifted one to the left.

    ``y[b, t]`` is the character that follows ``x[b, :t+1]``, so one window gives
    ``T`` training examples at once, with contexts of length 1 to T. ``data`` may
    hold its ids in any integer dtype; the batch is always ``torch.long``.
    """
    check_length(data, block_size)
    if batch_size < 1:
        raise UserError(f"batch_size must be at least 1, got {batch_size}")
    ix = torch.randint(len(data) - block_size, (batch_size,), generator=generator)
    x = torch.stack([data[i : i + block_size] for i in ix])  # (B, T)
    y = torch.stack([data[i + 1 : i + block_size + 1] for i in ix])  # (B, T)
    return x.to(device, torch.long), y.to(device, torch.long)


class CharDataset(Dataset):
    """The same (x, y) windows as ``get_batch``, for a ``torch.utils.data.DataLoader``.

    Item ``i`` is the window starting at token ``i``; ``get_batch`` draws the start
    positions at random, a ``DataLoader(shuffle=True)`` does the same.
    """

    def __init__(self, data: torch.Tensor, block_size: int):
        check_length(data, block_size)
        self.data, self.block_size = data, block_size

    def __len__(self) -> int:
        return len(self.data) - self.block_size

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        if not 0 <= i < len(self):
            raise IndexError(f"window {i} out of range 0..{len(self) - 1}")
        chunk = self.data[i : i + self.block_size + 1].long()
        return chunk[:-1], chunk[1:]


@dataclass
class Corpus:
    """A text, its tokenizer and its train/val split, ready for training.

    ``train`` and ``val`` hold the ids in the smallest integer type that fits (1 byte per
    character for up to 256 distinct characters); ``get_batch`` hands out ``torch.long``.
    """

    source: str
    text: str
    tokenizer: CharTokenizer
    train: torch.Tensor
    val: torch.Tensor

    @classmethod
    def load(
        cls, source: str = "en", val_fraction: float = 0.1, tokenizer: CharTokenizer | None = None
    ) -> Corpus:
        """Load and split; pass ``tokenizer`` to reuse a vocabulary (e.g. from a checkpoint)."""
        text = load_text(source)
        tokenizer = tokenizer or CharTokenizer.from_text(text)
        data = encode_compact(tokenizer, text)  # torch.tensor(tokenizer.encode(text)), smaller
        train, val = split(data, val_fraction)
        return cls(source, text, tokenizer, train, val)
