"""The Chinese edition's assets/ and generated/ are the English edition's folders.

mkdocs.zh.yml builds docs/zh/ into site/zh/; its pages refer to ``assets/...`` and
``generated/...`` next to them, as the English pages do. Instead of links in the tree
(which a Windows clone turns into small text files), this hook adds the files of
docs/assets/ and docs/generated/ to the Chinese build as if they were in docs/zh/:
mkdocs checks the pages' links against them and copies them into site/zh/. The Chinese
edition's exclude_docs applies to them as to its own files (so, e.g., the explorer's
weights are not copied a second time: the Chinese explorer reads the English site's).
One set of figures, numbers and assets; nothing to keep in sync.
"""

from __future__ import annotations

import os
from pathlib import Path

from mkdocs.structure.files import File, set_exclusions

DOCS = Path(__file__).resolve().parents[1]
SHARED = ("assets", "generated")


def shared_files(config) -> list[File]:
    """Every file under docs/assets and docs/generated, as a File of this build
    (src_uri ``assets/...``, copied to ``<site_dir>/assets/...``)."""
    found = []
    for folder in SHARED:
        for path in sorted((DOCS / folder).rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                found.append(File(path.relative_to(DOCS).as_posix(), str(DOCS),
                                  config["site_dir"], config["use_directory_urls"]))
    set_exclusions(found, config)
    return found


def on_files(files, config):
    if Path(config["docs_dir"]).resolve() == DOCS:
        return files  # the English edition: these are its own folders already
    for folder in SHARED:
        own = Path(config["docs_dir"], folder)
        if os.path.lexists(own):
            raise ValueError(f"{own} exists, but the hook {Path(__file__).name} adds "
                             f"docs/{folder} to this edition: remove it")
    for file in shared_files(config):
        files.append(file)
    return files
