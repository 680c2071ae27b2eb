"""tasks.py, the Python-only entry point the Makefile calls: what it installs for each
command and flag, the one-line Python check before anything installs, the stamp that
says what .venv already has, and the Windows paths (os.name faked)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import tasks  # noqa: E402

PYENV = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv") / "versions"  # pyenv's place


def old_python(prefix: str) -> str | None:
    """A pyenv Python whose version starts with ``prefix`` (3.9, 3.10), if this machine has one."""
    found = sorted(PYENV.glob(f"{prefix}.*/bin/python")) if PYENV.is_dir() else []
    return str(found[-1]) if found else shutil.which(f"python{prefix}")


def run_tasks(python: str, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([python, str(cwd / "tasks.py"), *args], cwd=cwd,
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("version, command, needed", [
    ("3.9", "train", "3.10"), ("3.9", "test", "3.11"), ("3.10", "test", "3.11"),
    ("3.10", "docs", "3.11")])
def test_too_old_a_python_is_one_line_before_anything_installs(tmp_path, version, command, needed):
    python = old_python(version)
    if python is None:
        pytest.skip(f"no Python {version} on this machine")
    shutil.copy(ROOT / "tasks.py", tmp_path)
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    done = run_tasks(python, command, cwd=tmp_path)
    assert done.returncode == 2 and done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"error: `{command}` needs Python {needed} or newer; "
                               f"this is {version} ")
    if needed == "3.11":
        assert lines[0].endswith("Training alone needs 3.10.")
    assert not (tmp_path / ".venv").exists()  # nothing was made or installed


def test_the_check_in_process():
    tasks.check_python((3, 10), "train")
    tasks.check_python((3, 11), "test")
    tasks.check_python((3, 10), "gpt2")
    for version, command in (((3, 9), "train"), ((3, 10), "test"), ((3, 10), "lint")):
        with pytest.raises(SystemExit) as stop:
            tasks.check_python(version, command)
        assert stop.value.code == 2


def test_the_floors_match_pyproject_and_the_docs_pins():
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert meta["requires-python"] == ">={}.{}".format(*tasks.TRAINS)
    assert "mkdocs-material==9.8.2" in meta["optional-dependencies"]["docs"]  # needs 3.11
    assert tasks.BUILDS == (3, 11)


# --- what each command installs -------------------------------------------------------

class Recorder:
    """subprocess.run for tasks.py: records every command; `venv` makes the venv's Python."""

    def __init__(self, fail_on: str | None = None):
        self.commands: list[list[str]] = []
        self.fail_on = fail_on

    def __call__(self, command, **kwargs):
        command = [str(c) for c in command]
        self.commands.append(command)
        if self.fail_on and self.fail_on in command:
            return types.SimpleNamespace(returncode=1)
        if command[1:3] == ["-m", "venv"]:
            python = tasks.venv_python(Path(command[3]))
            python.parent.mkdir(parents=True)
            python.write_text("")
        return types.SimpleNamespace(returncode=0)

    def pip_installs(self) -> list[list[str]]:
        return [c[4:] for c in self.commands if c[1:4] == ["-m", "pip", "install"]]


@pytest.fixture
def fake(tmp_path, monkeypatch):
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    monkeypatch.setattr(tasks, "ROOT", tmp_path)
    monkeypatch.setattr(tasks, "VENV", tmp_path / ".venv")
    monkeypatch.delenv("CPU_TORCH", raising=False)
    recorder = Recorder()
    monkeypatch.setattr(tasks.subprocess, "run", recorder)
    return recorder


def test_train_installs_torch_then_the_project_without_any_extra(fake):
    assert tasks.main(["train", "--only-install"]) == 0
    assert fake.commands[0][1:] == ["-m", "venv", str(tasks.VENV)]
    assert fake.pip_installs() == [["torch==2.13.0"], ["-e", "."]]
    for command in fake.commands:
        assert "--quiet" not in command and "-q" not in command  # pip's progress bars show


def test_what_training_installs_has_no_test_or_docs_tool():
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    names = " ".join(meta["dependencies"]).lower()
    for tool in ("pytest", "mkdocs", "playwright", "transformers", "ruff", "hypothesis"):
        assert tool not in names
    assert tasks.EXTRAS["train"] == ""


