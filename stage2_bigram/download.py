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
import ssl
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from tqdm import tqdm

from .errors import UserError

BAR_FROM = 1 << 20  # files of a megabyte or more show a progress bar


def cache_dir() -> Path:
    """Where downloads are kept: $GPT_STAGES_CACHE, else ~/.cache/gpt-stages."""
    return Path(os.environ.get("GPT_STAGES_CACHE", Path.home() / ".cache" / "gpt-stages"))


def download(url: str, dest: Path, sha256: str, local: str = "--data PATH") -> Path:
    """Fetch ``url`` to ``dest`` once, verify its checksum, write atomically.

    A cached file with the right checksum is reused without touching the network.
    A half-finished download never appears under ``dest``: we write to a temporary
    file in the same folder and rename it only after the checksum matched. ``local``
    names the flag that takes a copy made by hand, for the error messages.
    """
    if dest.is_file() and file_sha256(dest) == sha256:
        return dest
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(
            f"cannot create the cache folder {dest.parent} ({e.strerror or e}). Set "
            f"GPT_STAGES_CACHE to a writable folder, or pass a local copy with {local}."
        ) from None
    # A name of our own (not tempfile.mkstemp, which makes the file private to us):
    # the cached file gets the usual permissions.
    tmp = dest.with_name(f"{dest.name}.{os.getpid()}.part")
    try:
        got = _fetch(url, tmp, dest.name, local)
        if got != sha256:
            raise UserError(
                f"the download from {url} has sha256 {got}, expected {sha256}; "
                f"the file was not saved. Try again later, or pass a local copy with {local}."
            )
        replace(tmp, dest)
    except OSError as e:  # a full disk, or a folder we may not write to
        raise UserError(f"cannot write {tmp} ({e.strerror or e}): free some space, or set "
                        "GPT_STAGES_CACHE to another folder.") from None
    finally:
        tmp.unlink(missing_ok=True)
    return dest


def _fetch(url: str, tmp: Path, name: str, local: str) -> str:
    """Stream ``url`` into ``tmp`` (a progress bar for large files); its sha256."""
    h = hashlib.sha256()
    try:
        with urllib.request.urlopen(url, timeout=30) as response, tmp.open("wb") as f:
            size = int(response.headers.get("Content-Length") or 0) or None
            with tqdm(total=size, unit="B", unit_scale=True, desc=f"downloading {name}",
                      # no bar frames into a log file: only for a terminal
                      disable=(size or 0) < BAR_FROM or not sys.stderr.isatty()) as bar:
                while chunk := response.read(1 << 20):
                    f.write(chunk)
                    h.update(chunk)
                    bar.update(len(chunk))
    except (urllib.error.URLError, http.client.HTTPException, TimeoutError, ConnectionError) as e:
        reason = getattr(e, "reason", e)
        if isinstance(reason, ssl.SSLCertVerificationError):
            why = (f"the server's HTTPS certificate could not be verified ({reason.verify_message}); "
                   "a proxy or an old certificate store can cause this")
        else:
            why = f"{reason} (are you offline?)"
        raise UserError(f"could not download {url}: {why}. Download the file by hand and pass "
                        f"it with {local}, or use a built-in corpus: --data en / --data zh.") from None
    return h.hexdigest()


def replace(tmp: Path, dest: Path, tries: int = 20) -> None:
    """``os.replace(tmp, dest)``, tried again for a second or two while another program
    holds ``dest`` open (on Windows a virus scanner or an indexer can, for a moment)."""
    for i in range(tries):
        try:
            os.replace(tmp, dest)
            return
        except PermissionError:
            if i == tries - 1:
                raise
            time.sleep(0.1)


def file_sha256(path: Path) -> str:
    """The sha256 of a file, read a megabyte at a time."""
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()
