"""Shared fixtures and helpers for every stage's tests.

Tests never touch the network or anything outside the repository and pytest's
temporary folders: corpora are small files written into ``tmp_path``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from hypothesis import settings

# One thread per process, set before torch is imported (here and in every CLI run
# we start, which inherits it): the tensors in tests are tiny, and extra threads
# only spin against each other and against the CLI runs going on in the background.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

REPO_ROOT = Path(__file__).resolve().parents[1]

# The stage folders in order; later ones may not exist yet while they are written.
STAGES = ["stage1_data", "stage2_bigram", "stage3_attention", "stage4_block", "stage5_gpt"]

# No .hypothesis/ folder in the repository, and no deadline: the first example of a
# test can be slow while torch warms up.
settings.register_profile("repo", database=None, deadline=None)
settings.load_profile("repo")


def existing_stages() -> list[str]:
    """The stage folders that exist right now, in order."""
    return [s for s in STAGES if (REPO_ROOT / s / "__init__.py").is_file()]


# A few KB of text with a lot of repetition, so that tiny models learn something
# in a few dozen steps, and every split of it still holds many windows.
_EN_LINES = [
    "the cat sat on the mat.",
    "the dog sat on the log.",
    "a cat and a dog ran to the hill.",
    "to be or not to be, that is the question.",
    "hello world, hello again!",
]
TINY_TEXT = "\n".join(_EN_LINES[(i * 3) % 5] for i in range(120)) + "\n"

# Mixed scripts: ASCII, Chinese, and an emoji outside the Basic Multilingual Plane
# (one code point, so one token).
_ZH_LINES = [
    "小猫坐在垫子上。",
    "the cat sat on the mat.",
    "你好，世界！hello 🐍",
    "学而时习之，不亦说乎？",
]
TINY_TEXT_ZH = "\n".join(_ZH_LINES[i % 4] for i in range(80)) + "\n"


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO_ROOT


@pytest.fixture
def tiny_corpus(tmp_path: Path) -> Path:
    """A ~3 KB English UTF-8 text file with repetitive structure."""
    path = tmp_path / "tiny.txt"
    path.write_text(TINY_TEXT, encoding="utf-8")
    return path


@pytest.fixture
def tiny_corpus_zh(tmp_path: Path) -> Path:
    """A few KB of UTF-8 text mixing English, Chinese and an emoji (🐍)."""
    path = tmp_path / "tiny_zh.txt"
    path.write_text(TINY_TEXT_ZH, encoding="utf-8")
    return path


def module_env(**extra: str) -> dict[str, str]:
    """Environment for a CLI subprocess: the repository importable, UTF-8 output."""
    return {**os.environ, "PYTHONPATH": str(REPO_ROOT), "PYTHONIOENCODING": "utf-8", **extra}


def start_module(module: str, *args: object, cwd: str | Path | None = None,
                 env: dict[str, str] | None = None, **popen: object) -> subprocess.Popen[str]:
    """Start ``python -m module args...`` without waiting; see ``finish``.

    Starting several runs first and then finishing them overlaps their ~2 s torch
    imports, which keeps the end-to-end tests cheap.
    """
    return subprocess.Popen(
        [sys.executable, "-m", module, *map(str, args)],
        cwd=cwd or REPO_ROOT,
        env=env or module_env(),
        stdout=popen.pop("stdout", subprocess.PIPE),
        stderr=popen.pop("stderr", subprocess.PIPE),
        text=True,
        encoding="utf-8",
        errors="replace",
        **popen,
    )


def finish(proc: subprocess.Popen[str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Wait for a run from ``start_module``; kill it if it takes longer than ``timeout``."""
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def run_module(module: str, *args: object, cwd: str | Path | None = None,
               env: dict[str, str] | None = None, timeout: float = 120
               ) -> subprocess.CompletedProcess[str]:
    """``python -m module args...`` in a fresh interpreter; output captured as text."""
    return finish(start_module(module, *args, cwd=cwd, env=env), timeout=timeout)


