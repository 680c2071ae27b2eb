"""Stage 1: GPT-2's byte-level BPE (``stage1_data/bpe.py``), checked against Hugging Face.

The reference tokenizers are built from the very vocab.json and merges.txt our code saves,
so equal ids mean our training, our files and our encoding all match GPT-2's format and
algorithm. Nothing is downloaded: the corpora are the built-in ones.
"""

from __future__ import annotations

import json
import random
import unicodedata
from collections import Counter
from itertools import pairwise

import pytest
from conftest import assert_user_error, finish, start_module
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import GPT2TokenizerFast  # ~1 s to import: once, here

from stage1_data import bpe
from stage1_data.bpe import (
    BYTE_TO_CHAR,
    SPLIT,
    BPETokenizer,
    bytes_to_unicode,
    learn_merges,
    merge,
    merge_with_changes,
    to_printable,
)
from stage1_data.data import load_text
from stage1_data.errors import UserError

EN, ZH = load_text("en"), load_text("zh")

# --- text from every corner: the corpora, and generated lines --------------------------

WORDS = sorted(set(EN.split()))
EMOJI = ["😀", "🐍", "🎉", "👍🏽", "👨‍👩‍👧‍👦", "👩‍💻", "🧑🏿‍🚀", "🏳️‍🌈", "🇨🇳", "🇺🇸", "1️⃣",
         "❤️", "🤷‍♀️"]
SCRIPTS = ["Привет", "мир", "съешь", "مرحبا", "بالعالم", "नमस्ते", "दुनिया", "こんにちは",
           "カタカナ", "안녕하세요", "세계", "Καλημέρα", "שלום", "สวัสดี", "Tiếng Việt", "e\u0301",
           "a\u0308", "Ⅻ", "½", "²", "１２３", "ｆｕｌｌ", "ß", "ﬁ"]
SPACES = [" ", "  ", "     ", "\t", "\t\t", "\n", "\r\n", "\n\n\n", " \n ", "\r", "\xa0",
          "\u3000", "\u2028", "\x0b", "\x0c", "\x85", "\x1c", "\x1d\x1e", "\x1f", "\u200b"]
PUNCTUATION = ".,;:!?-—–…()[]{}\"'`~@#$%^&*_+=<>/\\|«»“”‘’「」《》，。！？、：；"
ENDINGS = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'Ll", "'"]


def random_char(rng: random.Random) -> str:
    """Any assigned code point. Not surrogates (no text), and not what this Python's
    Unicode tables call unassigned (Cn). Among those are the letters added after Unicode
    16.0, the one class of characters that splits differently: letters to the regex
    package (as in GPT-2's code), unassigned to Hugging Face's Rust regex; see bpe.py's
    docstring. A scan of every code point, each in a few contexts, found no other."""
    while True:
        c = chr(rng.randrange(0x30000) if rng.random() < 0.3 else rng.randrange(0x3000))
        if unicodedata.category(c) not in ("Cs", "Cn"):
            return c


def fragment(rng: random.Random) -> str:
    """One random piece of a line."""
    kind = rng.randrange(9)
    if kind == 0:  # a word in some case, maybe with an ending
        word = rng.choice(WORDS)
        word = rng.choice([word, word.upper(), word.capitalize()])
        return word + (rng.choice(ENDINGS) if rng.random() < 0.3 else "")
    if kind == 1:  # Chinese, a slice of the corpus
        start = rng.randrange(len(ZH) - 20)
        return ZH[start : start + rng.randint(1, 15)]
    if kind == 2:
        return "".join(rng.choice(EMOJI) for _ in range(rng.randint(1, 3)))
    if kind == 3:  # numbers: short, long, with separators
        digits = "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 25)))
        return rng.choice([digits, f"{digits[:3]},{digits[3:]}", f"{digits}.5", f"-{digits}"])
    if kind == 4:
        return rng.choice(SPACES)
    if kind == 5:
        return "".join(rng.choice(PUNCTUATION) for _ in range(rng.randint(1, 4)))
    if kind == 6:
        return rng.choice(SCRIPTS)
    if kind == 7:
        return "".join(random_char(rng) for _ in range(rng.randint(1, 4)))
    return rng.choice(ENDINGS)  # an ending on its own: "'s" after a space, "'" alone