@pytest.mark.parametrize("argv, env, extras, cpu", [
    (["test"], {}, ".[test,docs,gpt2]", False),
    (["test-slow"], {}, ".[test,docs,gpt2]", False),
    (["docs"], {}, ".[docs]", False),
    (["docs-serve"], {}, ".[docs]", False),
    (["lint"], {}, ".[test]", False),
    (["gpt2"], {}, ".[gpt2]", False),
    (["train", "--cpu-torch"], {}, ".", True),
    (["--cpu-torch", "train"], {}, ".", True),  # as the Makefile writes it
    (["train"], {"CPU_TORCH": "1"}, ".", True),
    (["train"], {"CPU_TORCH": "0"}, ".", False),
    (["test", "--cpu-torch"], {}, ".[test,docs,gpt2]", True),
])
def test_install_commands_per_command_and_flag(fake, monkeypatch, argv, env, extras, cpu):
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert tasks.main([*argv, "--only-install"]) == 0
    torch = ["torch==2.13.0"] + (["--index-url", "https://download.pytorch.org/whl/cpu"]
                                 if cpu else [])
    assert fake.pip_installs() == [torch, ["-e", extras]]
    # --only-install stops there: nothing is run after the installs
    assert all(c[1:3] in (["-m", "venv"], ["-m", "pip"]) for c in fake.commands)


@pytest.mark.parametrize("argv, runs", [
    (["train", "--preset", "tang-2min", "--cpu-torch"],
     ["-m", "stage5_gpt.train", "--preset", "tang-2min"]),
    (["test", "-k", "bpe", "-x"],
     ["-m", "pytest", "-m", "not slow", "-n", "auto", "--dist", "loadfile", "-k", "bpe", "-x"]),
    (["test-slow"], ["-m", "pytest", "-m", "slow"]),
    (["lint"], ["-m", "ruff", "check", "."]),
    (["docs-serve"], ["-m", "mkdocs", "serve"]),
])
def test_what_each_command_runs_after_installing(fake, argv, runs):
    assert tasks.main(argv) == 0
    assert fake.commands[-1] == [str(tasks.venv_python()), *runs]


def test_docs_builds_both_editions_strictly(fake):
    assert tasks.main(["docs"]) == 0
    python = str(tasks.venv_python())
    assert fake.commands[-2:] == [[python, "-m", "mkdocs", "build", "--strict"],
                                  [python, "-m", "mkdocs", "build", "--strict", "-f",
                                   "mkdocs.zh.yml"]]


def test_a_failed_install_is_one_line_and_leaves_no_stamp(fake, capsys):
    fake.fail_on = "torch==2.13.0"
    with pytest.raises(SystemExit) as stop:
        tasks.main(["train"])
    assert stop.value.code == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("error: the install above failed")
    assert not tasks.stamp_path().exists()


def test_no_venv_module_is_one_line_and_leaves_no_half_venv(fake, capsys):
    fake.fail_on = "venv"
    with pytest.raises(SystemExit):
        tasks.main(["train"])
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "sudo apt install python3." in err[0] and err[0].endswith("-venv, then run this again.")
    assert not tasks.VENV.exists()


# --- the stamp: what .venv has ----------------------------------------------------------

@pytest.mark.parametrize("wanted, stamp, expected", [
    ("", {}, ""),
    ("", {"pyproject": "k", "extras": []}, None),
    ("", {"pyproject": "k", "extras": ["docs", "gpt2", "test"]}, None),  # train after test
    ("test,docs,gpt2", {"pyproject": "k", "extras": []}, "docs,gpt2,test"),
    ("docs", {"pyproject": "k", "extras": ["gpt2"]}, "docs,gpt2"),  # keeps what it had
    ("docs", {"pyproject": "old", "extras": ["gpt2"]}, "docs"),  # pyproject.toml changed
    ("", {"pyproject": "old", "extras": []}, ""),
])
def test_to_install(wanted, stamp, expected):
    assert tasks.to_install(wanted, stamp, "k") == expected


def test_the_stamp_across_commands(fake, capsys):
    tasks.main(["train", "--only-install"])
    assert json.loads(tasks.stamp_path().read_text()) == {
        "pyproject": tasks.pyproject_key(), "extras": [], "cpu_torch": False}
    fake.commands.clear()
    tasks.main(["train", "--only-install"])
    assert fake.commands == []  # nothing to do
    tasks.main(["docs", "--only-install"])
    assert fake.pip_installs() == [["torch==2.13.0"], ["-e", ".[docs]"]]
    fake.commands.clear()
    tasks.main(["train", "--only-install"])
    assert fake.commands == []  # docs' install has what train needs
    tasks.main(["gpt2", "--only-install"])
    assert fake.pip_installs()[-1] == ["-e", ".[docs,gpt2]"]  # docs is kept
    fake.commands.clear()
    (tasks.ROOT / "pyproject.toml").write_text("[project]\nname = 'y'\n")
    tasks.main(["train", "--only-install"])
    assert fake.pip_installs() == [["torch==2.13.0"], ["-e", "."]]
    assert not any(c[1:3] == ["-m", "venv"] for c in fake.commands)  # the same .venv
    capsys.readouterr()
    fake.commands.clear()
    tasks.main(["train", "--only-install", "--cpu-torch"])  # a .venv with the default build
    assert fake.commands == [] and "make clean" in capsys.readouterr().out