def assert_user_error(stderr: str, *fragments: str) -> None:
    """A CLI failed the friendly way: one ``error: ...`` line naming ``fragments``."""
    assert "Traceback" not in stderr, stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert lines, "nothing on stderr"
    assert lines[-1].startswith("error:") or ": error: " in lines[-1], stderr
    for fragment in fragments:
        assert fragment in stderr, f"{fragment!r} not in {stderr!r}"


def _default_sigint() -> None:
    # A shell without job control starts background jobs with SIGINT ignored, and a
    # child inherits that; our Ctrl-C must reach it as KeyboardInterrupt.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class CtrlC:
    """Run ``python -m module args...`` and press Ctrl-C (send SIGINT) as soon as it
    prints a stdout line starting with ``when``. Starts at once; ``result()`` waits.

    ``saw`` is set when that line appeared; a run that never prints it is killed
    after ``timeout`` seconds.
    """

    def __init__(self, module: str, *args: object, when: str, stderr_path: Path,
                 timeout: float = 120):
        self.when, self.saw, self._lines = when, threading.Event(), []
        self._stderr = open(stderr_path, "w+", encoding="utf-8")  # noqa: SIM115 (closed in result)
        self.proc = start_module(module, *args, env=module_env(PYTHONUNBUFFERED="1"),
                                 stderr=self._stderr, preexec_fn=_default_sigint)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self._timer = threading.Timer(timeout, self.proc.kill)
        self._timer.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self._lines.append(line)
            if not self.saw.is_set() and line.startswith(self.when):
                self.saw.set()
                self.proc.send_signal(signal.SIGINT)

    def result(self) -> subprocess.CompletedProcess[str]:
        self.proc.wait()
        self._timer.cancel()
        self._reader.join(timeout=10)
        self._stderr.seek(0)
        err = self._stderr.read()
        self._stderr.close()
        return subprocess.CompletedProcess(self.proc.args, self.proc.returncode,
                                           "".join(self._lines), err)


class BackgroundRuns:
    """CLI runs started together, finished when first asked for: ``runs["name"]``."""

    def __init__(self) -> None:
        self._running: dict[str, subprocess.Popen[str] | CtrlC] = {}
        self._done: dict[str, subprocess.CompletedProcess[str]] = {}

    def start(self, name: str, module: str, *args: object, **kwargs) -> None:
        self._running[name] = start_module(module, *args, **kwargs)

    def start_ctrl_c(self, name: str, module: str, *args: object, **kwargs) -> None:
        self._running[name] = CtrlC(module, *args, **kwargs)

    def __contains__(self, name: str) -> bool:
        return name in self._running or name in self._done

    def __getitem__(self, name: str) -> subprocess.CompletedProcess[str]:
        if name not in self._done:
            run = self._running.pop(name)
            self._done[name] = run.result() if isinstance(run, CtrlC) else finish(run)
        return self._done[name]

    def close(self) -> None:
        """Kill and reap what nobody asked for."""
        for name in list(self._running):
            run = self._running[name]
            proc = run.proc if isinstance(run, CtrlC) else run
            if proc.poll() is None:
                proc.kill()
            self[name]


# --- subprocess runs in the background ---------------------------------------------
#
# A fresh interpreter costs 2-3 s of CPU, mostly importing torch. So that those
# seconds overlap with the in-process tests instead of adding up, a test module
# that needs CLI runs defines
#
#     def start_background_runs(runs: BackgroundRuns, folder: Path) -> None:
#         runs.start("stage2.train", "stage2_bigram.train", "--data", ...)
#
# which is called once at the start of the session (only when one of the module's
# ``slow`` tests is selected); its slow tests ask for ``background["stage2.train"]``.
# Slow tests run last, when the runs are likely finished.


