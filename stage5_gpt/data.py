"""Text in, batches of token ids out.

The pipeline every later stage reuses::

    text = load_text("en")                 # built-in corpus, a file, or "shakespeare"
    tok = CharTokenizer.from_text(text)    # characters -> ids
    data = tok.encode_tensor(text)         # (N,), torch.uint8 for up to 256 characters
    train, val = split(data, 0.1)          # first 90% / last 10%
    x, y = get_batch(train, 4, 8)          # (B, T) each; y is x shifted by one

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


# --8<-- [start:load_text]
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
# --8<-- [end:load_text]


# --8<-- [start:split]
def split(data: torch.Tensor, val_fraction: float = 0.1) -> tuple[torch.Tensor, torch.Tensor]:
    """First (1 - val_fraction) of the tokens for training, the rest for validation.

    A contiguous cut, not a shuffle: validation text is text the model never saw.
    """
    if not 0.0 < val_fraction < 1.0:
        raise UserError(f"val_fraction must be between 0 and 1 (exclusive), got {val_fraction}")
    n = int(len(data) * (1.0 - val_fraction))
    return data[:n], data[n:]
# --8<-- [end:split]


# --8<-- [start:check_length]
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
# --8<-- [end:check_length]


# --8<-- [start:get_batch]
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
# --8<-- [end:get_batch]


# --8<-- [start:dataset]
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
# --8<-- [end:dataset]


# --8<-- [start:pad]
def pad_sequences(
    seqs: list[list[int]], pad_id: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad sequences of unequal length into one (B, T) tensor.

    Returns ``(padded, mask)``: ``mask[b, t]`` is True where ``padded[b, t]`` is a
    real token and False where it is padding.

    >>> padded, mask = pad_sequences([[5, 6, 7], [8]], pad_id=0)
    >>> padded.tolist(), mask.int().tolist()
    ([[5, 6, 7], [8, 0, 0]], [[1, 1, 1], [1, 0, 0]])
    """
    if not seqs:
        raise UserError("pad_sequences needs at least one sequence")
    T = max(len(s) for s in seqs)
    padded = torch.full((len(seqs), T), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), T), dtype=torch.bool)
    for b, s in enumerate(seqs):
        padded[b, : len(s)] = torch.as_tensor(s, dtype=torch.long)
        mask[b, : len(s)] = True
    return padded, mask
# --8<-- [end:pad]


# --8<-- [start:attention_mask]
def attention_mask(mask: torch.Tensor, causal: bool = True) -> torch.Tensor:
    """(B, T) padding mask -> (B, T, T) mask of which keys each query may attend to.

    ``allowed[b, i, j]`` is True when key ``j`` is a real token and, if causal,
    ``j <= i`` (no peeking at the future).

    >>> _, mask = pad_sequences([[5, 6, 7], [8, 9]])
    >>> attention_mask(mask)[1].int().tolist()
    [[1, 0, 0], [1, 1, 0], [1, 1, 0]]
    """
    B, T = mask.shape
    allowed = mask[:, None, :].expand(B, T, T)  # key j is a real token
    if causal:
        allowed = allowed & torch.ones(T, T, dtype=torch.bool).tril()
    return allowed
# --8<-- [end:attention_mask]


# --8<-- [start:corpus]
@dataclass
class Corpus:
    """A text, its tokenizer and its train/val split, ready for training.

    ``train`` and ``val`` hold the ids in ``tokenizer.dtype`` (1 byte per character
    for up to 256 distinct characters); ``get_batch`` hands out ``torch.long``.
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
        data = tokenizer.encode_tensor(text)  # (N,), in the smallest dtype that fits
        train, val = split(data, val_fraction)
        return cls(source, text, tokenizer, train, val)
# --8<-- [end:corpus]
