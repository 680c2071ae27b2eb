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
    tmp, _, _ = runs
    proc = train(tmp, "ddp", *TORCHRUN, extra=("--resume", "--max-iters", "16"))
    assert proc.stdout.count("resuming from") == 1
    assert [r["step"] for r in rows(tmp / "ddp" / "log.jsonl")][-2:] == [12, 16]
    assert torch.load(tmp / "ddp" / "ckpt.pt", weights_only=True)["step"] == 16


def test_a_batch_that_does_not_split_evenly_is_refused(tmp_path):
    (tmp_path / "tiny.txt").write_text(TINY_TEXT, encoding="utf-8")
    cmd = [sys.executable, *TORCHRUN, "-m", "stage5_gpt.train", "--data",
           str(tmp_path / "tiny.txt"), "--out-dir", str(tmp_path / "o"), *FLAGS,
           "--batch-size", "3"]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO_ROOT,
                          env=module_env(OMP_NUM_THREADS="1"), timeout=300)
    assert proc.returncode != 0
    assert "--batch-size 3 must be a multiple of the 2 processes" in proc.stderr
