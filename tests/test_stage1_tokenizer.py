"""Stage 1: the character tokenizer."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stage1_data.errors import UserError
from stage1_data.tokenizer import CharTokenizer

# Single code points from every corner we care about: ASCII, whitespace, CJK,
# and emoji outside the Basic Multilingual Plane (surrogates excluded: they are
# not text).
CHARS = st.one_of(
    st.characters(codec="utf-8"),
    st.sampled_from("\n\t 你好世界学习中文，。！？"),
    st.sampled_from("🐍😀🎉"),
)
VOCABS = st.lists(CHARS, min_size=1, max_size=60, unique=True)
FEWER = settings(max_examples=50)  # enough to hit CJK, emoji and odd code points; keeps it fast


@st.composite
def vocab_and_text(draw):
    chars = draw(VOCABS)
    text = "".join(draw(st.lists(st.sampled_from(chars), max_size=200)))
    return chars, text


@FEWER
@given(vocab_and_text())
def test_round_trip_for_text_built_from_the_vocabulary(case):
    chars, text = case
    tok = CharTokenizer(chars)
    ids = tok.encode(text)
    assert len(ids) == len(text)  # one id per character, emoji included
    assert all(0 <= i < tok.vocab_size for i in ids)
    assert tok.decode(ids) == text


@FEWER
@given(st.text(alphabet=CHARS, min_size=1, max_size=300))
def test_from_text_round_trips_its_own_text(text):
    tok = CharTokenizer.from_text(text)
    assert tok.vocab_size == len(set(text))
    assert tok.decode(tok.encode(text)) == text


@FEWER
@given(VOCABS)
def test_vocab_is_sorted_and_stoi_itos_are_inverse(chars):
    tok = CharTokenizer(chars)
    assert tok.chars == sorted(chars)
    assert tok.vocab_size == len(chars)
    assert list(tok.stoi.values()) == list(range(len(chars)))
    for ch, i in tok.stoi.items():
        assert tok.itos[i] == ch
    for i, ch in tok.itos.items():
        assert tok.stoi[ch] == i


def test_ids_do_not_depend_on_the_order_of_the_text():
    a = CharTokenizer.from_text("hello world")
    b = CharTokenizer.from_text("dlrow olleh")
    assert a.chars == b.chars == [" ", "d", "e", "h", "l", "o", "r", "w"]
    assert a.encode("hello") == b.encode("hello") == [3, 2, 4, 4, 5]


def test_cjk_and_emoji_are_one_token_each():
    tok = CharTokenizer.from_text("你好🐍")
    assert tok.vocab_size == 3
    assert tok.encode("🐍你") == [tok.stoi["🐍"], tok.stoi["你"]]
    assert tok.decode(tok.encode("好🐍好")) == "好🐍好"


def test_unknown_characters_are_named_with_their_positions():
    tok = CharTokenizer.from_text("abc")
    with pytest.raises(UserError) as e:
        tok.encode("axbyc🐍")
    msg = str(e.value)
    assert msg.startswith("3 unknown characters not in the vocabulary of 3:")
    assert "'x' at position 1" in msg
    assert "'y' at position 3" in msg
    assert "'🐍' at position 5" in msg
    assert "'a'" not in msg and "'b'" not in msg


def test_single_unknown_character_uses_the_singular():
    tok = CharTokenizer.from_text("abc")
    with pytest.raises(UserError, match=r"^1 unknown character not in .*'z' at position 0\."):
        tok.encode("zab")


def test_many_unknown_characters_are_summarised():
    tok = CharTokenizer.from_text("a")
    with pytest.raises(UserError) as e:
        tok.encode("a" + "0123456789XYZ")
    msg = str(e.value)
    assert msg.startswith("13 unknown characters")
    assert "'9' at position 10" in msg  # the tenth one is shown
    assert "'X'" not in msg  # the eleventh is not
    assert "(and 3 more)" in msg


def test_encode_of_empty_text_is_empty():
    assert CharTokenizer.from_text("ab").encode("") == []
    assert CharTokenizer.from_text("ab").decode([]) == ""


@pytest.mark.parametrize("bad", [-1, 3, 100])
def test_decode_rejects_ids_outside_the_vocabulary(bad):
    tok = CharTokenizer.from_text("abc")
    with pytest.raises(UserError) as e:
        tok.decode([0, bad, 1])
    assert str(bad) in str(e.value)
    assert "0..2" in str(e.value)


def test_decode_accepts_tensors_of_ids():
    torch = pytest.importorskip("torch")
    tok = CharTokenizer.from_text("abc")
    assert tok.decode(torch.tensor([2, 0, 1])) == "cab"


@pytest.mark.parametrize(
    "chars, fragment",
    [([], "empty"), (["a", "bc"], "exactly one character"), (["a", 1], "exactly one character"),
     (["a", "a"], "twice")],
)
def test_bad_vocabularies_are_rejected(chars, fragment):
    with pytest.raises(UserError, match=fragment):
        CharTokenizer(chars)


def test_empty_text_has_no_vocabulary():
    with pytest.raises(UserError, match="empty"):
        CharTokenizer.from_text("")


def test_save_load_round_trip_is_readable_json(tmp_path):
    text = 'He said "hi"\\ and left.\n你好，世界 🐍\t'
    tok = CharTokenizer.from_text(text)
    path = tmp_path / "vocab.json"
    tok.save(path)

    raw = path.read_bytes()
    assert not raw.startswith(b"\x80")  # a pickle would start with the PROTO opcode
    d = json.loads(raw.decode("utf-8"))
    assert d["format"] == "char-tokenizer"
    assert d["chars"] == tok.chars
    # Stored as the characters themselves, not \\u escapes: a reader can check it.
    assert "你" in raw.decode("utf-8") and "🐍" in raw.decode("utf-8")

    loaded = CharTokenizer.load(path)
    assert loaded.chars == tok.chars
    assert loaded.stoi == tok.stoi
    assert loaded.decode(loaded.encode(text)) == text


@FEWER
@given(VOCABS)
def test_to_dict_survives_json(chars):
    tok = CharTokenizer(chars)
    again = CharTokenizer.from_dict(json.loads(json.dumps(tok.to_dict(), ensure_ascii=False)))
    assert again.chars == tok.chars


@pytest.mark.parametrize(
    "content",
    [
        "{not json",
        "[1, 2, 3]",
        '"just a string"',
        '{"chars": ["a", "b"]}',
        '{"format": "something-else", "chars": ["a"]}',
        '{"format": "char-tokenizer"}',
        '{"format": "char-tokenizer", "chars": null}',
        '{"format": "char-tokenizer", "chars": 5}',
        '{"format": "char-tokenizer", "chars": {"a": 0}}',
        '{"format": "char-tokenizer", "chars": ["a", "a"]}',
        '{"format": "char-tokenizer", "chars": ["ab"]}',
        '{"format": "char-tokenizer", "chars": []}',
    ],
)
def test_load_of_a_bad_vocabulary_file_is_a_user_error(tmp_path, content):
    path = tmp_path / "vocab.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(UserError):
        CharTokenizer.load(path)


def test_load_of_a_missing_or_binary_file_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="cannot read vocabulary file"):
        CharTokenizer.load(tmp_path / "nope.json")
    with pytest.raises(UserError, match="cannot read vocabulary file"):
        CharTokenizer.load(tmp_path)  # a folder
    binary = tmp_path / "vocab.pkl"
    binary.write_bytes(b"\x80\x04\x95\xff\xfe")
    with pytest.raises(UserError, match="cannot read vocabulary file"):
        CharTokenizer.load(binary)
