"""The diff discipline: each stage is a copy of the previous one plus what it teaches.

A file the later stage does not deliberately change must be byte-identical to
the earlier stage's, so ``diff -ru stageN stageN+1`` shows exactly the lesson.
Every deliberate difference is listed in ``CHANGED`` with its reason; an entry
for a file that is in fact identical is stale and fails too.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from conftest import REPO_ROOT, STAGES, existing_stages

# later stage -> {file relative to the stage folder: why it differs from the previous stage},
# from docs/hooks/stage_changes.json, which gives each reason in English and Chinese (the
# docs' stage diffs show it). A file the later stage removes is listed too, with the reason
# it goes.
CHANGES = json.loads((REPO_ROOT / "docs" / "hooks" / "stage_changes.json").read_text(encoding="utf-8"))
CHANGED: dict[str, dict[str, str]] = {
    stage: {rel: en for rel, (en, _zh) in files.items()} for stage, files in CHANGES["changed"].items()}

PAIRS = list(zip(STAGES, STAGES[1:], strict=False))
IGNORED_DIRS = {"__pycache__"}
IGNORED_SUFFIXES = {".pyc", ".pyo"}


def stage_files(stage: str) -> set[str]:
    """Every file of a stage folder, as POSIX paths relative to it."""
    root = REPO_ROOT / stage
    return {
        p.relative_to(root).as_posix()
        for p in root.rglob("*")
        if p.is_file()
        and not IGNORED_DIRS.intersection(p.relative_to(root).parts)
        and p.suffix not in IGNORED_SUFFIXES
    }


def _need(*stages: str) -> None:
    for stage in stages:
        if not (REPO_ROOT / stage / "__init__.py").is_file():
            pytest.skip(f"{stage} does not exist yet")


def test_changed_lists_every_later_stage():
    assert set(CHANGED) == set(STAGES[1:])


@pytest.mark.parametrize("earlier, later", PAIRS, ids=[f"{a}->{b}" for a, b in PAIRS])
def test_unchanged_files_are_byte_identical(earlier, later):
    _need(earlier, later)
    changed = CHANGED[later]
    missing, differing = [], []
    for rel in sorted(stage_files(earlier)):
        a, b = REPO_ROOT / earlier / rel, REPO_ROOT / later / rel
        if not b.is_file():
            if rel not in changed:  # a deliberate removal is listed with its reason
                missing.append(rel)
        elif rel not in changed and a.read_bytes() != b.read_bytes():
            differing.append(rel)
    assert not missing, f"{later} lacks files of {earlier}: {missing}"
    assert not differing, (
        f"{later} differs from {earlier} in {differing}: copy them from {earlier} "
        f"(cp {earlier}/FILE {later}/FILE) or list them in CHANGED[{later!r}] with a reason"
    )


@pytest.mark.parametrize("earlier, later", PAIRS, ids=[f"{a}->{b}" for a, b in PAIRS])
def test_no_stale_changed_entries(earlier, later):
    _need(earlier, later)
    stale = []
    for rel, reason in CHANGED[later].items():
        assert reason.strip(), f"CHANGED[{later!r}][{rel!r}] needs a reason"
        a, b = REPO_ROOT / earlier / rel, REPO_ROOT / later / rel
        if not a.is_file() or (b.is_file() and a.read_bytes() == b.read_bytes()):
            stale.append(rel)
    assert not stale, f"CHANGED[{later!r}] lists files that are identical or missing: {stale}"


@pytest.mark.parametrize("stage", STAGES[2:])
def test_later_stages_keep_the_base_layout(stage):
    _need("stage2_bigram", stage)
    missing = sorted(stage_files("stage2_bigram") - stage_files(stage))
    assert not missing, f"{stage} lacks {missing}"


IMPORT_OF_A_STAGE = re.compile(r"^\s*(?:from|import)\s+(stage\d\w*)", re.MULTILINE)


@pytest.mark.parametrize("stage", STAGES)
def test_stages_import_their_own_modules_relatively(stage):
    _need(stage)
    offenders = []
    for path in sorted((REPO_ROOT / stage).rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        for m in IMPORT_OF_A_STAGE.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            offenders.append(f"{path.relative_to(REPO_ROOT)}:{line}: {m.group(0).strip()}")
    assert not offenders, "use relative imports (from .data import ...):\n" + "\n".join(offenders)


def test_the_import_check_would_catch_an_absolute_import():
    text = "import torch\nfrom stage1_data.data import load_text\n    import stage2_bigram\n"
    assert [m.group(1) for m in IMPORT_OF_A_STAGE.finditer(text)] == ["stage1_data",
                                                                      "stage2_bigram"]
    assert not IMPORT_OF_A_STAGE.search('"""Run python -m stage1_data to look."""')


def test_at_least_the_first_two_stages_exist():
    assert existing_stages()[:2] == ["stage1_data", "stage2_bigram"]
    assert all(Path(REPO_ROOT / s).is_dir() for s in existing_stages())
