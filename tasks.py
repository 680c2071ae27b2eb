"""Set up and run the project with Python alone, on Linux, macOS and Windows.

    python tasks.py train        # a .venv with what training needs, then stage 5 on the built-in corpus
    python tasks.py test         # the fast test suite (installs the test and docs tools first)
    python tasks.py test-slow    # what takes longer: the grader's mutation suite, torchrun, ...
    python tasks.py docs         # both editions of the course into site/ (mkdocs build --strict)
    python tasks.py docs-serve   # the course on http://127.0.0.1:8000
    python tasks.py lint         # ruff
    python tasks.py gpt2         # installs what --init-from gpt2 needs, and stops
    python tasks.py train --cpu-torch   # Linux without an NVIDIA GPU: PyTorch's CPU build

On Windows type ``py tasks.py train``; on Linux and macOS ``make train`` runs this same
file (the Makefile only calls it), so the two cannot drift apart. Options this file does
not know go on to the command: ``python tasks.py train --preset tang-2min``,
``python tasks.py test -k bpe``. ``--only-install`` sets .venv up and stops.

What each command installs into ``.venv`` the first time, and again when pyproject.toml
changes: ``train`` PyTorch and the project; ``test`` and ``docs`` their tools as well
(pytest, mkdocs, ...). ``--cpu-torch`` (or CPU_TORCH=1) asks PyTorch's own index for the
CPU build (about 200 MB) instead of the default one, which on Linux is a CUDA build with
several GB of NVIDIA libraries, of no use without an NVIDIA GPU. It acts on the first
install: to switch an existing .venv, delete it (``make clean``) and run again.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
TRAINS = (3, 10)  # training, sampling and every stage's code
BUILDS = (3, 11)  # the test and docs tools: mkdocs-material 9.8 needs Python 3.11
TORCH = os.environ.get("TORCH", "torch==2.13.0")  # the version the docs' numbers were made with
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
EXTRAS = {"train": "", "test": "test,docs,gpt2", "test-slow": "test,docs,gpt2",
          "docs": "docs", "docs-serve": "docs", "lint": "test", "gpt2": "gpt2"}


def fail(message: str) -> None:
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


def needs(command: str) -> tuple[int, int]:
    """The oldest Python ``command`` runs on: 3.10 for training, 3.11 for the test and docs tools."""
    return BUILDS if EXTRAS.get(command, "") not in ("", "gpt2") else TRAINS


def check_python(version: tuple[int, int] = sys.version_info[:2], command: str = "train") -> None:
    """One line before anything installs: this Python is too old for ``command``."""
    need = needs(command)
    if version < need:
        fail(f"`{command}` needs Python {need[0]}.{need[1]} or newer; this is "
             f"{version[0]}.{version[1]} ({sys.executable}). Install a newer Python (python.org, "
             "or your system's packages) and run this file with it."
             + (" Training alone needs 3.10." if need == BUILDS else ""))


def check_machine(system: str | None = None, machine: str | None = None) -> None:
    """One line before anything installs: PyTorch has no build for this machine."""
    system, machine = system or platform.system(), machine or platform.machine()
    if system == "Darwin" and machine.lower() in ("x86_64", "i386"):
        fail("PyTorch makes no build for Intel Macs since 2.2, and the course needs 2.4 or "
             "newer. Use the hosted-GPU notebook (notebooks/colab.ipynb) or Linux in a "
             "container (README, macOS). On an Apple silicon Mac, this Python runs under "
             "Rosetta: install an arm64 Python (python.org) and use it.")


def truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "yes", "true", "on")


def venv_python(venv: Path | None = None) -> Path:
    """The virtual environment's Python: Scripts\\python.exe on Windows, bin/python elsewhere."""
    return (venv or VENV) / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def shown(path: Path) -> str:
    """``path`` as a reader types it from the repository root (.venv/bin/python,
    .venv\\Scripts\\python.exe)."""
    try:
        path = path.relative_to(ROOT)
    except ValueError:
        return str(path)
    return str(path).replace("/", "\\") if os.name == "nt" else path.as_posix()


def install_commands(extras: str, cpu_torch: bool, python: Path) -> list[list[str]]:
    """The pip commands that install PyTorch first (the pinned version; from its CPU index
    with ``cpu_torch``), then the project with ``extras``: pip then keeps that PyTorch,
    which satisfies the project's open requirement. No --quiet: pip's progress bars show
    the download (PyTorch is hundreds of MB to several GB)."""
    pip = [str(python), "-m", "pip", "install"]
    torch = pip + [TORCH] + (["--index-url", CPU_INDEX] if cpu_torch else [])
    return [torch, pip + ["-e", f".[{extras}]" if extras else "."]]


def stamp_path(venv: Path | None = None) -> Path:
    return (venv or VENV) / ".installed.json"


def pyproject_key(root: Path | None = None) -> str:
    return hashlib.sha256(((root or ROOT) / "pyproject.toml").read_bytes()).hexdigest()


