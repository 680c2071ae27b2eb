"""Stage 1's exercises, as the workbook grader sees them (tools/workbook.py: 1.1 encode,
1.2 decode, 1.3 get_batch): one typical mistake per test, each failing with a message
in plain words, saying what was expected and what came instead."""

from __future__ import annotations

import pytest
import torch

from stage1_data.data import get_batch
from stage1_data.errors import UserError
from stage1_data.tokenizer import CharTokenizer


def hello() -> CharTokenizer:
    return CharTokenizer.from_text("hello")  # the vocabulary e, h, l, o: ids 0, 1, 2, 3


def user_error(fn, *args, **kwargs) -> tuple[UserError | None, str]:
    """The UserError ``fn`` raises; else None and what happened instead, in words."""
    try:
        value = fn(*args, **kwargs)
    except UserError as e:
        return e, ""
    except Exception as e:  # noqa: BLE001 (any other error is the mistake being described)
        return None, f"{type(e).__name__}: {e}"
    return None, f"no error (it returned {value!r})"


# --------------------------------------------------------------------------- 1.1 encode


def test_encode_gives_the_ids_of_the_sorted_vocabulary():
    got = hello().encode("hell")
    assert got == [1, 0, 2, 2], (
        f"encode('hell') with the vocabulary e, h, l, o (ids 0..3) should be [1, 0, 2, 2], "
        f"got {got!r}")
    assert type(got) is list and all(type(i) is int for i in got), (
        f"encode should return a list of Python ints, got a {type(got).__name__}")
    assert hello().encode("") == [], "encode('') should be the empty list"


def test_encode_rejects_an_unknown_character_with_a_user_error():
    err, instead = user_error(hello().encode, "help")
    assert err is not None, (
        f"encode('help') should raise a UserError ('p' is not in the vocabulary), got {instead}")
    assert "'p' at position 3" in str(err), (
        f"the error should name 'p' at position 3 (positions count from 0), got: {err}")


def test_encode_names_every_unknown_character_up_to_ten():
    err, instead = user_error(hello().encode, "hexyz")
    assert err is not None, f"encode('hexyz') should raise a UserError, got {instead}"
    for part in ("3 unknown characters", "'x' at position 2", "'y' at position 3",
                 "'z' at position 4"):
        assert part in str(err), f"the error for 'hexyz' should say {part!r}, got: {err}"
    err, instead = user_error(hello().encode, "h" + "x" * 12)
    assert err is not None, f"encode('h' + 12 x's) should raise a UserError, got {instead}"
    assert "12 unknown characters" in str(err) and "(and 2 more)" in str(err), (
        f"for 12 unknown characters the error should count all 12 and show 10 "
        f"('... (and 2 more)'), got: {err}")


# --------------------------------------------------------------------------- 1.2 decode


def test_decode_joins_the_characters_of_the_ids():
    got = hello().decode([1, 0, 2, 2, 3])
    assert got == "hello", f"decode([1, 0, 2, 2, 3]) should be 'hello', got {got!r}"
    assert hello().decode([]) == "", "decode([]) should be ''"


@pytest.mark.parametrize("ids", [torch.tensor([1, 0, 3]), iter([1, 0, 3]), (i for i in (1, 0, 3))],
                         ids=["tensor", "iterator", "generator"])
def test_decode_accepts_any_iterable_of_ints(ids):
    kind = type(ids).__name__
    try:
        got = hello().decode(ids)
    except Exception as e:  # noqa: BLE001
        pytest.fail(f"decode of a {kind} of ids 1, 0, 3 should be 'heo', got {type(e).__name__}: {e}")
    assert got == "heo", f"decode of a {kind} of ids 1, 0, 3 should be 'heo', got {got!r}"


@pytest.mark.parametrize("bad", [4, -1, 99])
def test_decode_rejects_an_id_outside_the_vocabulary(bad):
    err, instead = user_error(hello().decode, [1, bad])
    assert err is not None, (
        f"decode([1, {bad}]) should raise a UserError (ids run from 0 to 3), got {instead}")
    assert str(bad) in str(err), f"the error should name the id {bad}, got: {err}"


# --------------------------------------------------------------------------- 1.3 get_batch


