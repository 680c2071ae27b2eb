"""The examples in the docstrings of every stage module run and are right."""

from __future__ import annotations

import doctest
import importlib

import pytest
from conftest import REPO_ROOT, existing_stages

MODULES = [
    f"{stage}.{path.relative_to(REPO_ROOT / stage).with_suffix('').as_posix().replace('/', '.')}"
    for stage in existing_stages()
    for path in sorted((REPO_ROOT / stage).rglob("*.py"))
    if path.name != "__main__.py" and "__pycache__" not in path.parts
]
# Modules that teach with examples: an empty run here means the examples vanished.
MUST_HAVE_EXAMPLES = ("tokenizer", "data", "model")


@pytest.mark.parametrize("name", MODULES)
def test_doctests(name):
    module = importlib.import_module(name.removesuffix(".__init__"))
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS, verbose=False, report=True)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples failed in {name}"
    if name.rsplit(".", 1)[1] in MUST_HAVE_EXAMPLES:
        assert result.attempted > 0, f"{name} has no doctest examples any more"


def test_every_existing_stage_is_covered():
    stages = {name.split(".")[0] for name in MODULES}
    assert stages == set(existing_stages())
    assert "stage1_data.tokenizer" in MODULES and "stage2_bigram.model" in MODULES
