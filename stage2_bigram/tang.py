"""Tang poems as a training text: ``--data tang``, the Chinese counterpart of Tiny Shakespeare.

The chinese-poetry project (MIT licence; the poems themselves are in the public
domain) keeps the Complete Tang Poems (全唐诗) as 58 JSON files. ``--data tang``
downloads them once from a pinned commit, checks each file's sha256, keeps the
regulated verse (four or eight lines of five or seven characters: the quatrains
and eight-line poems, 绝句 and 律诗) and converts the traditional script of the
source to simplified with OpenCC, the converter the project itself recommends.
The result is cached as one text file: each poem its title, then one couplet per
line, and a blank line before the next poem.

Offline, or to use a copy you have: put the 58 files in one folder and pass
``--data FOLDER``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

from .download import download
from .errors import UserError

COMMIT = "99ebbef7e1345c0985c44b9fd96a3f9e776f117b"  # chinese-poetry/chinese-poetry
URL = ("https://raw.githubusercontent.com/chinese-poetry/chinese-poetry/" + COMMIT
       + "/%E5%85%A8%E5%94%90%E8%AF%97/{name}")  # the folder 全唐诗, percent-encoded
FILES = [f"poet.tang.{n}.json" for n in range(0, 58000, 1000)]
SHA256 = Path(__file__).parent / "corpus" / "tang.sha256"  # "sha256  name", one per file
LINE = re.compile(r"([^，。？！；]+)([，。？！；])")  # a line of verse and its punctuation


def expected_sha256() -> dict[str, str]:
    pairs = (line.split() for line in SHA256.read_text(encoding="ascii").splitlines() if line)
    return {name: digest for digest, name in pairs}


def regulated(title: str, paragraphs: list[str]) -> str | None:
    """The poem as text (title, then a couplet per line) if it is regulated verse, else None."""
    text = "".join(paragraphs)
    lines = LINE.findall(text)
    if LINE.sub("", text) or len(lines) not in (4, 8):
        return None  # text outside the lines (notes, variants), or another length
    n = len(lines[0][0])
    if n not in (5, 7) or any(len(words) != n for words, _ in lines):
        return None
    if not all("\u4e00" <= c <= "\u9fff" for words, _ in lines for c in words):
        return None  # a missing character (□) or a mark that is not a character
    couplets = ["".join(w + p for w, p in lines[i : i + 2]) for i in range(0, len(lines), 2)]
    title = re.sub(r"[（(〔\[【].*?[）)〕\]】]", "", title)  # a note in brackets is not the title
    title = "".join(c for c in title if "\u4e00" <= c <= "\u9fff")  # no marks, no spaces
    return "\n".join([title or "无题", *couplets])


def extract(folder: Path) -> str:
    """The regulated verse of the 58 files in ``folder``, in simplified script."""
    import opencc  # only --data tang needs it

    want = expected_sha256()
    poems = []
    for name in FILES:
        path = folder / name
        if not path.is_file():
            raise UserError(f"{folder} has no {name}: --data FOLDER needs all 58 files "
                            f"poet.tang.0.json ... poet.tang.57000.json of the commit {COMMIT}.")
        raw = path.read_bytes()
        if hashlib.sha256(raw).hexdigest() != want[name]:
            raise UserError(f"{path} is not the file of the pinned commit {COMMIT} (its sha256 "
                            "differs): download it again from the address in tang.py.")
        for poem in json.loads(raw):
            verse = regulated(poem.get("title", ""), poem.get("paragraphs", []))
            if verse:
                poems.append(verse)
    simplified = opencc.OpenCC("t2s").convert("\n\n".join(poems)).split("\n\n")
    # The few poems the conversion gives a rare character outside the basic block are dropped.
    keep = [p for p in simplified if all("\u4e00" <= c <= "\u9fff" or c in "，。？！；\n" for c in p)]
    return "\n\n".join(keep) + "\n"


def text_file(cache: Path, folder: Path | None = None) -> Path:
    """The cached text, made from ``folder`` or from downloads into ``cache`` the first time."""
    out = cache / f"tang-{COMMIT[:12]}.txt"
    if out.is_file() and folder is None:
        return out
    if folder is None:
        folder = cache / f"tang-{COMMIT[:12]}"
        download_all(folder)
    text = extract(folder)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f"{out.name}.{os.getpid()}.part")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, out)
    return out


def download_all(folder: Path) -> None:
    from tqdm import tqdm

    want = expected_sha256()
    for name in tqdm(FILES, desc="Tang poems", unit="file"):
        try:
            download(URL.format(name=name), folder / name, want[name])
        except UserError as e:
            reason = str(e).split(". ")[0]  # what went wrong, without the advice for one file
            raise UserError(f"{reason}. The Tang poems are 58 files: download poet.tang.0.json "
                            f"... poet.tang.57000.json of chinese-poetry (commit {COMMIT[:12]}, "
                            "folder 全唐诗) by hand into one folder and pass --data FOLDER, or "
                            "use a built-in corpus: --data en / --data zh.") from None
