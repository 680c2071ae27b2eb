"""Stage 1: loading text, splitting, batching, the compact encoding of a whole corpus, the
downloader and the Tang poems.

Nothing here touches the network: downloads come from file:// URLs in tmp_path, and the
Tang poems from a folder of small fake JSON files.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader

from stage1_data import compact, data, tang
from stage1_data.compact import encode_compact, smallest_dtype
from stage1_data.data import CharDataset, Corpus, check_length, get_batch, load_text, split
from stage1_data.download import cache_dir, download
from stage1_data.errors import UserError
from stage1_data.tokenizer import CharTokenizer

# --- load_text ---------------------------------------------------------------


def _builtin(name: str) -> str:
    path = data.CORPUS_DIR / data.BUILTIN[name]
    if not path.is_file():
        pytest.skip(f"built-in corpus {path} is not written yet")
    return load_text(name)


def test_builtin_english_corpus():
    text = _builtin("en")
    assert len(text) >= 20_000
    assert "\r" not in text and not text.startswith("\ufeff")
    assert sum(c.isascii() for c in text) / len(text) > 0.95


def test_builtin_chinese_corpus():
    text = _builtin("zh")
    assert len(text) >= 100_000
    # Thousands of distinct characters (several times the English corpus's): more than a
    # byte can number, so the ids take two bytes each.
    assert len(set(text)) >= 3 * len(set(_builtin("en")))
    assert smallest_dtype(CharTokenizer.from_text(text).vocab_size) == torch.int16
    cjk = [c for c in text if "\u4e00" <= c <= "\u9fff"]
    assert len(cjk) / len(text) > 0.5
    assert "\r" not in text and not text.startswith("\ufeff")


def test_load_text_from_a_file(tiny_corpus_zh):
    text = load_text(str(tiny_corpus_zh))
    assert text == tiny_corpus_zh.read_text(encoding="utf-8")
    assert "🐍" in text and "你好" in text


def test_bom_and_windows_line_ends_are_normalised(tmp_path):
    path = tmp_path / "win.txt"
    path.write_bytes("\ufeffline one\r\nline two 你好\r\n".encode())
    assert load_text(str(path)) == "line one\nline two 你好\n"


@pytest.mark.parametrize("content", [b"", b"   \n\t\r\n  ", "\ufeff".encode()])
def test_empty_or_blank_file_is_a_user_error(tmp_path, content):
    path = tmp_path / "empty.txt"
    path.write_bytes(content)
    with pytest.raises(UserError, match="empty"):
        load_text(str(path))


def test_non_utf8_file_is_a_user_error_that_says_so(tmp_path):
    path = tmp_path / "gbk.txt"
    path.write_bytes("hello 你好世界".encode("gbk"))
    with pytest.raises(UserError) as e:
        load_text(str(path))
    msg = str(e.value)
    assert "UTF-8" in msg
    assert "offset 6" in msg  # the first non-ASCII byte
    assert "iconv" in msg  # and how to fix it


def test_missing_file_is_a_user_error_that_lists_the_choices(tmp_path):
    with pytest.raises(UserError) as e:
        load_text(str(tmp_path / "missing.txt"))
    msg = str(e.value)
    assert "missing.txt" in msg
    assert "'en'" in msg and "'zh'" in msg and "shakespeare" in msg


def test_a_folder_without_the_tang_poems_is_a_user_error(tmp_path, monkeypatch):
    """A folder is read as a local copy of the Tang poems' 58 files."""
    monkeypatch.setenv("GPT_STAGES_CACHE", str(tmp_path / "cache"))
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "notes.txt").write_text("not a poem", encoding="utf-8")
    with pytest.raises(UserError) as e:
        load_text(str(folder))
    msg = str(e.value)
    assert f"{folder} has no poet.tang.0.json" in msg and "--data FOLDER" in msg
    assert "58 files" in msg and tang.COMMIT in msg
    assert not (tmp_path / "cache").exists()  # nothing cached


# --- split ---------------------------------------------------------------------


@pytest.mark.parametrize("n", [10, 11, 1000, 1234])
def test_split_is_a_contiguous_90_10_cut(n):
    d = torch.arange(n)
    train, val = split(d, 0.1)
    assert len(train) == int(n * 0.9)
    assert len(train) + len(val) == n
    assert torch.equal(torch.cat([train, val]), d)  # nothing shuffled, nothing lost


def test_split_default_is_ten_percent():
    train, val = split(torch.arange(100))
    assert (len(train), len(val)) == (90, 10)


