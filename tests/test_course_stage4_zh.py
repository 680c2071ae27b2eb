"""tools/docs_course_stage4.py: the Chinese table and reading of stage 4's ablations.

The Chinese edition cannot include English prose, so the table job writes a Chinese
twin of the table and of the sentences that read it. The twins must quote exactly the
numbers of the English ones, line by line, and leave no English words outside code
spans: both for the files in docs/generated/ and for made-up rows that reach the
branches the stored rows do not (a part that helps, one within the seed spread).
"""

from __future__ import annotations

import importlib.util
import re
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GEN = ROOT / "docs" / "generated"
spec = importlib.util.spec_from_file_location("docs_course_stage4",
                                              ROOT / "tools" / "docs_course_stage4.py")
s4 = importlib.util.module_from_spec(spec)
spec.loader.exec_module(s4)

NUMBER = re.compile(r"[+-]?\d+(?:,\d{3})*(?:\.\d+)?")
CJK = re.compile(r"[\u4e00-\u9fff]")


def numbers(line: str) -> Counter:
    return Counter(NUMBER.findall(line))


def english_words(line: str) -> list[str]:
    """Words of 3+ Latin letters outside code spans."""
    return re.findall(r"[A-Za-z]{3,}", re.sub(r"`[^`]*`", "", line))


def lines(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if ln.strip()]


def assert_twins(en: str, zh: str) -> None:
    en_lines, zh_lines = lines(en), lines(zh)
    assert len(zh_lines) == len(en_lines), "the Chinese text has another number of lines"
    for e, z in zip(en_lines, zh_lines, strict=True):
        assert numbers(z) == numbers(e), f"numbers differ:\n  {e}\n  {z}"
        assert english_words(z) == [], f"English left in: {z}"
        if not set(z) <= set("|-: "):  # a table's separator line has no words to translate
            assert CJK.search(z), f"no Chinese in: {z}"


def run(params: int, train: float, val: float, seconds: float = 50.0) -> dict:
    return {"params": params, "train_loss": train, "val_loss": val, "train_seconds": seconds}


FULL = run(159_164, 1.1587, 1.4788, 128)
SEEDS = [run(159_164, 1.1608, 1.5135), run(159_164, 1.1533, 1.5204)]


def rows(vals: list[float], params: list[int]) -> list:
    return [(change, part, flags, run(p, v + 0.2, v))
            for (_, part, change, flags), v, p in zip(s4.ABLATIONS, vals, params, strict=True)]


CASES = {
    # the kind the docs hold: costs well beyond the seed spread, one within it
    "costs": rows([3.1011, 1.6717, 1.6053, 1.5174], [159_164, 59_516, 158_396, 159_164]),
    # a part that helps (and grows the model), one within the spread, one cost alone
    "helps": rows([1.4100, 1.4800, 1.5000, 1.5300], [160_000, 59_516, 158_396, 159_164]),
    # nothing beyond the seed spread at all
    "noise": rows([1.4800, 1.4790, 1.4700, 1.4900], [159_164, 59_516, 158_396, 159_164]),
}


@pytest.mark.parametrize("case", CASES)
def test_the_chinese_reading_quotes_the_same_numbers(case):
    r = CASES[case]
    assert_twins(s4.reading(FULL, r, SEEDS, 3.2702), s4.reading_zh(FULL, r, SEEDS, 3.2702))


@pytest.mark.parametrize("case", CASES)
def test_the_chinese_table_holds_the_same_numbers(case):
    r = CASES[case]
    assert_twins(s4.table(FULL, r, SEEDS), s4.table_zh(FULL, r, SEEDS))


def test_the_verdicts_follow_the_numbers():
    """The Chinese reading says what the English one says, not only the same numbers."""
    helps = s4.reading_zh(FULL, CASES["helps"], SEEDS, 3.2702)
    assert "反而让验证损失*降低*了 0.0688" in helps  # 1.4788 - 1.4100
    assert "没有超出种子之间的差距" in helps
    assert "代价最大的是把四个头换成一个。" in helps  # the next largest is within the spread
    noise = s4.reading_zh(FULL, CASES["noise"], SEEDS, 3.2702)
    assert "没有哪个部件造成的差距超出种子之间的差距" in noise
    costs = s4.reading_zh(FULL, CASES["costs"], SEEDS, 3.2702)
    assert costs.index("去掉残差连接") < costs.index("去掉前馈网络") < costs.index("去掉层归一化")
    assert "同时还去掉了 159,164 个参数中的 99,648 个" in costs


@pytest.mark.parametrize("en, zh", [(s4.TABLE, s4.TABLE_ZH), (s4.READING, s4.READING_ZH)])
def test_the_generated_chinese_files_match_the_english_ones(en, zh):
    job = next(j for j in s4.jobs(_Job, _GenDocs) if j.name == "stage4_ablation")
    assert zh in job.outputs, f"the stage4_ablation job does not declare {zh}"
    assert (GEN / zh).is_file(), f"docs/generated/{zh} is missing: run the stage4_ablation job"
    assert_twins((GEN / en).read_text(encoding="utf-8"), (GEN / zh).read_text(encoding="utf-8"))


class _Job:
    """Just enough of gen_docs.Job to read the jobs' names and outputs."""

    def __init__(self, name, about, func, **kw):
        self.name, self.outputs = name, kw.get("outputs", ())


class _GenDocs:
    TRAINING = TABLE = ()
    RUNS = "runs"

    @staticmethod
    def train_job(*a, **kw):  # never called here
        raise AssertionError