def generated_lines(seed: int, n: int) -> list[str]:
    """``n`` lines of 1 to 12 fragments, some with spaces before and after."""
    rng = random.Random(seed)
    lines = []
    for _ in range(n):
        parts = [fragment(rng) for _ in range(rng.randint(1, 12))]
        line = "".join(p + rng.choice(["", "", " ", "  "]) for p in parts)
        lines.append(rng.choice(["", " ", "   "]) + line + rng.choice(["", " ", "\n", "  "]))
    return lines


# Train on English, Chinese and mixed text, so merges also join emoji, other scripts,
# digits and runs of spaces; compare on other generated lines than the ones trained on.
TRAIN_TEXT = EN[:40_000] + ZH[:20_000] + "".join(generated_lines(seed=1, n=1000))
LINES = ([line for line in EN.splitlines() if line]  # 1,934 paragraphs
         + [line for line in ZH.splitlines() if line][::8]  # 1,335 paragraphs
         + generated_lines(seed=2, n=7000))
NUM_MERGES = 300


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """Our tokenizer trained here, and the folder its vocab.json and merges.txt are in."""
    tok = BPETokenizer.train(TRAIN_TEXT, NUM_MERGES)
    folder = tmp_path_factory.mktemp("bpe")
    tok.save(folder)
    return tok, folder


def hf_tokenizer(folder) -> Tokenizer:
    """Hugging Face's tokenizers library set up as GPT-2's tokenizer, from our two files."""
    hf = Tokenizer(models.BPE.from_file(str(folder / "vocab.json"), str(folder / "merges.txt")))
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    hf.decoder = decoders.ByteLevel()
    return hf


# --- python -m stage1_data.bpe --data zh, in the background -------------------------------


@pytest.fixture(scope="module", autouse=True)
def zh_run(tmp_path_factory):
    """A real ``python -m stage1_data.bpe --data zh`` in a fresh interpreter, started with
    the first test (autouse) so that its seconds of work overlap with the tests here."""
    folder = tmp_path_factory.mktemp("cli") / "tok"
    proc = start_module("stage1_data.bpe", "--data", "zh", "--merges", 20, "--show", 8,
                        "--out", folder)
    yield proc, folder
    if proc.poll() is None:  # only some tests were selected: do not leave it running
        proc.kill()
        proc.communicate()


# --- the byte table and the pattern -------------------------------------------------------


def gpt2_bytes_to_unicode() -> dict[int, str]:
    """GPT-2's encoder.py, word for word (MIT licence, OpenAI)."""
    bs = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
          + list(range(ord("®"), ord("ÿ") + 1)))
    cs = bs[:]
    n = 0
    for b in range(2**8):
        if b not in bs:
            bs.append(b)
            cs.append(2**8 + n)
            n += 1
    cs = [chr(n) for n in cs]
    return dict(zip(bs, cs, strict=True))


def test_the_byte_table_is_gpt2s():
    table = bytes_to_unicode()
    assert table == gpt2_bytes_to_unicode()
    assert list(table) == list(range(256)) and len(set(table.values())) == 256
    assert all(c.isprintable() and not c.isspace() for c in table.values())
    assert set(table.values()) == set(pre_tokenizers.ByteLevel.alphabet())  # HF's 256
    assert table[32] == "Ġ" and table[10] == "Ċ" and table[0] == "Ā"
    assert bpe.CHAR_TO_BYTE == {c: b for b, c in table.items()}


def test_the_pattern_splits_like_gpt2():
    assert SPLIT.findall("Hello world, it's 2024!!  ok\n\n  x") == [
        "Hello", " world", ",", " it", "'s", " 2024", "!!", " ", " ok", "\n\n ", " x"]
    assert SPLIT.findall("we'll they've I'm you'd she'S") == [
        "we", "'ll", " they", "'ve", " I", "'m", " you", "'d", " she", "'", "S"]
    # A Chinese clause is one chunk: only its punctuation splits it.
    assert SPLIT.findall("米拉学会了数数，这件事") == ["米拉学会了数数", "，", "这件事"]
    for line in LINES[:2000]:
        assert "".join(SPLIT.findall(line)) == line  # the chunks cover the text exactly


# --- training --------------------------------------------------------------------------------


def test_merge_replaces_left_to_right():
    assert merge([1, 2, 3, 1, 2], (1, 2), 9) == [9, 3, 9]
    assert merge([1, 1, 1], (1, 1), 9) == [9, 1]
    assert merge([1, 1, 1, 1], (1, 1), 9) == [9, 9]
    assert merge([2, 1], (1, 2), 9) == [2, 1]


