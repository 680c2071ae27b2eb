"""The numbers and figures the docs quote must come from the current code.

tools/gen_docs.py runs the stages and records a hash of their sources in
docs/generated/manifest.json. If a stage changes and the outputs were not
regenerated, this test fails and says how to fix it.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GEN = ROOT / "docs" / "generated"


@pytest.fixture(scope="module")
def gen_docs():
    spec = importlib.util.spec_from_file_location("gen_docs", ROOT / "tools" / "gen_docs.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["gen_docs"] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.docs
def test_generated_outputs_match_the_sources(gen_docs):
    manifest = json.loads((GEN / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["sources_sha256"] == gen_docs.source_hash(), (
        "the stage sources changed since docs/generated/ was made: run `make docs-figures` "
        "(python tools/gen_docs.py --shakespeare PATH) and commit docs/generated/"
    )
    for name in manifest["generated"]:
        assert (GEN / name).is_file(), f"docs/generated/{name} is listed but missing"


@pytest.mark.docs
def test_every_generated_file_is_used_by_a_page():
    pages = "\n".join(p.read_text(encoding="utf-8") for p in (ROOT / "docs").glob("*.md"))
    manifest = json.loads((GEN / "manifest.json").read_text(encoding="utf-8"))
    unused = [n for n in manifest["generated"] if Path(n).name not in pages]
    assert not unused, f"generated but never shown in the docs: {unused}"


@pytest.mark.docs
def test_worked_example_is_what_the_code_computes(gen_docs, tmp_path, monkeypatch):
    """Regenerating the cheap worked example reproduces the committed file exactly."""
    committed = (GEN / "worked_attention.md").read_text(encoding="utf-8")
    monkeypatch.setattr(gen_docs, "GEN", tmp_path)
    gen_docs.worked_examples()
    assert (tmp_path / "worked_attention.md").read_text(encoding="utf-8") == committed
