"""Runs where learners are: the error paths that must end in one line, the Windows code
paths (os.name faked), output on a console that is not UTF-8, no links in the tree, the
GPU check script (on the CPU here), the hosted-GPU notebook (executed with nbclient on the
CPU) and the CI workflow that publishes the course.

Ctrl-C's exit code, 130 with or without torchrun: tests/test_stage2_cli.py,
tests/test_stage5_train.py (one process) and tests/test_distributed.py (torchrun).
"""

from __future__ import annotations

import errno
import importlib
import importlib.util
import os
import re
import shutil
import ssl
import subprocess
import sys
import types
import urllib.error
from pathlib import Path

import pytest
import torch
from conftest import REPO_ROOT, assert_user_error, module_env, run_module

STAGES = ("stage1_data", "stage2_bigram", "stage3_attention", "stage4_block", "stage5_gpt")
TRAINED = STAGES[1:]
TINY5 = ("--data", "en", "--n-layer", "1", "--n-head", "2", "--n-embd", "16", "--block-size",
         "16", "--batch-size", "4", "--max-iters", "6", "--eval-interval", "3", "--eval-iters",
         "2", "--warmup-iters", "1", "--sample-tokens", "10", "--threads", "1", "--device", "cpu")


# --- a full disk while a checkpoint is written ------------------------------------------

@pytest.mark.parametrize("stage", TRAINED)
@pytest.mark.parametrize("error", [
    RuntimeError("[enforce fail at inline_container.cc:626] . unexpected pos 64 vs 0\n"
                 "frame #0: c10::ThrowEnforceNotMet(...)"),  # what torch.save raises
    OSError(errno.ENOSPC, "No space left on device"),
])
def test_a_full_disk_during_a_checkpoint_is_one_line_and_keeps_the_old_one(
        stage, error, tmp_path, monkeypatch):
    checkpoint = importlib.import_module(f"{stage}.checkpoint")
    errors = importlib.import_module(f"{stage}.errors")
    path = tmp_path / "ckpt.pt"
    path.write_bytes(b"the last checkpoint written whole")

    def full(*args, **kwargs):
        Path(args[1]).write_bytes(b"half")  # what a full disk leaves
        raise error

    monkeypatch.setattr(checkpoint.torch, "save", full)
    model = types.SimpleNamespace(config=types.SimpleNamespace(), state_dict=dict)
    monkeypatch.setattr(checkpoint, "asdict", lambda config: {})
    with pytest.raises(errors.UserError) as e:
        checkpoint.save_checkpoint(path, model, types.SimpleNamespace(chars="ab"), 7)
    message = str(e.value)
    assert "\n" not in message and "Is the disk full?" in message and str(path) in message
    assert path.read_bytes() == b"the last checkpoint written whole"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt.pt"]  # no half file left