@settings(max_examples=300)
@given(st.lists(st.integers(1, 3), max_size=14), st.tuples(st.integers(1, 3), st.integers(1, 3)))
def test_merge_with_changes_keeps_the_pair_counts_right(ids, pair):
    """The changes it lists turn the old pair counts into the new ones, overlaps included
    ("1 1 1", "1 2 1 2"): training relies on it."""
    new, changes = merge_with_changes(ids, pair, 9)
    assert new == merge(ids, pair, 9)
    counts = Counter(pairwise(ids))
    for p, sign in changes:
        counts[p] += sign
    del counts[pair]  # training drops the merged pair itself
    assert +counts == Counter(pairwise(new))


def naive_merges(text: str, num_merges: int) -> list[tuple[int, int]]:
    """The textbook loop: every chunk, every pair counted again after each merge."""
    words = [list(chunk.encode("utf-8")) for chunk in SPLIT.findall(text)]
    merges = []
    for new_id in range(256, 256 + num_merges):
        counts = Counter(p for ids in words for p in pairwise(ids))
        if not counts:
            break
        pair = min(counts, key=lambda p: (-counts[p], p))
        words = [merge(ids, pair, new_id) for ids in words]
        merges.append(pair)
    return merges


@pytest.mark.parametrize("text", [EN[:8_000], ZH[:3_000], "".join(generated_lines(3, 100))],
                         ids=["en", "zh", "mixed"])
def test_incremental_training_equals_counting_again_each_time(text):
    assert learn_merges(text, 50) == naive_merges(text, 50)


@settings(max_examples=100)
@given(st.text(alphabet="ab 1\n", max_size=60))
def test_incremental_training_equals_counting_again_on_repetitive_text(text):
    assert learn_merges(text, 12) == naive_merges(text, 12)


def test_the_first_merge_is_the_most_frequent_pair(trained):
    tok, _ = trained
    counts = Counter(p for chunk in SPLIT.findall(TRAIN_TEXT) for p in pairwise(chunk.encode()))
    first = next(iter(tok.merges))
    assert counts[first] == max(counts.values())
    assert tok.vocab[256] == tok.vocab[first[0]] + tok.vocab[first[1]]


def test_ties_go_to_the_smallest_ids_whatever_the_order_of_the_text():
    # "ab", "\n" and "xy" are the chunks of both: each pair occurs once.
    assert learn_merges("ab\nxy", 5) == learn_merges("xy\nab", 5) == [(97, 98), (120, 121)]
    # "ab" and " xy": (97, 98), (32, 120) and (120, 121) occur once each; (32, 120) is smallest.
    assert learn_merges("ab xy", 1) == [(32, 120)]


def test_training_is_deterministic():
    text = EN[:30_000] + ZH[:5_000]
    a, b = BPETokenizer.train(text, 100), BPETokenizer.train(text, 100)
    assert list(a.merges.items()) == list(b.merges.items()) and a.vocab == b.vocab


def test_zero_merges_is_one_token_per_byte():
    tok = BPETokenizer.train(EN[:1000], 0)
    assert tok.vocab_size == 256 and not tok.merges
    text = "Hi 你好 🐍\n"
    assert tok.encode(text) == list(text.encode("utf-8"))


def first_merges(tok: BPETokenizer, k: int) -> BPETokenizer:
    """The tokenizer made of the first ``k`` merges of ``tok`` only."""
    return BPETokenizer({i: t for i, t in tok.vocab.items() if i < 256 + k},
                        dict(list(tok.merges.items())[:k]))


def test_fewer_merges_are_the_first_ones_of_more():
    text = EN[:10_000] + ZH[:2_000]
    assert learn_merges(text, 10) == learn_merges(text, 100)[:10]


def test_merges_make_the_text_shorter(trained):
    tok, _ = trained
    text = EN[-20_000:] + ZH[-10_000:]  # not trained on
    lengths = [len(first_merges(tok, k).encode(text)) for k in (0, 10, 100, 300)]
    assert lengths[0] == len(text.encode("utf-8"))
    assert lengths == sorted(lengths, reverse=True) and len(set(lengths)) == 4
    assert lengths[-1] < 0.6 * lengths[0]


def test_merges_stay_inside_chunks():
    tok = BPETokenizer.train("dog. dog! dog? " * 50, 20)
    learned = [tok.vocab[i].decode() for i in range(256, tok.vocab_size)]
    assert " dog" in learned
    assert not [t for t in learned if any(c.isalpha() for c in t) and any(c in ".!?" for c in t)]


