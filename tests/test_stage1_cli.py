"""Stage 1: ``python -m stage1_data`` end to end, and its error handling."""

from __future__ import annotations

import hashlib
import importlib
import json
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import torch
from conftest import TINY_TEXT_ZH, assert_user_error

from stage1_data import tang
from stage1_data.data import Corpus, get_batch

cli = importlib.import_module("stage1_data.__main__")


def start_background_runs(runs, folder):
    """Two runs of the CLI (see conftest): a good corpus, and a file that does not exist."""
    good = folder / "tiny_zh.txt"
    good.write_text(TINY_TEXT_ZH, encoding="utf-8")
    runs.start("stage1.good", "stage1_data", "--data", good, "--batch-size", 3,
               "--block-size", 5, "--seed", 7)
    runs.start("stage1.missing", "stage1_data", "--data", folder / "missing.txt")


def _main_error(capsys, *argv) -> str:
    with pytest.raises(SystemExit) as e:
        cli.main([str(a) for a in argv])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert_user_error(err)
    return err


def test_cli_non_utf8_file(capsys, tmp_path):
    path = tmp_path / "gbk.txt"
    path.write_bytes("中文文本".encode("gbk"))
    err = _main_error(capsys, "--data", path)
    assert err.startswith("error: ") and "UTF-8" in err
    assert len(err.strip().splitlines()) == 1


def test_cli_empty_file(capsys, tmp_path):
    path = tmp_path / "empty.txt"
    path.write_text("\n\n")
    assert "empty" in _main_error(capsys, "--data", path)


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["--block-size", "0"], "block_size must be at least 1"),
        (["--batch-size", "0"], "batch_size must be at least 1"),
        (["--val-fraction", "1.5"], "val_fraction"),
        (["--block-size", "5000"], "the train split has"),  # the error names the split
        (["--block-size", "5000"], "block_size=5000 needs at least 5001"),
        (["--block-size", "x"], "invalid int value"),
    ],
)
def test_cli_bad_settings(capsys, tiny_corpus, args, fragment):
    assert fragment in _main_error(capsys, "--data", tiny_corpus, *args)


def test_cli_help_shows_defaults(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["--help"])
    assert e.value.code == 0
    out = " ".join(capsys.readouterr().out.split())  # undo argparse's line wrapping
    assert "--data" in out and "(default: en)" in out and "(default: 8)" in out
    assert "'tang' (Tang poems)" in out and "58 files of the Tang poems" in out


def test_cli_offline_tang_is_one_error_line_that_names_the_way_out(capsys, tmp_path,
                                                                  monkeypatch):
    monkeypatch.setenv("GPT_STAGES_CACHE", str(tmp_path / "cache"))

    def offline(*a, **k):
        raise urllib.error.URLError("no network in tests")

    monkeypatch.setattr(urllib.request, "urlopen", offline)
    err = _main_error(capsys, "--data", "tang")
    error = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(error) == 1 and "--data FOLDER" in error[0] and "poet.tang.0.json" in error[0]


def test_cli_shows_a_local_copy_of_the_tang_poems(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("GPT_STAGES_CACHE", str(tmp_path / "cache"))
    folder = tmp_path / "poems"
    folder.mkdir()
    poems = [{"title": "春曉", "paragraphs": ["春眠不覺曉，處處聞啼鳥。", "夜來風雨聲，花落知多少。"]}] * 3
    raw = json.dumps(poems, ensure_ascii=False).encode("utf-8")
    (folder / "poet.tang.0.json").write_bytes(raw)
    monkeypatch.setattr(tang, "FILES", ["poet.tang.0.json"])
    monkeypatch.setattr(tang, "expected_sha256",
                        lambda: {"poet.tang.0.json": hashlib.sha256(raw).hexdigest()})
    cli.main(["--data", str(folder)])
    out = capsys.readouterr().out
    text = "\n\n".join(["春晓\n春眠不觉晓，处处闻啼鸟。\n夜来风雨声，花落知多少。"] * 3) + "\n"
    assert f"corpus: {folder}" in out
    assert f"{len(text):,} characters, {text.count(chr(10)):,} lines" in out
    assert "round trip:" in out and "春晓⏎春眠不觉晓" in out


# --- subprocess runs (started in the background, see conftest) -----------------


@pytest.mark.slow
def test_cli_prints_statistics_vocabulary_round_trip_and_batch(background):
    run = background["stage1.good"]
    path = Path(run.args[run.args.index("--data") + 1])
    assert run.returncode == 0, run.stderr
    assert "Traceback" not in run.stderr
    out = run.stdout
    corpus = Corpus.load(str(path))
    text, tok = corpus.text, corpus.tokenizer

    assert f"corpus: {path}" in out
    assert f"{len(text):,} characters, {text.count(chr(10)):,} lines, {tok.vocab_size} distinct" in out
    assert f"train {len(corpus.train):,} tokens, val {len(corpus.val):,} tokens" in out
    assert f"vocabulary ({tok.vocab_size}): " + "".join(tok.chars).replace("\n", "⏎") in out
    assert "🐍" in out and "你" in out  # non-ASCII survives the trip to stdout
    assert "(equal: True)" in out
    assert str(tok.encode(text[:40])) in out

    assert "x and y have shape (3, 5) = (B, T)" in out
    x, y = get_batch(corpus.train, 3, 5, generator=torch.Generator().manual_seed(7))
    for b in range(3):
        shown_x = repr(tok.decode(x[b].tolist()).replace("\n", "⏎"))
        shown_y = repr(tok.decode(y[b].tolist()).replace("\n", "⏎"))
        line = next(line for line in out.splitlines() if line.strip().startswith(f"x[{b}]"))
        assert shown_x in line and f"y[{b}] {shown_y}" in line
    examples = out.split("(context -> next character):\n")[1].splitlines()
    assert len(examples) == 5  # the T training examples inside x[0]
    for t, line in enumerate(examples):
        context = repr(tok.decode(x[0, : t + 1].tolist()).replace("\n", "⏎"))
        target = repr(tok.itos[int(y[0, t])].replace("\n", "⏎"))
        assert line.strip() == f"{context} -> {target}"


@pytest.mark.slow
def test_cli_bad_data_is_one_error_line_and_exit_code_2(background):
    run = background["stage1.missing"]
    assert run.returncode == 2
    assert run.stdout == ""
    assert_user_error(run.stderr, "missing.txt")
    assert len(run.stderr.strip().splitlines()) == 1
