"""torchrun: data-parallel training with DistributedDataParallel (gloo on a CPU).

Two processes at a global --batch-size of 4 (2 windows each) must take the same
steps as one process at 4: every process draws the same batch and trains on its
half, and DDP averages the two halves' gradients into the whole batch's gradient.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from conftest import REPO_ROOT, TINY_TEXT, module_env

pytestmark = pytest.mark.slow  # torchrun starts three interpreters per run: tens of seconds

FLAGS = ["--max-iters", "12", "--eval-interval", "4", "--eval-iters", "2", "--batch-size", "4",
         "--block-size", "8", "--n-layer", "2", "--n-head", "2", "--n-embd", "16",
         "--dropout", "0", "--warmup-iters", "2", "--sample-tokens", "5", "--device", "cpu",
         "--dtype", "float32"]  # exact arithmetic, so the two runs can be compared closely


def train(tmp_path, out: str, *launcher: str, extra: tuple[str, ...] = ()):
    cmd = [sys.executable, *launcher, "-m", "stage5_gpt.train", "--data",
           str(tmp_path / "tiny.txt"), "--out-dir", str(tmp_path / out), *FLAGS, *extra]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO_ROOT,
                          env=module_env(OMP_NUM_THREADS="1"), timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


TORCHRUN = ("-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    if not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
        pytest.skip("this PyTorch has no gloo backend")
    tmp = tmp_path_factory.mktemp("ddp")
    (tmp / "tiny.txt").write_text(TINY_TEXT, encoding="utf-8")
    single = train(tmp, "single")
    ddp = train(tmp, "ddp", *TORCHRUN)
    return tmp, single, ddp


def rows(path):
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_two_processes_follow_the_single_process_loss_curve(runs):
    tmp, _, _ = runs
    single, ddp = rows(tmp / "single" / "log.jsonl"), rows(tmp / "ddp" / "log.jsonl")
    assert [r["step"] for r in ddp] == [r["step"] for r in single] == [0, 4, 8, 12]
    for a, b in zip(single, ddp, strict=True):
        assert b["train"] == pytest.approx(a["train"], abs=1e-4)
        assert b["val"] == pytest.approx(a["val"], abs=1e-4)
    assert single[-1]["val"] < single[0]["val"] - 0.05, "the runs learned nothing"
    a = torch.load(tmp / "single" / "ckpt.pt", weights_only=True)["model"]
    b = torch.load(tmp / "ddp" / "ckpt.pt", weights_only=True)["model"]
    for k in a:
        assert torch.allclose(a[k], b[k], atol=1e-4), k


def test_only_rank_0_prints_and_writes(runs):
    tmp, single, ddp = runs
    assert ddp.stdout.count("sample after training") == 1
    assert "2 processes" in ddp.stdout
    assert ddp.stdout.count("checkpoint:") == 1
    assert sorted(p.name for p in (tmp / "ddp").iterdir()) == sorted(
        p.name for p in (tmp / "single").iterdir())


def test_resume_under_torchrun_continues_the_run(runs):
    """Both runs extended from 12 to 16 steps: resumed, the two-process run goes on exactly
    as the single process does, and only rank 0 prints."""
    tmp, _, _ = runs
    single = train(tmp, "single", extra=("--resume", "--max-iters", "16"))
    proc = train(tmp, "ddp", *TORCHRUN, extra=("--resume", "--max-iters", "16"))
    assert proc.stdout.count("resuming from") == 1
    assert proc.stdout.count("planned for --max-iters 12; it now runs to 16") == 1
    assert "at step 12" in proc.stdout and "at step 12" in single.stdout
    assert [r["step"] for r in rows(tmp / "ddp" / "log.jsonl")] == [0, 4, 8, 12, 16]
    a = torch.load(tmp / "single" / "ckpt.pt", weights_only=True)
    b = torch.load(tmp / "ddp" / "ckpt.pt", weights_only=True)
    assert a["step"] == b["step"] == 16
    for k in a["model"]:
        assert torch.allclose(a["model"][k], b["model"][k], atol=1e-4), k
    last_single, last_ddp = rows(tmp / "single" / "log.jsonl")[-1], rows(tmp / "ddp" / "log.jsonl")[-1]
    assert last_ddp["val"] == pytest.approx(last_single["val"], abs=1e-4)


def test_a_batch_that_does_not_split_evenly_is_refused(tmp_path):
    (tmp_path / "tiny.txt").write_text(TINY_TEXT, encoding="utf-8")
    cmd = [sys.executable, *TORCHRUN, "-m", "stage5_gpt.train", "--data",
           str(tmp_path / "tiny.txt"), "--out-dir", str(tmp_path / "o"), *FLAGS,
           "--batch-size", "3"]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO_ROOT,
                          env=module_env(OMP_NUM_THREADS="1"), timeout=300)
    assert proc.returncode != 0
    assert "--batch-size 3 must be a multiple of the 2 processes" in proc.stderr


def ctrl_c_under(tmp_path, launcher: list[str], out: str) -> tuple[int, str]:
    """Start a long two-process run on a pseudo-terminal, press Ctrl-C once it trains, and
    return its exit code and everything it printed (what a reader sees)."""
    import os
    import pty
    import select
    import time

    cmd = [sys.executable, *launcher, "--standalone", "--nproc_per_node", "2", "-m",
           "stage5_gpt.train", "--data", str(tmp_path / "tiny.txt"), "--out-dir",
           str(tmp_path / out), "--max-iters", "1000000", "--eval-interval", "200",
           "--batch-size", "4", "--device", "cpu", "--sample-tokens", "0", "--n-layer", "1",
           "--n-embd", "16", "--n-head", "2", "--block-size", "8", "--dtype", "float32"]
    pid, fd = pty.fork()
    if pid == 0:  # the child: the terminal's foreground process, as in a shell
        os.chdir(REPO_ROOT)
        os.execve(sys.executable, cmd, module_env(OMP_NUM_THREADS="1"))
    seen, pressed, t0 = b"", False, time.time()
    while time.time() - t0 < 240:
        if select.select([fd], [], [], 0.5)[0]:
            try:
                chunk = os.read(fd, 4096)
            except OSError:
                break
            if not chunk:
                break
            seen += chunk
        if not pressed and b"step   200" in seen:
            os.write(fd, b"\x03")  # Ctrl-C: the terminal sends SIGINT to the foreground
            pressed = True
    else:
        os.kill(pid, 9)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), seen.decode(errors="replace")


def test_ctrl_c_under_the_stage_torchrun_ends_like_one_process(tmp_path):
    (tmp_path / "tiny.txt").write_text(TINY_TEXT, encoding="utf-8")
    code, printed = ctrl_c_under(tmp_path, ["-m", "stage5_gpt.torchrun"], "ddp")
    assert code == 130, printed[-2000:]
    assert printed.count("Ctrl-C: stopping at step") == 1, printed[-2000:]
    assert "Traceback" not in printed and "SignalException" not in printed, printed[-2000:]
    ckpt = torch.load(tmp_path / "ddp" / "ckpt.pt", weights_only=True)
    assert ckpt["step"] >= 200
    resumed = subprocess.run(
        [sys.executable, "-m", "stage5_gpt.torchrun", "--standalone", "--nproc_per_node", "2",
         "-m", "stage5_gpt.train", "--data", str(tmp_path / "tiny.txt"), "--out-dir",
         str(tmp_path / "ddp"), "--resume", "--max-iters", str(ckpt["step"] + 10)],
        capture_output=True, text=True, cwd=REPO_ROOT, env=module_env(OMP_NUM_THREADS="1"),
        timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert f"resuming from {tmp_path / 'ddp' / 'ckpt.pt'} at step {ckpt['step']}" in resumed.stdout