def test_training_stops_when_everything_is_merged():
    tok = BPETokenizer.train("aaaa aaaa", 50)
    assert tok.encode("aaaa aaaa") == [tok.vocab_size - 2, tok.vocab_size - 1]
    assert tok.vocab_size < 256 + 50


def test_unseen_text_is_its_bytes(trained):
    tok, _ = trained
    text = "\U0001F9EC 龘"  # in no training text
    assert tok.decode(tok.encode(text)) == text
    assert b"".join(tok.vocab[i] for i in tok.encode(text)) == text.encode("utf-8")
    assert tok.decode([231, 140]) == "\ufffd"  # part of a character: the replacement mark


# --- identical to Hugging Face ------------------------------------------------------------


def test_ids_equal_hugging_faces_on_10000_lines(trained, hf, capsys):
    tok, folder = trained
    gpt2 = GPT2TokenizerFast.from_pretrained(folder, local_files_only=True)
    assert len(LINES) >= 10_000 and not any("<|endoftext|>" in line for line in LINES)
    ours = [tok.encode(line) for line in LINES]
    theirs = [e.ids for e in hf.encode_batch(LINES)]
    theirs_gpt2 = gpt2(LINES, add_special_tokens=False)["input_ids"]
    agree = sum(a == b == c for a, b, c in zip(ours, theirs, theirs_gpt2, strict=True))
    with capsys.disabled():
        print(f"\nbpe: {agree} of {len(LINES)} lines encode to the same ids as Hugging Face")
    differ = [line for line, a, b, c in zip(LINES, ours, theirs, theirs_gpt2, strict=True)
              if not a == b == c]
    assert agree == len(LINES), f"{len(differ)} lines differ, the first: {differ[:3]!r}"
    assert sum(map(len, ours)) < 0.7 * sum(len(line.encode()) for line in LINES)  # merges used
    for line, ids in zip(LINES[::10], ours[::10], strict=True):
        assert tok.decode(ids) == hf.decode(ids) == line


@pytest.fixture(scope="module")
def hf(trained) -> Tokenizer:
    return hf_tokenizer(trained[1])


@settings(max_examples=200)
@given(st.text(st.characters(exclude_categories=("Cs", "Cn")), max_size=40))
def test_ids_equal_hugging_faces_on_any_text(trained, hf, text):
    """Any assigned characters (why not Cn: see random_char), mixed at random."""
    tok, _ = trained
    assert tok.encode(text) == hf.encode(text).ids


# --- decode(encode(s)) == s -------------------------------------------------------------------


@settings(max_examples=200)
@given(st.text(st.characters(exclude_categories=("Cs",))))
def test_round_trip_trained(trained, text):
    tok, _ = trained
    assert tok.decode(tok.encode(text)) == text


@settings(max_examples=100)
@given(st.text(st.characters(exclude_categories=("Cs",))))
def test_round_trip_without_merges(text):
    tok = BPETokenizer.train("", 0)
    ids = tok.encode(text)
    assert tok.decode(ids) == text and len(ids) == len(text.encode("utf-8"))


# --- vocab.json and merges.txt ---------------------------------------------------------------


def test_save_then_load_gives_the_same_tokenizer(trained):
    tok, folder = trained
    loaded = BPETokenizer.load(folder / "vocab.json", folder / "merges.txt")
    assert loaded.vocab == tok.vocab
    assert list(loaded.merges.items()) == list(tok.merges.items())  # the ranks too
    for line in LINES[::20]:
        assert loaded.encode(line) == tok.encode(line)


def test_merges_of_hashes_are_not_taken_for_the_version_line(tmp_path):
    tok = BPETokenizer.train("## Title\n### Part\n#tag #### " * 20, 10)
    tok.save(tmp_path)
    lines = (tmp_path / "merges.txt").read_text(encoding="utf-8").splitlines()
    assert "# #" in lines[1:]  # a merge that looks like a comment
    loaded = BPETokenizer.load(tmp_path / "vocab.json", tmp_path / "merges.txt")
    assert list(loaded.merges.items()) == list(tok.merges.items())


def test_the_files_are_in_gpt2s_format(trained):
    tok, folder = trained
    vocab = json.loads((folder / "vocab.json").read_text(encoding="utf-8"))
    assert len(vocab) == tok.vocab_size == 256 + NUM_MERGES
    assert vocab["Ġ"] == 32 and vocab["Ċ"] == 10 and vocab["a"] == 97 and vocab["Ā"] == 0
    lines = (folder / "merges.txt").read_text(encoding="utf-8").splitlines()
    assert lines[0] == "#version: 0.2" and len(lines) == 1 + NUM_MERGES
    for rank, line in enumerate(lines[1:]):
        a, b = line.split(" ")
        assert vocab[a + b] == 256 + rank


