"""tools/compare.py and tools/bench.py: quick unit checks, then small end-to-end runs.

compare.py reads what the trainers write (metrics.json, log.jsonl), never what they
print; the checks here give it such files, or a stand-in trainer that writes them.

The end-to-end runs start together (see ``runs``) so that their torch imports
overlap; each test then waits for its own.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import queue
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO_ROOT, TINY_TEXT, module_env

TOOLS = REPO_ROOT / "tools"


def load_tool(name: str):
    spec = importlib.util.spec_from_file_location(f"tools_{name}", TOOLS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


compare = load_tool("compare")  # no torch import: cheap


# ----------------------------------------------------------------------------- compare, in-process


@pytest.mark.parametrize("text, number", [("3", 3), ("stage3", 3), ("stage3_attention", 3),
                                          ("5", 5), (" 2 ", 2)])
def test_stage_number_accepts_numbers_and_names(text, number):
    assert compare.stage_number(text) == number


@pytest.mark.parametrize("text", ["1", "9", "0", "stage3_gpt", "gpt", ""])
def test_stage_number_rejects_what_has_no_trainer(text):
    with pytest.raises(argparse.ArgumentTypeError, match="choose from 2, 3, 4, 5"):
        compare.stage_number(text)


def test_bad_stage_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as e:
        compare.main(["--stages", "2", "9"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "no stage '9'" in err and "choose from 2, 3, 4, 5" in err


def test_missing_data_file_is_a_usage_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        compare.main(["--data", str(tmp_path / "nope.txt")])
    assert e.value.code == 2
    assert "no such file" in capsys.readouterr().err


def test_same_budget_for_every_stage(tmp_path):
    args = compare.build_parser().parse_args(
        ["--stages", "2", "3", "4", "5", "--max-iters", "12", "--batch-size", "4",
         "--block-size", "8", "--data", "zh", "--seed", "7", "--threads", "1",
         "--out-dir", str(tmp_path)])
    runs = compare.plan_runs(args)
    assert [r.number for r in runs] == [2, 3, 4, 5]
    for run in runs:
        cmd = run.command
        assert cmd[:3] == [sys.executable, "-m", f"{run.package}.train"]
        opts = dict(zip(cmd[3::2], cmd[4::2], strict=True))
        assert opts == {"--data": "zh", "--seed": "7", "--out-dir": str(tmp_path / run.package),
                        "--max-iters": "12", "--eval-interval": "3", "--batch-size": "4",
                        "--block-size": "8", "--eval-iters": "50"}
        assert "--lr" not in cmd and "--n-embd" not in cmd  # each stage keeps its own
        assert run.env == {"OMP_NUM_THREADS": "1"}
    title = compare.title_for(runs, args)
    assert title == ("Stages 2, 3, 4, 5 at the same budget: 12 steps × batch 4 × block 8 on zh, "
                     "seed 7, 1 CPU thread (model size, learning rate: each stage's own)")
    args.batch_size = None
    assert compare.title_for(runs, args).endswith("(model size, learning rate, batch: each stage's own)")
    # 12 steps < stage 5's 100 warmup steps: the learner is told
    assert any("warm" in n for n in compare.warnings_for(runs, args))


def test_default_settings_are_each_stages_own(tmp_path):
    args = compare.build_parser().parse_args(["--stages", "2", "3", "--out-dir", str(tmp_path)])
    runs = compare.plan_runs(args)
    for run in runs:
        for flag in ("--max-iters", "--batch-size", "--block-size", "--eval-interval",
                     "--eval-iters"):
            assert flag not in run.command
    # the budgets shown in the table come from each trainer's own defaults
    assert (runs[0].max_iters, runs[0].batch_size, runs[0].block_size) == (3000, 32, 8)
    assert (runs[1].max_iters, runs[1].block_size) == (5000, 32)
    title = compare.title_for(runs, args)
    assert title.startswith("Stage 2 vs stage 3, each stage at its default settings")
    assert compare.warnings_for(runs, args) == []


def test_extra_and_per_stage_args(tmp_path):
    args = compare.build_parser().parse_args(
        ["--stages", "4", "5", "--max-iters", "50", "--extra-args", "--sample-tokens 5",
         "--stage-args", "5", "--warmup-iters 5", "--out-dir", str(tmp_path)])
    s4, s5 = compare.plan_runs(args)
    assert s4.env == {}  # threads: torch's own choice unless asked
    assert s4.command[-2:] == ["--sample-tokens", "5"]
    assert s5.command[-4:] == ["--sample-tokens", "5", "--warmup-iters", "5"]
    assert compare.warnings_for([s4, s5], args) == []  # warmup overridden: no note


def test_rows_show_the_budget_a_stage_really_used(tmp_path):
    args = compare.build_parser().parse_args(
        ["--stages", "2", "--batch-size", "4", "--stage-args", "2", "--block-size 3 --batch-size=6",
         "--out-dir", str(tmp_path)])
    (run,) = compare.plan_runs(args)
    assert (run.max_iters, run.batch_size, run.block_size) == (3000, 6, 3)


def fake_row(stage: int, package: str, sample: str) -> dict:
    return {"stage": stage, "package": package, "params": 12345, "steps": 10, "batch_size": 4,
            "block_size": 8, "train_loss": 2.5, "val_loss": 2.625, "best_val_loss": 2.5,
            "best_val_step": 1500, "train_seconds": 1.25, "sample": sample}


def test_tables_show_every_row_and_a_flat_sample():
    rows = [fake_row(2, "stage2_bigram", "ab\ncd|e" + "x" * 100),
            fake_row(3, "stage3_attention", "小猫\n")]
    text = compare.text_table(rows).splitlines()
    assert text[0].split()[:3] == ["stage", "parameters", "steps"]
    assert text[2].startswith("2 (bigram)") and text[3].startswith("3 (attention)")
    assert "ab⏎cd|e" in text[2] and text[2].endswith("…")
    assert "小猫⏎" in text[3]
    assert "12,345" in text[2] and "2.6250" in text[2] and "2.5000 (1,500)" in text[2]
    md = compare.markdown_table(rows, "Stage 2 vs stage 3")
    lines = md.splitlines()
    assert lines[0] == "Stage 2 vs stage 3"
    assert lines[2].startswith("| stage | parameters |") and lines[3].startswith("|---|")
    # The table holds the numbers only (8 columns); it ends at the first blank line.
    table = lines[2:lines.index("", 2)]
    assert len(table) == 4 and [line.count("|") for line in table] == [9] * 4
    assert "sample" not in table[0] and "ab" not in "".join(table[2:])
    assert "| 2 (bigram) | 12,345 |" in table[2] and "2.5000 (1,500)" in table[2]
    # Each sample follows in full, in its own code block under a tab named after its stage,
    # with its newlines and its pipe as they are.
    tab2, tab3 = md.index('=== "2 (bigram)"'), md.index('=== "3 (attention)"')
    assert tab2 < tab3
    assert "    ```text\n    ab\n    cd|e" + "x" * 100 + "\n    ```" in md[tab2:tab3]
    assert "    ```text\n    小猫\n    ```" in md[tab3:]
    # A sample with backticks gets a longer fence, so it cannot close the block early.
    ticks = compare.markdown_table([fake_row(2, "stage2_bigram", "a```b")], "t")
    assert "    ````text\n    a```b\n    ````" in ticks


def test_plain_and_markdown_tables_align_the_columns_asked():
    text = compare.plain_table(["name", "n"], [["小猫", "1"], ["ab", "1,234"]], right={1})
    assert text.splitlines() == ["name      n", "----  -----", "小猫      1", "ab    1,234"]
    md = compare.md_table(["name", "n"], [["a", "1"]], right={1})
    assert md.splitlines() == ["| name | n |", "|---|--:|", "| a | 1 |"]


def write_run(out: Path, metrics: dict, log: list[dict], tail: str = "") -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "metrics.json").write_text(json.dumps(metrics), encoding="utf-8")
    (out / "log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in log) + tail,
                                   encoding="utf-8")


LOG = [{"step": 0, "train": 4.0, "val": 4.1, "lr": 1e-3, "time": 0.1},
       {"step": 5, "train": 2.0, "val": 2.5, "lr": 1e-3, "time": 1.0},
       {"step": 10, "train": 1.5, "val": 2.5, "lr": 1e-3, "time": 2.0},
       {"step": 15, "train": 1.0, "val": 2.75, "lr": 1e-3, "time": 3.0}]
METRICS = {"stage": "stage5_gpt", "data": "en", "params": 10, "steps": 15, "batch_size": 12,
           "block_size": 64, "train_loss": 1.0, "val_loss": 2.75, "best_val_loss": 2.4,
           "best_val_step": 7, "train_seconds": 3.0, "interrupted": False, "sample": "ab"}


def test_a_table_row_is_what_the_trainer_recorded(tmp_path):
    # a row still being written is left out of the log
    write_run(tmp_path / "a", METRICS, LOG, tail='{"step": 20, "train": 0.5, "val": 0.')
    assert compare.read_log(tmp_path / "a" / "log.jsonl") == LOG
    m = compare.read_run(tmp_path / "a")
    assert m == METRICS
    row = compare.table_row(5, "stage5_gpt", m)
    assert (row["best_val_loss"], row["best_val_step"]) == (2.4, 7)
    assert row["batch_size"] == 12 and row["block_size"] == 64 and "interrupted" not in row
    assert compare.cells(row)[6] == "2.4000 (7)"
    # an unreadable metrics.json is an error for the caller to report
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "metrics.json").write_text("{", encoding="utf-8")
    with pytest.raises(ValueError):
        compare.read_run(tmp_path / "b")


def test_log_follower_reads_rows_as_they_are_written(tmp_path):
    path = tmp_path / "log.jsonl"
    follower = compare.LogFollower(path)
    assert follower.new_rows() == []  # not there yet
    line = json.dumps(LOG[0]) + "\n"
    path.write_text(line[:10], encoding="utf-8")
    assert follower.new_rows() == []  # half a row
    with path.open("a", encoding="utf-8") as f:
        f.write(line[10:] + json.dumps(LOG[1]) + "\n")
    assert follower.new_rows() == LOG[:2]
    assert follower.new_rows() == []
    # --resume appends to the log: only the rows after the old ones are new
    assert compare.LogFollower(path, from_end=True).new_rows() == []


def test_a_trainers_output_is_read_line_by_line_without_bar_redraws():
    read, write = os.pipe()
    os.write(write, "a\r\nbar 1\rbar 2\rdone ✓\nlast\rbar".encode())
    os.close(write)
    events: queue.Queue = queue.Queue()
    with os.fdopen(read, "rb") as stream:
        compare._pump(stream, "err", events)
    lines = [events.get_nowait() for _ in range(events.qsize())]
    assert lines == [("err", "a"), ("err", "done ✓"), ("err", "bar"), ("err", None)]


# ----------------------------------------------------------------------------- end to end

BENCH_QUICK = ["--steps", "2", "--warmup", "1", "--repeats", "2", "--threads", "2"]
TINY_BUDGET = ["--max-iters", "10", "--batch-size", "4", "--block-size", "8", "--eval-iters", "2",
               "--extra-args", "--sample-tokens 20", "--threads", "1"]


def start(*args: object, cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, *map(str, args)], cwd=cwd, env=module_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            encoding="utf-8", errors="replace")


class Runs:
    """Subprocesses started at once; ``result(name)`` waits for one of them."""

    def __init__(self, procs: dict[str, subprocess.Popen[str]], work: Path):
        self.procs, self.work, self.done = procs, work, {}

    def result(self, name: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        if name not in self.done:
            proc = self.procs[name]
            try:
                out, err = proc.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()
                raise
            self.done[name] = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
        return self.done[name]

    def close(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.communicate()


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    work = tmp_path_factory.mktemp("tools")
    data = work / "tiny.txt"
    data.write_text(TINY_TEXT, encoding="utf-8")
    procs = {
        "compare": start(TOOLS / "compare.py", "--stages", "2", "3", *TINY_BUDGET, "--data", data,
                         "--out-dir", "tmp", "--markdown", "tmp/x.md", "--json", "tmp/x.json",
                         cwd=work),
        "bench": start(TOOLS / "bench.py", "--quick", *BENCH_QUICK, "--json", "bench.json",
                       cwd=work),
        "bench_help": start(TOOLS / "bench.py", "--help", cwd=work),
    }
    r = Runs(procs, work)
    yield r
    r.close()


@pytest.mark.slow
def test_compare_two_stages_end_to_end(runs):
    r = runs.result("compare")
    assert r.returncode == 0, r.stderr[-3000:]
    lines = r.stdout.splitlines()
    assert any(line.startswith("Stage 2 vs stage 3 at the same budget") for line in lines)
    assert any(line.startswith("[1/2] stage 2 (bigram)") for line in lines)
    assert any("step    10/10: train loss" in line for line in lines)  # progress, from log.jsonl
    table = [line for line in lines if line.startswith(("2 (bigram)", "3 (attention)"))]
    assert len(table) == 2, r.stdout
    assert all("4 × 8" in line for line in table)
    md = (runs.work / "tmp" / "x.md").read_text(encoding="utf-8").splitlines()
    assert "| stage | parameters | steps | batch × block | train loss | val loss |" in md[2]
    assert md[3].startswith("|---|") and md[6] == ""  # two rows, then the samples
    assert md[4].startswith("| 2 (bigram)") and md[5].startswith("| 3 (attention)")
    assert md[7].startswith("What each model writes after training")
    rows = json.loads((runs.work / "tmp" / "x.json").read_text(encoding="utf-8"))["rows"]
    assert [row["stage"] for row in rows] == [2, 3]
    assert all(row["steps"] == 10 and row["val_loss"] > 0 for row in rows)
    # evaluated at steps 0, 2, 4, 6, 8 and 10; the best is one of them
    assert all(row["best_val_step"] in (0, 2, 4, 6, 8, 10) for row in rows)
    assert all(row["best_val_loss"] <= row["val_loss"] + 5e-5 for row in rows)
    assert rows[0]["params"] < rows[1]["params"]  # attention adds weights
    for package, row in zip(("stage2_bigram", "stage3_attention"), rows, strict=True):
        assert (runs.work / "tmp" / package / "metrics.json").is_file()
        log = compare.read_log(runs.work / "tmp" / package / "log.jsonl")
        assert [r["step"] for r in log] == [0, 2, 4, 6, 8, 10]
        assert min(r["val"] for r in log) == row["best_val_loss"]


@pytest.mark.slow
def test_compare_reports_a_failing_stage(tmp_path, capsys):
    # A stand-in trainer that fails the way a stage does (a UserError -> exit 2), so this
    # needs no torch import; the real trainers' messages are tested in their own suites.
    # Its one loss estimate goes to log.jsonl, where the progress display reads it.
    log = tmp_path / "s2" / "log.jsonl"
    failing = ("import json, sys; "
               f"open({str(log)!r}, 'w').write(json.dumps(dict(step=0, train=4.1, val=4.2)) + '\\n'); "
               "print('step 0: a line for people, not read by compare', flush=True); "
               "sys.stderr.write('\\rtraining:  0%|  | 0/10 [00:00<?, ?step/s]'); "
               "sys.stderr.write('\\rtraining: 10%|  | 1/10 [00:00<?, ?step/s]\\n'); "
               "sys.stderr.write('usage: python -m stage2_bigram.train [-h]\\n'); "
               "sys.stderr.write('error: block_size=100000 needs at least 100001 tokens\\n'); "
               "sys.exit(2)")
    run = compare.StageRun(number=2, package="stage2_bigram",
                           command=[sys.executable, "-c", failing], out_dir=tmp_path / "s2",
                           max_iters=10, batch_size=4, block_size=8)
    with pytest.raises(compare.CompareError) as e:
        compare.run_stage(run, 1, 1)
    message = str(e.value)
    assert "stage 2 (bigram) failed with exit code 2" in message
    assert "last lines of its stderr" in message
    assert "error: block_size=100000 needs at least 100001 tokens" in message
    tail = message.split("last lines of its stderr:")[1]
    assert "usage:" in tail
    assert tail.count("training:") == 1 and " 0/10" not in tail  # the bar's last state only
    assert "step     0/10: train loss 4.1000, val loss 4.2000" in capsys.readouterr().out


@pytest.mark.slow
def test_compare_exits_1_when_a_stage_fails(tmp_path, monkeypatch, capsys):
    def fail(run, index, count):
        raise compare.CompareError(compare.failure_message(run, "failed with exit code 2"))

    monkeypatch.setattr(compare, "run_stage", fail)
    assert compare.main(["--stages", "3", "--out-dir", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("compare: stage 3 (attention) failed with exit code 2")


def assert_gone(pid: int) -> None:
    """No process ``pid`` any more (bench.py killed and reaped it)."""
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


@pytest.mark.slow
def test_bench_quick_measures_every_section(runs):
    r = runs.result("bench")
    assert r.returncode == 0, r.stderr[-3000:]
    out, figures = r.stdout, json.loads((runs.work / "bench.json").read_text())
    assert out.startswith("torch ") and "2 threads" in out.splitlines()[0]
    # The six sections, in order, each a table whose rows end in a ratio such as 1.00x
    starts = [out.index(f"\n({letter}) ") for letter in "abcdef"]
    assert starts == sorted(starts)
    texts = [out[i:j] for i, j in zip(starts, [*starts[1:], out.index("s in all.")], strict=True)]
    for text in texts[:5]:  # (a)-(e): tables of tokens/s whose rows end in a ratio
        assert "tokens/s" in text and "-----" in text, text
        assert re.search(r"\d\.\d\dx\n", text), text
    keys = ["attention_forms", "flash", "dtype", "kv_cache", "threads", "gpt2"]
    assert [k for k in figures if k not in ("machine", "settings")] == keys
    tables = [figures[k]["results"] for k in ("attention_forms", "dtype", "kv_cache")]
    tables += [figures["flash"]["train"], figures["flash"]["eval"],
               figures["threads"]["quiet"]["results"], figures["threads"]["busy"]["results"]]
    for results in tables:
        assert all(v["tokens_per_s"] > 0 and v["vs_plain"] > 0 for v in results.values())
        assert len(next(iter(results.values()))["rounds"]) == 2  # --repeats 2
    # (a) the plain version is the first row, its ratio 1
    assert list(figures["attention_forms"]["results"]) == ["heads (variants.py)",
                                                           "batched (model.py)"]
    assert figures["attention_forms"]["results"]["heads (variants.py)"]["vs_plain"] == 1.0
    # (b) the written math (a CPU's path) against the fused kernel (a GPU's), both ways
    for phase in ("train", "eval"):
        assert list(figures["flash"][phase]) == ["math (model.py, CPU)", "fused kernel (GPU)"]
    fast = figures["dtype"]["bfloat16_is_fast"]
    assert f"bfloat16_is_fast('cpu') is {fast}" in texts[2]
    # (f) GPT-2 small's sizes: load, memory and tokens/s with and without the cache
    gpt2 = figures["gpt2"]
    assert gpt2["params"] == 124_439_808 and gpt2["source"] == "stand-in"
    assert gpt2["load_s"] > 0 and gpt2["peak_rss_mb"] > 0 and gpt2["cache"] > 0 < gpt2["no_cache"]
    assert "124,439,808" in texts[5]
    # (d) the cache gives the same tokens (the first block_size = 8 of --quick), yet is timed
    cache = figures["kv_cache"]
    assert cache["same_tokens"] is True and (cache["tokens"], cache["compared"]) == (40, 8)
    assert "same tokens both ways: yes" in texts[3]
    # (e) pick_threads chose one of the counts, measured as a row; the busy process is gone
    threads = figures["threads"]
    for phase in ("quiet", "busy"):
        assert set(threads[phase]["results"]) == {"1 thread", "2 threads", "pick_threads"}
        assert threads[phase]["chosen"] in (1, 2)
        assert threads[phase]["line"].startswith(f"threads: {threads[phase]['chosen']} (timed")
        assert threads[phase]["results"]["2 threads"]["vs_plain"] == 1.0
    pid = threads["busy_pid"]
    assert f"busy process: pid {pid} stopped" in r.stderr
    assert_gone(pid)


@pytest.mark.slow
def test_bench_help_shows_the_defaults(runs):
    r = runs.result("bench_help")
    assert r.returncode == 0, r.stderr
    assert "What does each speed-up of stages 4 and 5 buy" in r.stdout
    options = " ".join(r.stdout.split("options:", 1)[1].split())  # one line, single spaces
    for flag, default in [("--sections", "abcdef"), ("--threads", "2"), ("--steps", "30"),
                          ("--warmup", "5"), ("--repeats", "3"), ("--json", "None")]:
        entry = options.split(f" {flag} ", 1)[1].split(" --", 1)[0]
        assert entry.endswith(f"(default: {default})"), entry


@pytest.mark.slow
@pytest.mark.skipif(os.name != "posix", reason="sends SIGINT")
def test_bench_ctrl_c_stops_the_busy_process(tmp_path):
    # The busy phase lasts seconds: 0.5 s of start, pick_threads, 3 x 3 rounds of 20 steps.
    # SIGINT's default action is restored in case this test runs with SIGINT ignored.
    proc = subprocess.Popen(
        [sys.executable, TOOLS / "bench.py", "--quick", "--sections", "e", "--steps", "20",
         "--warmup", "0", "--threads", "2"], cwd=tmp_path, env=module_env(), text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, encoding="utf-8", errors="replace",
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        for line in proc.stderr:  # until the busy process is running
            if m := re.match(r"busy process: pid (\d+)$", line.strip()):
                break
        else:
            pytest.fail(f"no busy process started; stdout:\n{proc.stdout.read()}")
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, err
    assert "bench.py: interrupted" in err and "Traceback" not in err
    assert f"busy process: pid {m[1]} stopped" in err
    assert_gone(int(m[1]))