def test_a_full_disk_in_training_ends_in_one_error_line(tmp_path):
    """The whole CLI: torch.save fails (as on a full disk) at the first checkpoint."""
    code = ("import sys, torch\n"
            "def full(*a, **k): raise RuntimeError('PytorchStreamWriter failed writing file "
            "data/3: file write failed')\n"
            "torch.save = full\n"
            "from stage5_gpt.train import main\n"
            "sys.exit(main(sys.argv[1:]))\n")
    done = subprocess.run([sys.executable, "-c", code, *TINY5, "--out-dir", str(tmp_path)],
                          cwd=REPO_ROOT, env=module_env(), capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2
    assert_user_error(done.stderr, "Is the disk full?", "file write failed")
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


# --- downloads: a read-only cache, a certificate failure, offline ----------------------

@pytest.mark.parametrize("stage", STAGES)
def test_a_cache_folder_that_cannot_be_made_is_one_line(stage, tmp_path, monkeypatch):
    download = importlib.import_module(f"{stage}.download")
    errors = importlib.import_module(f"{stage}.errors")

    def read_only(self, *args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system", str(self))

    monkeypatch.setattr(Path, "mkdir", read_only)
    with pytest.raises(errors.UserError) as e:
        download.download("https://example.invalid/x.txt", tmp_path / "c" / "x.txt", "0" * 64)
    message = str(e.value)
    assert "\n" not in message and "Read-only file system" in message
    assert "GPT_STAGES_CACHE" in message


@pytest.mark.parametrize("stage", STAGES)
def test_a_cache_folder_it_may_not_write_is_one_line(stage, tmp_path, monkeypatch):
    download = importlib.import_module(f"{stage}.download")
    errors = importlib.import_module(f"{stage}.errors")
    opened = Path.open

    def no_write(self, mode="r", *args, **kwargs):
        if "w" in mode:
            raise PermissionError(errno.EACCES, "Permission denied", str(self))
        return opened(self, mode, *args, **kwargs)

    class Response:
        headers = {"Content-Length": "3"}

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def read(self, n):
            return b""

    monkeypatch.setattr(download.urllib.request, "urlopen", lambda *a, **k: Response())
    monkeypatch.setattr(Path, "open", no_write)
    with pytest.raises(errors.UserError) as e:
        download.download("https://example.invalid/x.txt", tmp_path / "x.txt", "0" * 64)
    assert "\n" not in str(e.value) and "Permission denied" in str(e.value)
    assert "GPT_STAGES_CACHE" in str(e.value)


def test_a_cache_path_that_is_a_file_ends_the_cli_in_one_line(tmp_path):
    """Not faked: GPT_STAGES_CACHE under a file, so its folder cannot be made (as root too)."""
    (tmp_path / "file").write_text("")
    done = run_module("stage1_data", "--data", "shakespeare",
                      env=module_env(GPT_STAGES_CACHE=str(tmp_path / "file" / "cache")))
    assert done.returncode == 2
    assert_user_error(done.stderr, "cannot create the cache folder", "GPT_STAGES_CACHE")
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


def certificate_error() -> ssl.SSLCertVerificationError:
    e = ssl.SSLCertVerificationError(1, "[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify "
                                        "failed: unable to get local issuer certificate")
    e.verify_message, e.verify_code = "unable to get local issuer certificate", 20
    return e


@pytest.mark.parametrize("stage", STAGES)
@pytest.mark.parametrize("reason, says, not_says", [
    (certificate_error(), "HTTPS certificate could not be verified (unable to get local "
                          "issuer certificate)", "offline"),
    (OSError(-3, "Temporary failure in name resolution"), "are you offline?", "certificate"),
])
def test_a_certificate_failure_is_not_called_offline(stage, reason, says, not_says, tmp_path,
                                                     monkeypatch):
    download = importlib.import_module(f"{stage}.download")
    errors = importlib.import_module(f"{stage}.errors")

    def fail(*args, **kwargs):
        raise urllib.error.URLError(reason)

    monkeypatch.setattr(download.urllib.request, "urlopen", fail)
    with pytest.raises(errors.UserError) as e:
        download.download("https://example.invalid/x.txt", tmp_path / "x.txt", "0" * 64,
                          local="--data FILE")
    message = str(e.value)
    assert "\n" not in message and says in message and not_says not in message
    assert "--data FILE" in message
    assert list(tmp_path.iterdir()) == []  # no .part file left


# --- --help: what it shows can be copied ------------------------------------------------

def test_the_presets_in_help_are_flags_that_parse():
    from stage5_gpt import presets
    from stage5_gpt.train import build_parser

    parser = build_parser()
    assert "--bias False" not in " ".join(parser.format_help().split())
    text = next(a.help for a in parser._actions if a.dest == "preset")  # before wrapping
    assert "--no-bias" in text
    for name, settings in presets.PRESETS.items():
        flags = " ".join(presets.as_flag(k, v) for k, v in settings.items())
        assert f"{name}: {flags}" in text  # shown as typed
        args = parser.parse_args(flags.split())
        for key, value in settings.items():
            assert getattr(args, key) == value, (name, key)


@pytest.mark.parametrize("stage", TRAINED)
@pytest.mark.parametrize("columns", ["60", "80", "100"])
def test_help_never_wraps_inside_a_flag_name(stage, columns, monkeypatch):
    """argparse wraps after hyphens too: --eval-interval would print as --eval- / interval."""
    monkeypatch.setenv("COLUMNS", columns)
    parser = importlib.import_module(f"{stage}.train").build_parser()
    lines = parser.format_help().splitlines()
    cut = [line for line in lines if re.search(r"[A-Za-z]-$", line)]
    assert cut == [], cut
    assert any(len(line) > int(columns) - 12 for line in lines)  # it did wrap


# --- downloads: a bar on a terminal only -------------------------------------------------

@pytest.mark.parametrize("stage", STAGES)
@pytest.mark.parametrize("terminal", [True, False])
def test_a_download_bar_is_drawn_on_a_terminal_only(stage, terminal, tmp_path, monkeypatch,
                                                    capsys):
    download = importlib.import_module(f"{stage}.download")
    src = tmp_path / "remote.txt"
    src.write_bytes(b"x" * 4096)
    monkeypatch.setattr(download, "BAR_FROM", 1)  # a bar even for this small file
    monkeypatch.setattr(sys.stderr, "isatty", lambda: terminal)
    import hashlib
    download.download(src.as_uri(), tmp_path / "cache" / "x.txt",
                      hashlib.sha256(src.read_bytes()).hexdigest())
    assert ("downloading" in capsys.readouterr().err) == terminal


# --- text UTF-8 cannot encode, e.g. undecodable bytes in a command line -----------------

@pytest.mark.parametrize("stage", STAGES)
def test_bpe_of_a_lone_surrogate_is_a_user_error(stage):
    bpe = importlib.import_module(f"{stage}.bpe")
    errors = importlib.import_module(f"{stage}.errors")
    tok = bpe.BPETokenizer.train("ab ab ab", 1)
    with pytest.raises(errors.UserError, match=r"UTF-8 cannot encode \('\\udcff' at position 2\)"):
        tok.encode("ab\udcff")
    assert tok.decode(tok.encode("ab ab")) == "ab ab"


# --- torchrun: more processes than GPUs -------------------------------------------------

@pytest.mark.parametrize("gpus", [0, 1])
def test_torchrun_with_more_processes_than_gpus_is_one_line(gpus, monkeypatch):
    from stage5_gpt import harness
    from stage5_gpt.errors import UserError

    for name, value in (("WORLD_SIZE", "2"), ("LOCAL_WORLD_SIZE", "2"), ("LOCAL_RANK", "1")):
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(harness.torch.cuda, "device_count", lambda: gpus)
    monkeypatch.setattr(harness.torch.cuda, "set_device", lambda d: pytest.fail("set_device"))
    with pytest.raises(UserError) as e:
        harness.start_distributed("cuda", 4)
    assert str(e.value) == (f"torchrun started 2 processes on this machine, which has {gpus} "
                            f"GPU{'s' * (gpus != 1)}: pass --nproc_per_node {gpus} or fewer "
                            "(one process per GPU).")


# --- what a run prints: no progress-bar frames into a log, the last losses once ----------

def test_a_redirected_run_has_no_bar_frames_and_its_last_losses_once(tmp_path):
    done = run_module("stage5_gpt.train", *TINY5, "--out-dir", tmp_path)
    assert done.returncode == 0, done.stderr
    assert "\r" not in done.stderr and "training:" not in done.stderr, done.stderr
    assert done.stdout.count("best val loss") == 1
    last = [line for line in done.stdout.splitlines() if line.startswith("step")][-1]
    assert last.startswith("step     6:") and done.stdout.count(last) == 1


@pytest.mark.skipif(os.name != "posix", reason="a pseudo-terminal")
def test_on_a_terminal_the_bar_shows(tmp_path):
    """The other side of the test above: the same run with stderr on a terminal."""
    import fcntl
    import pty
    import struct
    import termios

    main, child = pty.openpty()
    fcntl.ioctl(child, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))  # 0x0 hides it
    proc = subprocess.Popen([sys.executable, "-m", "stage5_gpt.train", *TINY5,
                             "--out-dir", str(tmp_path)], cwd=REPO_ROOT, env=module_env(),
                            stdout=subprocess.DEVNULL, stderr=child)
    os.close(child)
    seen = b""
    while True:
        try:
            chunk = os.read(main, 4096)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        seen += chunk
    os.close(main)
    assert proc.wait(timeout=120) == 0
    assert b"training:" in seen and b"\r" in seen


# --- a console that is not UTF-8 (Windows' cp1252) --------------------------------------

@pytest.mark.parametrize("module, args", [("stage1_data", ("--data", "zh")),
                                          ("stage1_data.bpe", ("--data", "zh", "--merges", "20"))])
def test_chinese_prints_on_a_cp1252_console(module, args):
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"no {module}")
    done = subprocess.run([sys.executable, "-m", module, *args], cwd=REPO_ROOT,
                          env=module_env(PYTHONIOENCODING="cp1252"), capture_output=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr.decode("utf-8", "replace")
    out = done.stdout.decode("utf-8")  # UTF-8, not cp1252, and no UnicodeEncodeError
    assert re.search("[\u4e00-\u9fff]", out)


# --- Windows: the process check and the retried replace ---------------------------------

class Kernel32:
    """Windows' kernel32 for _running_on_windows: process 5 runs, 6 has exited."""

    def __init__(self):
        self.closed = []

    def OpenProcess(self, access, inherit, pid):  # noqa: N802 (Windows' names)
        return {5: 105, 6: 106}.get(pid, 0)

    def GetExitCodeProcess(self, handle, code):  # noqa: N802
        code._obj.value = 259 if handle == 105 else 0  # STILL_ACTIVE

    def CloseHandle(self, handle):  # noqa: N802
        self.closed.append(handle)


@pytest.mark.parametrize("stage", TRAINED)
def test_the_process_check_asks_windows_and_sends_no_signal(stage, monkeypatch, tmp_path):
    checkpoint = importlib.import_module(f"{stage}.checkpoint")
    kernel32 = Kernel32()
    assert checkpoint._running_on_windows(5, kernel32) is True
    assert checkpoint._running_on_windows(6, kernel32) is False
    assert checkpoint._running_on_windows(7, kernel32) is False
    assert kernel32.closed == [105, 106]

    def no_kill(*args):
        raise AssertionError("os.kill on Windows sends Ctrl-C")

    monkeypatch.setattr(checkpoint, "os", types.SimpleNamespace(
        name="nt", getpid=os.getpid, kill=no_kill))
    monkeypatch.setattr(checkpoint, "_running_on_windows", lambda pid: kernel32.OpenProcess(
        0, False, pid) == 105)
    for pid in (5, 6, 7):
        (tmp_path / f"ckpt.pt.{pid}.tmp").write_bytes(b"")
    removed = checkpoint.remove_stale_tmp(tmp_path)
    assert sorted(p.name for p in removed) == ["ckpt.pt.6.tmp", "ckpt.pt.7.tmp"]
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt.pt.5.tmp"]


@pytest.mark.parametrize("stage", STAGES)
def test_replace_waits_while_another_program_holds_the_file(stage, monkeypatch, tmp_path):
    download = importlib.import_module(f"{stage}.download")
    real, tries = os.replace, []

    def held(a, b):
        tries.append(a)
        if len(tries) < 3:
            raise PermissionError(errno.EACCES, "The process cannot access the file")
        real(a, b)

    monkeypatch.setattr(download.os, "replace", held)
    monkeypatch.setattr(download.time, "sleep", lambda s: None)
    (tmp_path / "a").write_text("new")
    download.replace(tmp_path / "a", tmp_path / "b")
    assert (tmp_path / "b").read_text() == "new" and len(tries) == 3

    def always_held(a, b):
        tries.append(a)
        raise PermissionError(errno.EACCES, "The process cannot access the file")

    tries.clear()
    monkeypatch.setattr(download.os, "replace", always_held)
    with pytest.raises(PermissionError):  # held for good: the error, after the last try
        download.replace(tmp_path / "b", tmp_path / "c", tries=3)
    assert len(tries) == 3


# --- no links in the tree: a Windows clone turns them into small text files -------------

def test_the_tree_has_no_symbolic_links():
    if not (REPO_ROOT / ".git").exists() or shutil.which("git") is None:
        pytest.skip("not a git checkout")
    listed = subprocess.run(["git", "ls-files", "-s"], cwd=REPO_ROOT, capture_output=True,
                            text=True, check=True).stdout.splitlines()
    links = [path for line in listed if line.startswith("120000 ")  # unless deleted
             if os.path.lexists(REPO_ROOT / (path := line.split("\t", 1)[1]))]
    links += [str(p.relative_to(REPO_ROOT)) for p in (REPO_ROOT / "docs").rglob("*")
              if p.is_symlink()]
    assert links == []


# --- the GPU check script, on the CPU ---------------------------------------------------

def test_gpu_check_without_a_gpu_says_so_in_one_line():
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    done = subprocess.run([sys.executable, "tools/gpu_check.py"], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("error: no CUDA GPU here") and done.stderr.count("\n") == 1


@pytest.mark.slow
def test_gpu_check_runs_every_check_on_the_cpu(tmp_path):
    done = subprocess.run([sys.executable, "tools/gpu_check.py", "--device", "cpu", "--small",
                           "--steps", "4", "--out-dir", str(tmp_path)], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=600, env=module_env())
    lines = done.stdout.splitlines()
    assert done.returncode == 0, done.stdout + done.stderr
    assert lines[0].startswith("gpu_check on cpu: torch ")
    checks = lines[1:-1]
    assert all(line.startswith("ok    ") for line in checks), done.stdout
    names = " ".join(checks)
    for stage in TRAINED:
        assert f"{stage} train, cpu, 1 process" in names
    assert "stage5_gpt train, cpu, 2 processes (torchrun)" in names
    assert "stage5_gpt sample (KV cache), cpu" in names
    assert "greedy tokens with and without the cache" in names
    assert lines[-1] == "all checks passed"


# --- the notebook for a hosted GPU ------------------------------------------------------

NOTEBOOK = REPO_ROOT / "notebooks" / "colab.ipynb"


def test_the_notebook_keeps_the_services_torch_and_names_its_settings():
    nbformat = pytest.importorskip("nbformat")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(nb)
    code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    assert 'REPO_URL = "https://github.com/YOUR-ACCOUNT/' in code
    assert '"--no-deps", "-e", "."' in code and 'not d.startswith("torch")' in code
    assert '"--preset", "shakespeare-2min", "--device", DEVICE' in code
    assert "GPT_NOTEBOOK_STEPS" in code
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code")  # stored clean


@pytest.mark.slow
def test_the_notebook_runs_on_the_cpu(tmp_path):
    """nbclient executes the notebook in a fresh virtual environment that sees this one's
    packages (as a hosted service's Python has its own torch), with a few steps of a tiny
    model on the built-in English text: the project is cloned from this checkout and
    installed with pip as on the service, without touching this environment."""
    pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    if shutil.which("git") is None or not (REPO_ROOT / ".git").exists():
        pytest.skip("needs git and a git checkout to clone")
    env_dir = tmp_path / "service"
    subprocess.run([sys.executable, "-m", "venv", str(env_dir)], check=True)
    site = next(env_dir.glob("lib/python*/site-packages"))
    here = [p for p in sys.path if p.endswith("site-packages")]
    (site / "service-packages.pth").write_text("\n".join(here) + "\n")
    work = tmp_path / "work"
    work.mkdir()
    execute = ("import sys, nbformat\nfrom nbclient import NotebookClient\n"
               "nb = nbformat.read(sys.argv[1], as_version=4)\n"
               "NotebookClient(nb, timeout=600, kernel_name='python3', "
               "resources={'metadata': {'path': sys.argv[2]}}).execute()\n"
               "nbformat.write(nb, sys.argv[3])\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(GPT_NOTEBOOK_STEPS="4", GPT_NOTEBOOK_DEVICE="cpu",
               GPT_NOTEBOOK_REPO=str(REPO_ROOT), GPT_NOTEBOOK_ARGS=(
                   "--data en --n-layer 1 --n-head 2 --n-embd 16 --block-size 16 "
                   "--batch-size 4 --eval-iters 2 --warmup-iters 1 --threads 1"))
    done = subprocess.run([str(env_dir / "bin" / "python"), "-c", execute, str(NOTEBOOK),
                           str(work), str(tmp_path / "ran.ipynb")], env=env, cwd=work,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    import nbformat

    ran = nbformat.read(tmp_path / "ran.ipynb", as_version=4)
    text = "\n".join(o.get("text", "") for c in ran.cells if c.cell_type == "code"
                     for o in c.outputs)
    assert "best val loss" in text and "step     4:" in text, text[-3000:]
    assert "ROMEO:" in text  # the sample
    images = [o for c in ran.cells for o in c.get("outputs", []) if "image/png" in o.get(
        "data", {})]
    assert len(images) == 1  # the loss curve
    assert "/zh/stage5_gpt/" in text
    assert (work / "gpt-stages" / "out" / "stage5_gpt" / "ckpt.pt").is_file()
    # the project went into the service's environment, not into this one
    listed = subprocess.run([str(env_dir / "bin" / "python"), "-m", "pip", "show", "-f",
                             "gpt-stages"], capture_output=True, text=True).stdout
    assert f"Location: {site}" in listed or "Editable project location: " + str(
        work / "gpt-stages") in listed, listed


# --- the CI workflow that publishes the course ------------------------------------------

def test_the_docs_workflow_builds_as_make_docs_does_and_publishes_site():
    workflow = (REPO_ROOT / ".github" / "workflows" / "docs.yml").read_text(encoding="utf-8")
    assert "run: python tasks.py docs" in workflow  # the Makefile's `make docs` runs the same
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}
    make = subprocess.run(["make", "--no-print-directory", "-n", "docs"], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True).stdout if shutil.which("make") else (
        "python3 tasks.py docs")
    assert make.strip().endswith("tasks.py docs")
    assert "actions/upload-pages-artifact" in workflow and "path: site" in workflow
    assert "actions/deploy-pages" in workflow
    assert re.search(r"python-version: \"3\.1[1-9]\"", workflow)  # the docs tools need 3.11


def test_the_chinese_edition_reads_the_english_assets_and_generated_folders():
    """No links: the hook docs/hooks/shared_files.py gives mkdocs.zh.yml's build the files
    of docs/assets and docs/generated as if they were in docs/zh/, under its exclusions."""
    pytest.importorskip("material", reason="the docs tools are not installed")
    from mkdocs.config import load_config
    from mkdocs.structure.files import get_files

    config = load_config(str(REPO_ROOT / "mkdocs.zh.yml"))
    files = config.plugins.on_files(get_files(config), config=config)
    css = files.get_file_from_path("assets/stylesheets/extra.css")
    assert css is not None and css.inclusion.is_included()
    assert Path(css.abs_src_path) == REPO_ROOT / "docs" / "assets" / "stylesheets" / "extra.css"
    assert Path(css.abs_dest_path) == Path(config["site_dir"], "assets", "stylesheets",
                                            "extra.css")
    figures = [f for f in files if f.src_uri.startswith("generated/") and f.src_uri.endswith(
        ".png") and f.inclusion.is_included()]
    assert len(figures) > 10
    assert not [f.src_uri for f in files if f.src_uri.startswith("generated/explorer/")
                and f.inclusion.is_included()]  # the Chinese explorer reads the English site's
    assert not [f.src_uri for f in files if f.src_uri.startswith("generated/runs/")
                and f.inclusion.is_included()]