def gpt2_layout(tok: BPETokenizer, folder, newline: str = "\n"):
    """Write ``tok`` the way GPT-2's own files are laid out: bytes in the order of GPT-2's
    table (``!`` is 0, ``Ġ`` 220), then the merges, then ``<|endoftext|>``; vocab.json
    ASCII-escaped in one line, no newline at the end of merges.txt."""
    order = sorted(BYTE_TO_CHAR.values()) + [to_printable(tok.vocab[i])
                                             for i in range(256, tok.vocab_size)]
    vocab = {token: i for i, token in enumerate([*order, "<|endoftext|>"])}
    folder.mkdir()
    (folder / "vocab.json").write_text(json.dumps(vocab), encoding="ascii")
    merges = [f"{to_printable(tok.vocab[a])} {to_printable(tok.vocab[b])}" for a, b in tok.merges]
    (folder / "merges.txt").write_text(newline.join(["#version: 0.2", *merges]), encoding="utf-8")
    return folder / "vocab.json", folder / "merges.txt"


@pytest.mark.parametrize("newline", ["\n", "\r\n"])
def test_gpt2s_own_layout_with_endoftext_loads(trained, tmp_path, newline):
    tok, _ = trained
    vocab_path, merges_path = gpt2_layout(tok, tmp_path / "gpt2", newline)
    gpt2 = BPETokenizer.load(vocab_path, merges_path)
    eot = gpt2.vocab_size - 1
    assert gpt2.vocab_size == 256 + NUM_MERGES + 1 and gpt2.vocab[eot] == b"<|endoftext|>"
    assert gpt2.encode("!") == [0] and gpt2.encode(" ") == [220]  # as in GPT-2
    assert gpt2.decode([eot]) == "<|endoftext|>"
    assert eot not in gpt2.encode("a<|endoftext|>b <|endoftext|>")  # only ever a special token
    hf = Tokenizer(models.BPE.from_file(str(vocab_path), str(merges_path)))
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    for line in LINES[::10]:
        ids = gpt2.encode(line)
        assert ids == hf.encode(line).ids
        assert [gpt2.vocab[i] for i in ids] == [tok.vocab[i] for i in tok.encode(line)]


# --- bad input: one clear UserError ---------------------------------------------------------


@pytest.fixture
def good_files(tmp_path):
    """A small tokenizer's files, for the tests below to spoil one at a time."""
    BPETokenizer.train("the cat sat on the mat", 5).save(tmp_path)
    return tmp_path / "vocab.json", tmp_path / "merges.txt"


def _load_error(vocab_path, merges_path) -> str:
    with pytest.raises(UserError) as e:
        BPETokenizer.load(vocab_path, merges_path)
    message = str(e.value)
    assert "\n" not in message
    return message


def test_missing_files(good_files, tmp_path):
    vocab_path, merges_path = good_files
    assert "no such file" in _load_error(tmp_path / "nope.json", merges_path)
    assert "no such file" in _load_error(vocab_path, tmp_path / "nope.txt")


@pytest.mark.parametrize("content, fragment", [
    ("{not json", "not valid JSON"),
    ("[1, 2, 3]", "one JSON object"),
    ('{"a": "0"}', "one JSON object"),
    ('{"a": true}', "one JSON object"),
    ('{"a": 0, "b": 2}', "the ids must be 0..1"),
    ('{"a b": 0}', "not one of GPT-2's 256 byte characters"),
    (json.dumps({c: i for i, c in enumerate(sorted(BYTE_TO_CHAR.values())[1:])}),
     "no token for byte"),
])
def test_bad_vocab_json(good_files, content, fragment):
    vocab_path, merges_path = good_files
    vocab_path.write_text(content, encoding="utf-8")
    merges_path.write_text("#version: 0.2\n", encoding="utf-8")  # no merges to check
    assert fragment in _load_error(vocab_path, merges_path)


@pytest.mark.parametrize("line, fragment", [
    ("Ġ t h", "'Ġ t h' is not two tokens"),
    ("Ġt", "'Ġt' is not two tokens"),
    ("Ġ 猫", "'猫' is not in"),
    ("t a", "'ta' is not in"),  # both tokens are known, what they make is not
])
def test_bad_merges_txt(good_files, line, fragment):
    vocab_path, merges_path = good_files
    with merges_path.open("a", encoding="utf-8") as f:
        f.write(line + "\n")  # line 7: after "#version: 0.2" and the 5 merges
    assert f"line 7: {fragment}" in _load_error(vocab_path, merges_path)