# Tests of many seconds each whose point another fast test already makes for one stage or
# one case: `make test-slow` runs them (CI runs both), keeping `make test` near two minutes.
SLOW_HERE = (
    "tests/test_plots.py::test_figures_print_no_font_warnings",  # a fresh matplotlib each
    "tests/test_plots.py::test_the_packaged_variable_font_prints_no_font_warnings",
    "tests/test_plots.py::test_the_system_font_is_preferred_for_its_static_weights",
    "tests/test_stage1_data.py::test_loading_a_big_corpus_takes_at_most_four_times_its_size",
    *(f"tests/test_harness.py::{test}[{stage}]"  # stage 5 stays in the fast suite
      for test in ("test_sample_into_a_closed_pipe_stops_quietly",
                   "test_interrupted_then_resumed_with_default_flags_equals_one_run")
      for stage in ("stage2_bigram", "stage3_attention", "stage4_block")),
    "tests/test_workbook.py::test_a_module_that_does_not_import_makes_its_exercises_wait",
    "tests/test_workbook.py::test_an_endless_loop_meets_the_time_limit_and_the_rest_is_graded",
    "tests/test_workbook.py::test_a_syntax_error_outside_the_exercises_makes_them_wait_naming_it",
    # The fast suite's run with 4.2 a hole grades 4.3 on its own code (a mistake it names).
    "tests/test_workbook.py::test_a_right_exercise_passes_while_the_constructor_it_needs_is_a_hole",
)


@pytest.hookimpl(tryfirst=True)  # before -m "not slow" selects
def pytest_collection_modifyitems(session, config, items):
    """Mark SLOW_HERE slow; slow tests last (a stable sort: the order within each group stays)."""
    for item in items:
        if item.nodeid.startswith(SLOW_HERE):
            item.add_marker(pytest.mark.slow)
    items.sort(key=lambda item: item.get_closest_marker("slow") is not None)


@pytest.fixture(scope="session", autouse=True)
def background(request, tmp_path_factory):
    runs = BackgroundRuns()
    slow_modules = {getattr(item, "module", None): None  # a dict keeps the order
                    for item in request.session.items if item.get_closest_marker("slow")}
    for module in slow_modules:
        start = getattr(module, "start_background_runs", None)
        if start is not None:
            start(runs, tmp_path_factory.mktemp(module.__name__.rsplit(".", 1)[-1]))
    yield runs
    runs.close()


def nav_pages() -> list[str]:
    """The Markdown files in mkdocs.yml's nav, in order, as MkDocs itself reads them."""
    from mkdocs.config import load_config

    def walk(items):
        for item in items:
            value = next(iter(item.values())) if isinstance(item, dict) else item
            if isinstance(value, list):
                yield from walk(value)
            elif isinstance(value, str) and value.endswith(".md"):
                yield value

    return list(walk(load_config(str(REPO_ROOT / "mkdocs.yml"))["nav"] or []))


def read_log(out: Path) -> list[dict]:
    """The rows of a training run's log.jsonl."""
    lines = (out / "log.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines]


def assert_same(a, b, where: str = "") -> None:
    """Nested dicts/lists of tensors and numbers are exactly equal."""
    import torch

    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype, where
        assert torch.equal(a, b), where
    elif isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), where
        for k in a:
            assert_same(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, (list, tuple)):
        assert isinstance(b, (list, tuple)) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same(x, y, f"{where}[{i}]")
    else:
        assert a == b, f"{where}: {a!r} != {b!r}"


class StopAfter:
    """Stands in for harness.StopFlag (``StopFlag()``, or ``StopFlag(world, device)`` in
    stage 5): 'Ctrl-C' arrives after ``n`` steps."""

    def __init__(self, n: int):
        self.n, self.checks, self.world = n, 0, None

    def __call__(self, world: int = 1, device: str = "cpu"):
        self.world = world
        return self

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    @property
    def stop(self) -> bool:
        self.checks += 1
        return self.checks > self.n

    pressed = stop  # stages 2-4 ask ``pressed``; stage 5 ``stop`` (all processes)


@pytest.fixture(scope="session")
def chromium_profile(tmp_path_factory) -> Path:
    """The browser tests' Chromium profile, shared by their modules (one at a time: each
    module's context closes with it), so compiled scripts stay cached from one to the next."""
    return tmp_path_factory.mktemp("chromium-profile")