@pytest.mark.parametrize("bad", [0.0, 1.0, -0.1, 1.5, float("nan")])
def test_split_rejects_bad_fractions(bad):
    with pytest.raises(UserError, match="val_fraction"):
        split(torch.arange(10), bad)


# --- get_batch -----------------------------------------------------------------


def test_get_batch_shapes_and_shift():
    d = torch.arange(100, 200)  # unique values: a window's first value names its start
    x, y = get_batch(d, 5, 7, generator=torch.Generator().manual_seed(0))
    assert x.shape == y.shape == (5, 7)
    assert x.dtype == y.dtype == torch.long
    assert torch.equal(x[:, 1:], y[:, :-1])
    for row_x, row_y in zip(x, y, strict=True):
        start = int(row_x[0]) - 100
        assert torch.equal(row_x, d[start : start + 7])
        assert torch.equal(row_y, d[start + 1 : start + 8])  # each target follows in data


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int16, torch.int32])
def test_get_batch_and_char_dataset_hand_out_long_from_any_id_dtype(dtype):
    d = torch.randint(0, 100, (200,), generator=torch.Generator().manual_seed(5))
    small = d.to(dtype)
    for seed in range(3):
        a = get_batch(d, 4, 8, generator=torch.Generator().manual_seed(seed))
        b = get_batch(small, 4, 8, generator=torch.Generator().manual_seed(seed))
        assert b[0].dtype == b[1].dtype == torch.long
        assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    x, y = CharDataset(small, 8)[17]
    assert x.dtype == y.dtype == torch.long
    assert x.tolist() == d[17:25].tolist() and y.tolist() == d[18:26].tolist()


def test_get_batch_uses_every_possible_window_and_no_other():
    d = torch.arange(12)
    x, _ = get_batch(d, 300, 4, generator=torch.Generator().manual_seed(0))
    starts = set(x[:, 0].tolist())
    assert starts == set(range(12 - 4))  # the last window ends on the last token


def test_get_batch_is_reproducible_with_a_seeded_generator():
    d = torch.randint(0, 50, (500,), generator=torch.Generator().manual_seed(1))
    a = get_batch(d, 4, 8, generator=torch.Generator().manual_seed(42))
    b = get_batch(d, 4, 8, generator=torch.Generator().manual_seed(42))
    c = get_batch(d, 4, 8, generator=torch.Generator().manual_seed(43))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert not torch.equal(a[0], c[0])


def test_get_batch_fits_exactly_block_size_plus_one_tokens():
    x, y = get_batch(torch.arange(5), 3, 4)
    assert x.tolist() == [[0, 1, 2, 3]] * 3
    assert y.tolist() == [[1, 2, 3, 4]] * 3


@pytest.mark.parametrize("n, block_size", [(4, 4), (0, 1), (3, 8)])
def test_get_batch_rejects_data_shorter_than_a_window(n, block_size):
    with pytest.raises(UserError) as e:
        get_batch(torch.arange(n), 2, block_size)
    assert f"has {n} tokens" in str(e.value)
    assert f"at least {block_size + 1}" in str(e.value)
    assert "--block-size" in str(e.value)


def test_get_batch_rejects_bad_sizes():
    with pytest.raises(UserError, match="block_size"):
        get_batch(torch.arange(10), 2, 0)
    with pytest.raises(UserError, match="batch_size"):
        get_batch(torch.arange(10), 0, 2)


def test_check_length_names_the_split():
    with pytest.raises(UserError, match="the val split has 3 tokens"):
        check_length(torch.arange(3), 8, "val")


# --- CharDataset ---------------------------------------------------------------


def test_char_dataset_gives_the_same_windows_as_get_batch():
    d = torch.randint(0, 30, (300,), generator=torch.Generator().manual_seed(3))
    B, T = 6, 10
    x, y = get_batch(d, B, T, generator=torch.Generator().manual_seed(7))
    # get_batch draws its start positions exactly like this:
    ix = torch.randint(len(d) - T, (B,), generator=torch.Generator().manual_seed(7))
    ds = CharDataset(d, T)
    for b in range(B):
        xb, yb = ds[int(ix[b])]
        assert torch.equal(xb, x[b])
        assert torch.equal(yb, y[b])