def test_batch_shapes_and_dtype():
    data = torch.arange(50, dtype=torch.uint8)
    x, y = get_batch(data, 4, 8, generator=torch.Generator().manual_seed(0))
    assert x.shape == (4, 8) and y.shape == (4, 8), (
        f"batch_size=4, block_size=8 should give x and y of shape (4, 8), got "
        f"{tuple(x.shape)} and {tuple(y.shape)}")
    assert x.dtype == torch.long and y.dtype == torch.long, (
        f"x and y should be torch.long whatever the data's dtype (uint8 here), got {x.dtype} "
        f"and {y.dtype}")


def test_y_is_x_shifted_by_one():
    data = torch.arange(100)  # every value is its own position
    x, y = get_batch(data, 16, 5, generator=torch.Generator().manual_seed(1))
    assert torch.equal(x[:, 1:], x[:, :-1] + 1), (
        f"each row of x should be a window of the data (consecutive tokens), got {x[0].tolist()}")
    assert torch.equal(y, x + 1), (
        f"y should be x shifted one to the left: for x = {x[0].tolist()}, y should be "
        f"{(x[0] + 1).tolist()}, got {y[0].tolist()}")


def test_the_batch_lands_on_the_device_it_is_given():
    """Where x and y land, seen without a GPU: PyTorch's "meta" device keeps a tensor's
    shape and dtype but no values, so a batch moved there (x.to(device)) is on it, and a
    batch that ignores ``device`` stays on the CPU. With a GPU, "cuda" is checked too."""
    data = torch.arange(50, dtype=torch.uint8)
    for device in ["meta"] + (["cuda"] if torch.cuda.is_available() else []):
        try:
            x, y = get_batch(data, 4, 8, generator=torch.Generator().manual_seed(0), device=device)
        except Exception as e:  # noqa: BLE001
            pytest.fail(f"get_batch(..., device={device!r}) should give a batch on {device}, got "
                        f"{type(e).__name__}: {e}")
        where = {"x": x.device.type, "y": y.device.type}
        if set(where.values()) == {"cpu"}:
            pytest.fail(f"get_batch(..., device={device!r}) should return x and y on {device}, "
                        "but both are on the CPU: the device it is given is ignored (move them "
                        "with x.to(device), whatever the device's name)")
        for name, kind in where.items():
            assert kind == device, (
                f"get_batch(..., device={device!r}) should return x and y on {device}, but "
                f"{name} is on {kind}: move {name} too")
        assert x.dtype == torch.long and y.dtype == torch.long and x.shape == (4, 8) == y.shape, (
            f"on {device} too, x and y should be torch.long of shape (4, 8), got {x.dtype} "
            f"{tuple(x.shape)} and {y.dtype} {tuple(y.shape)}")


def test_every_window_fits_and_every_start_is_drawn():
    T = 6
    for n in (T + 1, T + 2, T + 3):  # the shortest data that fits, and a little longer
        data = torch.arange(n)
        g = torch.Generator().manual_seed(n)
        try:
            starts = [get_batch(data, 8, T, generator=g)[0][:, 0] for _ in range(25)]
        except Exception as e:  # noqa: BLE001
            pytest.fail(f"get_batch on {n} tokens with block_size={T} should work (it needs "
                        f"{T + 1}), got {type(e).__name__}: {e}")
        seen = sorted(set(torch.cat(starts).tolist()))
        assert seen == list(range(n - T)), (
            f"with {n} tokens and block_size={T}, windows of {T + 1} tokens can start at "
            f"{list(range(n - T))} and each should be drawn; the starts drawn were {seen}")


def test_the_generator_decides_the_batch():
    data = torch.arange(1000)
    torch.manual_seed(0)
    a = get_batch(data, 4, 8, generator=torch.Generator().manual_seed(7))[0]
    torch.manual_seed(1)
    b = get_batch(data, 4, 8, generator=torch.Generator().manual_seed(7))[0]
    assert torch.equal(a, b), (
        "two generators with the same seed should give the same batch, whatever the global "
        f"seed; got starts {a[:, 0].tolist()} and {b[:, 0].tolist()} (pass generator= to "
        "torch.randint)")


def test_bad_sizes_are_user_errors():
    data = torch.arange(10)
    err, instead = user_error(get_batch, data, 0, 4)
    assert err is not None and "batch_size" in str(err), (
        f"batch_size=0 should be a UserError naming batch_size, got {instead or err}")
    err, instead = user_error(get_batch, data, 2, 10)
    assert err is not None and "block_size" in str(err), (
        f"block_size=10 on 10 tokens (a window needs 11) should be a UserError naming "
        f"block_size, got {instead or err}")
