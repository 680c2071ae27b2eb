"""The whole repository passes ruff with the settings in pyproject.toml."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest
from conftest import REPO_ROOT


@pytest.mark.skipif(importlib.util.find_spec("ruff") is None, reason="ruff is not installed")
def test_ruff_check_passes():
    run = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "concise", "."],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=120, check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