def test_char_dataset_len_and_index_errors():
    d = torch.arange(20)
    ds = CharDataset(d, 5)
    assert len(ds) == 15
    x, y = ds[14]  # the last window ends on the last token
    assert x.tolist() == [14, 15, 16, 17, 18] and y.tolist() == [15, 16, 17, 18, 19]
    for bad in (15, 100, -1):
        with pytest.raises(IndexError):
            ds[bad]
    with pytest.raises(UserError):
        CharDataset(torch.arange(5), 5)


def test_char_dataset_works_with_a_data_loader():
    ds = CharDataset(torch.arange(50), 8)
    batches = list(DataLoader(ds, batch_size=16))
    assert [tuple(bx.shape) for bx, _ in batches] == [(16, 8), (16, 8), (10, 8)]
    xs = torch.cat([bx for bx, _ in batches])
    ys = torch.cat([by for _, by in batches])
    assert torch.equal(xs[:, 0], torch.arange(42))
    assert torch.equal(xs + 1, ys)


# --- Corpus --------------------------------------------------------------------


def test_corpus_load(tiny_corpus_zh):
    c = Corpus.load(str(tiny_corpus_zh), val_fraction=0.2)
    assert c.tokenizer.decode(torch.cat([c.train, c.val]).tolist()) == c.text
    assert len(c.val) == len(c.text) - int(len(c.text) * 0.8)
    assert c.train.dtype == c.val.dtype == torch.uint8  # fewer than 256 distinct characters
    assert get_batch(c.train, 2, 4)[0].dtype == torch.long


def _load_tool(name: str):
    path = Path(__file__).resolve().parents[1] / "tools" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"tools_{name}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(not Path("/proc/self/status").is_file(), reason="reads /proc (Linux)")
def test_loading_a_big_corpus_takes_at_most_four_times_its_size(tmp_path):
    """A Python list of ints and an int64 tensor took 17x the file size at the peak."""
    memory = _load_tool("memory")
    path = tmp_path / "big.txt"
    memory.make_corpus(path, 10_000_000, data.CORPUS_DIR / "en.txt")
    # In a fresh process; the warm-up leaves out the fixed ~7 MB of torch code that a
    # first load pages in, which would count for much more in 10 MB than in 1 GB.
    r = memory.measure(path, warm_up=True)
    if not r["reset"]:
        pytest.skip("cannot reset the peak RSS counter (/proc/self/clear_refs)")
    assert r["dtype"] == "torch.uint8"
    assert r["ratio"] <= 4.0, f"peak {r['increase'] / 1e6:.1f} MB for a 10 MB file"
    c = Corpus.load(str(path))
    assert c.tokenizer.decode(torch.cat([c.train, c.val]).tolist()) == path.read_text()


def test_corpus_load_with_a_given_tokenizer(tiny_corpus):
    tok = CharTokenizer.from_text(tiny_corpus.read_text(encoding="utf-8") + "XYZ")
    c = Corpus.load(str(tiny_corpus), tokenizer=tok)
    assert c.tokenizer is tok
    small = CharTokenizer.from_text("the cat")
    with pytest.raises(UserError, match="unknown characters"):
        Corpus.load(str(tiny_corpus), tokenizer=small)


# --- encode_compact ------------------------------------------------------------


@pytest.mark.parametrize("text", ["hello world", "你好，世界！hello 🐍\n", "\x00\t\uffff\U0010ffff", ""])
def test_encode_compact_gives_the_ids_of_encode(text, monkeypatch):
    tok = CharTokenizer.from_text(text + "z")
    for chunk in (compact.CHUNK, 1, 3):  # chunk boundaries anywhere
        monkeypatch.setattr(compact, "CHUNK", chunk)
        ids = encode_compact(tok, text)
        assert ids.shape == (len(text),)
        assert ids.tolist() == tok.encode(text) == torch.tensor(tok.encode(text)).tolist()
        assert tok.decode(ids) == text


@pytest.mark.parametrize("size, dtype", [(1, torch.uint8), (256, torch.uint8),
                                         (257, torch.int16), (32768, torch.int16),
                                         (32769, torch.int32)])
def test_encode_compact_uses_the_smallest_dtype_that_holds_every_id(size, dtype):
    tok = CharTokenizer(chr(0x4E00 + i) for i in range(size))
    assert smallest_dtype(tok.vocab_size) == dtype
    ids = encode_compact(tok, tok.chars[-1] + tok.chars[0])
    assert ids.dtype == dtype
    assert ids.tolist() == [size - 1, 0]  # the largest id fits