def test_a_venv_made_with_the_cpu_build_keeps_it(fake):
    tasks.main(["train", "--only-install", "--cpu-torch"])
    fake.commands.clear()
    tasks.main(["docs", "--only-install"])
    assert fake.pip_installs()[0][-2:] == ["--index-url", tasks.CPU_INDEX]


# --- Windows and the Makefile -----------------------------------------------------------

@pytest.fixture
def windows(monkeypatch):
    monkeypatch.setattr(tasks, "os", types.SimpleNamespace(name="nt", environ=os.environ))


def test_the_venv_python_on_windows(windows):
    python = tasks.venv_python()
    assert python.parts[-3:] == (".venv", "Scripts", "python.exe")
    assert tasks.shown(python) == r".venv\Scripts\python.exe"
    assert tasks.next_step(python, {}) == (r"Next, Tiny Shakespeare in about two minutes: "
                                           r".venv\Scripts\python.exe -m stage5_gpt.train "
                                           r"--preset shakespeare-2min")


def test_the_venv_python_elsewhere():
    python = tasks.venv_python()
    assert tasks.shown(python) == ".venv/bin/python"
    assert tasks.next_step(python, {"LANG": "zh_CN.UTF-8"}).startswith(
        "Next, Tang poems in about two minutes: .venv/bin/python -m stage5_gpt.train "
        "--preset tang-2min")


# `make -n` as a reader types it, also when the tests themselves run under `make test`
# (a parent make's MAKEFLAGS would add "Entering directory" lines).
MAKE_N = ["make", "--no-print-directory", "-n"]
MAKE_ENV = ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
@pytest.mark.parametrize("args, expected", [
    ([], "python3 tasks.py train"),
    (["CPU_TORCH=1"], "python3 tasks.py --cpu-torch train"),
    (["CPU_TORCH=yes"], "python3 tasks.py --cpu-torch train"),
    (["CPU_TORCH=0"], "python3 tasks.py train"),
    (["PYTHON=python3.10"], "python3.10 tasks.py train"),
])
def test_make_train_calls_tasks_py(args, expected):
    env = {k: v for k, v in os.environ.items() if k not in ("CPU_TORCH", "PYTHON", *MAKE_ENV)}
    out = subprocess.run([*MAKE_N, "train", *args], cwd=ROOT, env=env,
                         capture_output=True, text=True, check=True).stdout
    assert out.splitlines() == [expected]


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
@pytest.mark.parametrize("target, install", [
    ("test", "test"), ("test-slow", "test-slow"), ("docs", "docs"), ("lint", "lint"),
    ("workbook", "test --only-install"), ("grade", "test --only-install"),
    ("bench", "train --only-install")])
def test_every_make_target_sets_itself_up_through_tasks_py(target, install):
    env = {k: v for k, v in os.environ.items() if k not in MAKE_ENV}
    out = subprocess.run([*MAKE_N, target], cwd=ROOT, env=env, capture_output=True, text=True,
                         check=True).stdout.splitlines()
    assert out[0].endswith(f"tasks.py {install}")


def test_flags_after_the_command_are_tasks_flags_and_the_rest_goes_on():
    args, rest = tasks.parse(["test", "--only-install", "-k", "x"])
    assert args.only_install and rest == ["-k", "x"]
    args, rest = tasks.parse(["train", "--preset", "tang-2min", "--cpu-torch"])
    assert args.cpu_torch and rest == ["--preset", "tang-2min"]
    args, rest = tasks.parse(["test", "--", "--only-install"])  # after --: pytest's
    assert not args.only_install and rest == ["--only-install"]


def test_an_intel_mac_is_told_in_one_line_before_anything_installs(fake, monkeypatch, capsys):
    monkeypatch.setattr(tasks.platform, "system", lambda: "Darwin")
    monkeypatch.setattr(tasks.platform, "machine", lambda: "x86_64")
    with pytest.raises(SystemExit) as stop:
        tasks.main(["train"])
    assert stop.value.code == 2 and fake.commands == []
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("error: PyTorch makes no build for Intel Macs")
    tasks.check_machine("Darwin", "arm64")
    tasks.check_machine("Windows", "AMD64")
    tasks.check_machine("Linux", "x86_64")