def test_files_that_are_not_utf8(good_files):
    vocab_path, merges_path = good_files
    merges_path.write_bytes(b"#version: 0.2\n\xff\xfe\n")
    assert "cannot read" in _load_error(vocab_path, merges_path)


@pytest.mark.parametrize("bad_id", [-1, 256 + NUM_MERGES, 10**9])
def test_decoding_an_id_outside_the_vocabulary(trained, bad_id):
    tok, _ = trained
    with pytest.raises(UserError, match=f"token id {bad_id} is not in the vocabulary"):
        tok.decode([1, bad_id])


def test_negative_merges():
    with pytest.raises(UserError, match="0 or more"):
        BPETokenizer.train("abc", -1)


# --- python -m stage1_data.bpe ---------------------------------------------------------------


def run_main(capsys, *argv: object) -> str:
    bpe.main([str(a) for a in argv])
    return capsys.readouterr().out


def test_cli_on_english(capsys):
    out = run_main(capsys, "--data", "en", "--merges", 20)
    ids = BPETokenizer.train(EN, 20).encode(EN)
    assert "corpus: en\n  195,386 characters, 195,386 UTF-8 bytes\n" in out
    assert "  20 merges learned in " in out and "256 bytes + 20 = 276 tokens" in out
    assert f"  {len(ids):,} tokens: {len(EN) / len(ids):.2f}x fewer than bytes" in out
    assert "the first 20 merges (id: pair -> new token):\n    256: ' ' + 't' -> ' t'\n" in out
    assert "    275: " in out and "    276: " not in out
    example = out.split("tokens:\n  ")[-1].strip()
    line = next(line for line in EN.splitlines() if len(line) >= 40)[:60]
    assert example.startswith("|") and example.endswith("|")
    assert example.strip("|").replace("|", "") == line  # the tokens, in order, are the line


def test_cli_on_chinese_says_which_tokens_are_whole_characters(zh_run):
    proc, folder = zh_run
    run = finish(proc)
    assert run.returncode == 0 and not run.stderr, run.stderr
    out = run.stdout
    assert "554,350 characters, 1,627,222 UTF-8 bytes" in out
    assert "    256: <ef> + <bc> -> <ef bc>  (part of a character)\n" in out
    assert "    258: <ef bc> + <8c> -> '，'  (a whole character)\n" in out
    assert "    263: " in out and "    264: " not in out  # --show 8
    example = out.split("tokens:\n  ")[-1]
    assert "|<e" in example and "|，|" in example  # parts of characters in hex, whole ones as text
    assert out.endswith(f"saved vocab.json and merges.txt in {folder}\n")
    tok = BPETokenizer.load(folder / "vocab.json", folder / "merges.txt")
    assert tok.vocab_size == 276 and tok.vocab[258] == "，".encode()
    assert list(tok.merges)[:3] == [(0xEF, 0xBC), (0xE4, 0xB8), (256, 0x8C)]  # as printed
    sample = ZH[:2000]
    assert tok.decode(tok.encode(sample)) == sample
    assert len(tok.encode(sample)) < 0.85 * len(sample.encode("utf-8"))


def test_cli_help_shows_the_defaults(capsys):
    with pytest.raises(SystemExit) as e:
        bpe.main(["--help"])
    out = capsys.readouterr().out
    assert e.value.code == 0 and out.startswith("usage: python -m stage1_data.bpe")
    assert "(default: 300)" in out and "(default: en)" in out


@pytest.mark.parametrize("args, fragment", [
    (["--merges", "many"], "invalid int value"),
    (["--merges", "-1"], "the number of merges must be 0 or more"),
    (["--data", "no/such/file.txt"], "no such file"),
    (["--unknown"], "unrecognized arguments"),
])
def test_cli_bad_flags_give_one_error_line(capsys, args, fragment):
    with pytest.raises(SystemExit) as e:
        bpe.main(args)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert_user_error(err, fragment)
    assert len([line for line in err.splitlines() if "error" in line]) == 1


def test_cli_out_onto_a_file(capsys, tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(SystemExit) as e:
        bpe.main(["--data", "en", "--merges", "0", "--out", str(tmp_path / "file")])
    assert e.value.code == 2
    assert_user_error(capsys.readouterr().err, "cannot write vocab.json and merges.txt")