@pytest.mark.parametrize("chunk", [compact.CHUNK, 4])
def test_encode_compact_fails_with_the_same_message_as_encode(chunk, monkeypatch):
    monkeypatch.setattr(compact, "CHUNK", chunk)
    tok = CharTokenizer.from_text("abc")
    for text in ["abcx", "xabc", "a🐍b你c", "ab" + "0123456789XYZ" + "c" * 20 + "!"]:
        with pytest.raises(UserError) as expected:
            tok.encode(text)
        with pytest.raises(UserError) as got:
            encode_compact(tok, text)
        assert str(got.value) == str(expected.value)


# --- download ------------------------------------------------------------------


def _sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


@pytest.fixture
def remote(tmp_path):
    """A 'remote' file reachable by a file:// URL, and its checksum."""
    src = tmp_path / "remote" / "input.txt"
    src.parent.mkdir()
    payload = b"First Citizen:\nBefore we proceed any further, hear me speak.\n"
    src.write_bytes(payload)
    return src, src.as_uri(), _sha(payload)


def _leftovers(folder):
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def test_download_fetches_verifies_and_then_reuses_the_cache(tmp_path, remote, monkeypatch):
    src, url, sha = remote
    dest = tmp_path / "cache" / "sub" / "input.txt"  # folders are created as needed
    assert download(url, dest, sha) == dest
    assert dest.read_bytes() == src.read_bytes()
    assert _leftovers(dest.parent) == ["input.txt"]  # no temporary file left over

    src.unlink()  # the "remote" file is gone: only the cache can answer now

    def no_network(*a, **k):
        raise AssertionError("download() went to the network although the cache was good")

    monkeypatch.setattr(urllib.request, "urlopen", no_network)
    assert download(url, dest, sha) == dest
    assert _sha(dest.read_bytes()) == sha


def test_download_gives_the_file_normal_permissions(tmp_path, remote):
    _, url, sha = remote
    dest = tmp_path / "cache" / "input.txt"
    download(url, dest, sha)
    plain = tmp_path / "cache" / "plain.txt"
    plain.write_text("x")
    assert dest.stat().st_mode == plain.stat().st_mode


def test_download_replaces_a_damaged_cache(tmp_path, remote):
    src, url, sha = remote
    dest = tmp_path / "cache" / "input.txt"
    dest.parent.mkdir()
    dest.write_text("half a file")
    download(url, dest, sha)
    assert dest.read_bytes() == src.read_bytes()


def test_download_with_a_wrong_checksum_leaves_nothing_behind(tmp_path, remote):
    _, url, _ = remote
    dest = tmp_path / "cache" / "input.txt"
    with pytest.raises(UserError) as e:
        download(url, dest, "0" * 64)
    msg = str(e.value)
    assert "0" * 64 in msg and "sha256" in msg and "not saved" in msg
    assert not dest.exists()
    assert _leftovers(dest.parent) == []


def test_download_interrupted_while_writing_leaves_nothing_behind(tmp_path, remote, monkeypatch):
    _, url, sha = remote
    dest = tmp_path / "cache" / "input.txt"

    def crash(src, dst):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(KeyboardInterrupt):
        download(url, dest, sha)
    assert _leftovers(dest.parent) == []


def test_download_into_an_unwritable_place_is_a_user_error(tmp_path, remote):
    _, url, sha = remote
    blocker = tmp_path / "file"
    blocker.write_text("a file where the cache folder should be")
    with pytest.raises(UserError, match="GPT_STAGES_CACHE"):
        download(url, blocker / "input.txt", sha)


@pytest.mark.parametrize("url", ["file:///nonexistent/gpt-stages/input.txt", "http://127.0.0.1:9/"])
def test_unreachable_url_is_a_user_error_that_suggests_data(tmp_path, url):
    dest = tmp_path / "cache" / "input.txt"
    with pytest.raises(UserError) as e:
        download(url, dest, "0" * 64)
    assert "--data" in str(e.value)
    assert url in str(e.value)
    assert _leftovers(dest.parent) == []


def test_cache_dir_comes_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("GPT_STAGES_CACHE", str(tmp_path / "c"))
    assert cache_dir() == tmp_path / "c"
    monkeypatch.delenv("GPT_STAGES_CACHE")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_dir() == tmp_path / "home" / ".cache" / "gpt-stages"


