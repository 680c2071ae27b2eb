"""Downloads that are made once: fetched, checked against a pinned sha256, cached.

Tiny Shakespeare and the Tang poems are too big to ship with the tutorial, so the
first run that asks for them downloads them into ``~/.cache/gpt-stages`` (or
``$GPT_STAGES_CACHE``). A cached file with the right checksum is used without
touching the network; offline, the error says how to pass a local copy instead.
"""

from __future__ import annotations

import hashlib
import http.client
import os
import urllib.error
import urllib.request
from pathlib import Path

from .errors import UserError


def cache_dir() -> Path:
    """Where downloads are kept: $GPT_STAGES_CACHE, else ~/.cache/gpt-stages."""
    return Path(os.environ.get("GPT_STAGES_CACHE", Path.home() / ".cache" / "gpt-stages"))


def download(url: str, dest: Path, sha256: str) -> Path:
    """Fetch ``url`` to ``dest`` once, verify its checksum, write atomically.

    A cached file with the right checksum is reused without touching the network.
    A half-finished download never appears under ``dest``: we write to a temporary
    file in the same folder and rename it only after the checksum matched.
    """
    if dest.is_file() and _sha256(dest.read_bytes()) == sha256:
        return dest
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            payload = response.read()
    except (urllib.error.URLError, http.client.HTTPException, OSError) as e:
        raise UserError(
            f"could not download {url} ({e}). Are you offline? Download the file by hand "
            "and pass its path with --data PATH, or use a built-in corpus: --data en / --data zh."
        ) from None
    got = _sha256(payload)
    if got != sha256:
        raise UserError(
            f"the download from {url} has sha256 {got}, expected {sha256}; "
            "the file was not saved. Try again later, or pass a local copy with --data PATH."
        )
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(
            f"cannot create the cache folder {dest.parent} ({e}). Set GPT_STAGES_CACHE to a "
            "writable folder, or pass a local copy with --data PATH."
        ) from None
    # A name of our own (not tempfile.mkstemp, which makes the file private to us):
    # the cached file gets the usual permissions.
    tmp = dest.with_name(f"{dest.name}.{os.getpid()}.part")
    try:
        tmp.write_bytes(payload)
        os.replace(tmp, dest)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return dest


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