def read_stamp(venv: Path | None = None) -> dict:
    try:
        return json.loads(stamp_path(venv).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def to_install(extras: str, stamp: dict, key: str) -> str | None:
    """What to install so that ``extras`` are there: None when the stamp (same
    pyproject.toml, a superset of the extras) says they already are, else the union of
    what is wanted and what the stamp says is there (so a ``test`` after a ``train`` keeps
    both, and a ``train`` after a ``test`` installs nothing)."""
    wanted = {e for e in extras.split(",") if e}
    had = set(stamp.get("extras", [])) if stamp.get("pyproject") == key else set()
    if stamp.get("pyproject") == key and wanted <= had:
        return None
    return ",".join(sorted(wanted | had))


def make_venv(venv: Path | None = None) -> None:
    venv = venv or VENV
    print(f"making {venv} ...", flush=True)
    made = subprocess.run([sys.executable, "-m", "venv", str(venv)]).returncode == 0
    if made:
        made = subprocess.run([str(venv_python(venv)), "-m", "pip", "--version"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0
    if not made:  # half a venv (no pip) would fail on every later run: leave none
        shutil.rmtree(venv, ignore_errors=True)
        fail(f"`{sys.executable} -m venv` could not make a virtual environment with pip. On "
             f"Debian and Ubuntu: sudo apt install python{sys.version_info[0]}."
             f"{sys.version_info[1]}-venv, then run this again.")


def ensure(extras: str, cpu_torch: bool, venv: Path | None = None) -> Path:
    """.venv with ``extras`` installed; done again when pyproject.toml changes."""
    venv = venv or VENV
    key, python, stamp = pyproject_key(), venv_python(venv), read_stamp(venv)
    if python.is_file() and stamp:
        if cpu_torch and not stamp.get("cpu_torch"):
            print(f"note: {shown(venv)} already has PyTorch's default build; --cpu-torch acts on "
                  "a new one: delete .venv (make clean) and run again to switch.", flush=True)
        extras = to_install(extras, stamp, key)
        if extras is None:
            return python
        cpu_torch = stamp.get("cpu_torch", cpu_torch)  # keep the build it has
    if not python.is_file():
        make_venv(venv)
    for command in install_commands(extras, cpu_torch, python):
        print("$", " ".join(command), flush=True)  # pip shows its own progress bars
        if subprocess.run(command, cwd=ROOT).returncode:
            fail("the install above failed; its last lines say why (no network? a Python or a "
                 "machine PyTorch has no build for, such as an Intel Mac?). Fix that and run the "
                 "same command again.")
    stamp_path(venv).write_text(json.dumps({
        "pyproject": key, "extras": sorted(e for e in extras.split(",") if e),
        "cpu_torch": cpu_torch}), encoding="utf-8")
    return python


def run(python: Path, *args: str) -> int:
    return subprocess.run([str(python), *args], cwd=ROOT, env={
        **os.environ, "NO_MKDOCS_2_WARNING": "1"}).returncode


def next_step(python: Path, environ=None) -> str:
    """The line `train` ends with: the two-minute preset of a classic corpus, the Tang
    poems for a Chinese locale, Tiny Shakespeare otherwise."""
    environ = os.environ if environ is None else environ
    chinese = any(environ.get(k, "").startswith("zh") for k in ("LC_ALL", "LANG"))
    what, preset = (("Tang poems", "tang-2min") if chinese
                    else ("Tiny Shakespeare", "shakespeare-2min"))
    return (f"Next, {what} in about two minutes: {shown(python)} -m stage5_gpt.train "
            f"--preset {preset}")


def parse(argv: list[str] | None = None) -> tuple[argparse.Namespace, list[str]]:
    p = argparse.ArgumentParser(prog="python tasks.py", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 1)[1], allow_abbrev=False)
    p.add_argument("command", choices=sorted(EXTRAS))
    p.add_argument("--cpu-torch", action="store_true",
                   help="install PyTorch's CPU build (Linux without an NVIDIA GPU); "
                        "CPU_TORCH=1 does the same")
    p.add_argument("--only-install", action="store_true",
                   help="set .venv up for the command, and stop there")
    args, rest = p.parse_known_args(argv)
    args.cpu_torch = args.cpu_torch or truthy(os.environ.get("CPU_TORCH"))
    return args, rest


def main(argv: list[str] | None = None) -> int:
    args, rest = parse(argv)
    check_python(command=args.command)
    check_machine()
    python = ensure(EXTRAS[args.command], args.cpu_torch)
    if args.only_install:
        return 0
    if args.command == "train":
        code = run(python, "-m", "stage5_gpt.train", *rest)
        if code == 0:
            print(next_step(python))
        return code
    if args.command == "test":
        return run(python, "-m", "pytest", "-m", "not slow", "-n", "auto", "--dist", "loadfile",
                   *rest)
    if args.command == "test-slow":
        return run(python, "-m", "pytest", "-m", "slow", *rest)
    if args.command == "docs":
        return (run(python, "-m", "mkdocs", "build", "--strict", *rest)
                or run(python, "-m", "mkdocs", "build", "--strict", "-f", "mkdocs.zh.yml", *rest))
    if args.command == "docs-serve":
        return run(python, "-m", "mkdocs", "serve", *rest)
    if args.command == "lint":
        return run(python, "-m", "ruff", "check", ".", *rest)
    return 0  # gpt2: the install alone


if __name__ == "__main__":
    sys.exit(main())