def test_shakespeare_is_downloaded_into_the_cache(tmp_path, remote, monkeypatch):
    src, url, sha = remote
    monkeypatch.setenv("GPT_STAGES_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(data, "SHAKESPEARE_URL", url)
    monkeypatch.setattr(data, "SHAKESPEARE_SHA256", sha)
    path = data.resolve("shakespeare")
    assert path == tmp_path / "cache" / "tinyshakespeare.txt"
    assert load_text("shakespeare") == src.read_text(encoding="utf-8")
    src.unlink()  # cached now
    assert load_text("shakespeare").startswith("First Citizen:")


def test_resolve_builtin_names_and_paths():
    assert data.resolve("en") == data.CORPUS_DIR / "en.txt"
    assert data.resolve("zh") == data.CORPUS_DIR / "zh.txt"
    assert str(data.resolve("some/file.txt")) == "some/file.txt"


def test_data_resolves_downloads_through_the_download_module():
    import stage1_data.download

    assert data.download is stage1_data.download.download
    assert data.cache_dir is stage1_data.download.cache_dir


# --- the Tang poems ---------------------------------------------------------------


CHUNXIAO = {"author": "孟浩然", "title": "春曉",
            "paragraphs": ["春眠不覺曉，處處聞啼鳥。", "夜來風雨聲，花落知多少。"]}
DENGGAO = {"author": "杜甫", "title": "登高 ·",  # a mark in the title is dropped
           "paragraphs": ["風急天高猿嘯哀，渚清沙白鳥飛迴。", "無邊落木蕭蕭下，不盡長江滾滾來。",
                          "萬里悲秋常作客，百年多病獨登臺。", "艱難苦恨繁霜鬢，潦倒新停濁酒杯。"]}
NOT_REGULATED = [
    {"title": "雜言", "paragraphs": ["白日依山盡，黃河入海流。", "欲窮千里目，更上一層高樓。"]},
    {"title": "有注", "paragraphs": ["床前明月光，疑是地上霜。", "舉頭望明月，低頭思故鄉。（一作山月）"]},
    {"title": "缺字", "paragraphs": ["床前明月光，疑是地上□。", "舉頭望明月，低頭思故鄉。"]},
    {"title": "六句", "paragraphs": ["一二三四五，六七八九十。", "一二三四五，六七八九十。",
                                   "一二三四五，六七八九十。"]},
]
# What --data tang makes of the fake files: title, then a couplet per line, in simplified
# script; a blank line between poems.
EXPECTED_TANG = ("春晓\n春眠不觉晓，处处闻啼鸟。\n夜来风雨声，花落知多少。\n\n"
                 "登高\n风急天高猿啸哀，渚清沙白鸟飞回。\n无边落木萧萧下，不尽长江滚滚来。\n"
                 "万里悲秋常作客，百年多病独登台。\n艰难苦恨繁霜鬓，潦倒新停浊酒杯。\n")


@pytest.fixture
def tang_folder(tmp_path, monkeypatch):
    """Two fake files of the Tang poems; tang.py expects them and their checksums. The
    download cache is in tmp_path."""
    monkeypatch.setenv("GPT_STAGES_CACHE", str(tmp_path / "cache"))
    folder = tmp_path / "quan_tang_shi"
    folder.mkdir()
    files = {"poet.tang.0.json": [CHUNXIAO, *NOT_REGULATED[:2]],
             "poet.tang.1000.json": [*NOT_REGULATED[2:], DENGGAO]}
    sums = {}
    for name, poems in files.items():
        raw = json.dumps(poems, ensure_ascii=False, indent=2).encode("utf-8")
        (folder / name).write_bytes(raw)
        sums[name] = hashlib.sha256(raw).hexdigest()
    monkeypatch.setattr(tang, "FILES", list(files))
    monkeypatch.setattr(tang, "expected_sha256", lambda: dict(sums))
    return folder


@pytest.mark.parametrize("paragraphs, expected", [
    (CHUNXIAO["paragraphs"], ["春眠不覺曉，處處聞啼鳥。", "夜來風雨聲，花落知多少。"]),
    (["春眠不覺曉，", "處處聞啼鳥。夜來風雨聲，", "花落知多少。"],  # split anywhere
     ["春眠不覺曉，處處聞啼鳥。", "夜來風雨聲，花落知多少。"]),
    (DENGGAO["paragraphs"], DENGGAO["paragraphs"]),
    (["一二三四五六七，一二三四五六七？", "一二三四五六七！一二三四五六七；"],  # other marks
     ["一二三四五六七，一二三四五六七？", "一二三四五六七！一二三四五六七；"]),
])
def test_regulated_verse_is_kept_as_title_and_couplets(paragraphs, expected):
    assert tang.regulated("春曉", paragraphs) == "\n".join(["春曉", *expected])


@pytest.mark.parametrize("paragraphs", [
    *[p["paragraphs"] for p in NOT_REGULATED],
    ["一二三四五，六七八九十。"],  # two lines
    ["一二三四五，六七八九十。"] * 5,  # ten lines
    ["一二三四五六，七八九十一二。"] * 2,  # six characters
    ["一二三四，五六七八。"] * 2,  # four characters
    ["一二三四五，六七八九十。", "一二三四五，六七八九十"],  # text after the last mark
    ["一二三四五，六七八九十。", "一二三四五，六七八九ab。"],  # not a Chinese character
    ["一二三四五，六七八九十。", "一二三四五，六七八九十。", "一二三四五六七，八九十一二三四。",
     "一二三四五六七，八九十一二三四。"],  # lines of 5 then 7
    [],
])
def test_other_poems_are_not_regulated_verse(paragraphs):
    assert tang.regulated("题", paragraphs) is None


def test_a_title_keeps_only_its_chinese_characters():
    assert tang.regulated(" 登高 · 1", DENGGAO["paragraphs"]).splitlines()[0] == "登高"
    assert tang.regulated("", CHUNXIAO["paragraphs"]).splitlines()[0] == "无题"
    assert tang.regulated("()", CHUNXIAO["paragraphs"]).splitlines()[0] == "无题"


def test_extract_keeps_the_regulated_verse_in_simplified_script(tang_folder):
    assert tang.extract(tang_folder) == EXPECTED_TANG


def test_a_file_with_the_wrong_checksum_is_a_one_line_user_error(tang_folder):
    bad = tang_folder / "poet.tang.1000.json"
    bad.write_bytes(bad.read_bytes() + b"\n")
    with pytest.raises(UserError) as e:
        tang.extract(tang_folder)
    msg = str(e.value)
    assert "\n" not in msg
    assert str(bad) in msg and "sha256" in msg and tang.COMMIT in msg
    assert "poet.tang.0.json" not in msg  # the good file is not blamed


def test_a_missing_file_is_named(tang_folder):
    (tang_folder / "poet.tang.1000.json").unlink()
    with pytest.raises(UserError, match=r"has no poet\.tang\.1000\.json: --data FOLDER needs "
                                        r"all 58 files"):
        tang.extract(tang_folder)


def test_data_folder_loads_the_poems_and_caches_the_text(tang_folder, tmp_path, monkeypatch):
    text = load_text(str(tang_folder))
    assert text == EXPECTED_TANG
    cached = tmp_path / "cache" / f"tang-{tang.COMMIT[:12]}.txt"
    assert data.resolve(str(tang_folder)) == cached
    assert cached.read_text(encoding="utf-8") == EXPECTED_TANG
    # --data tang now finds the cached text and goes to no network.

    def no_network(*a, **k):
        raise AssertionError("--data tang went to the network although the text was cached")

    monkeypatch.setattr(urllib.request, "urlopen", no_network)
    assert load_text("tang") == EXPECTED_TANG
    c = Corpus.load(str(tang_folder))
    assert c.tokenizer.decode(torch.cat([c.train, c.val]).tolist()) == EXPECTED_TANG


def test_offline_data_tang_says_how_to_pass_a_local_copy(tmp_path, monkeypatch):
    monkeypatch.setenv("GPT_STAGES_CACHE", str(tmp_path / "cache"))

    def offline(*a, **k):
        raise urllib.error.URLError("no network in tests")

    monkeypatch.setattr(urllib.request, "urlopen", offline)
    with pytest.raises(UserError) as e:
        load_text("tang")
    msg = str(e.value)
    assert msg.startswith("could not download") and "poet.tang.0.json" in msg
    assert "58 files" in msg and "by hand" in msg and "--data FOLDER" in msg
    assert tang.COMMIT[:12] in msg and "全唐诗" in msg
    assert "\n" not in msg
    assert not list((tmp_path / "cache").rglob("*.json*"))  # no file, no half file


def test_the_shipped_checksums_list_every_file():
    want = tang.expected_sha256()
    assert sorted(want) == sorted(tang.FILES) and len(tang.FILES) == 58
    assert tang.FILES[0] == "poet.tang.0.json" and tang.FILES[-1] == "poet.tang.57000.json"
    assert all(len(d) == 64 and int(d, 16) >= 0 for d in want.values())
    assert len(set(want.values())) == 58
