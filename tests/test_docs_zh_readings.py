"""tools/docs_zh_readings.py: the Chinese twins of the generated prose fragments.

Each template gets a line of the kind the English fragments hold (taken from the
generated files), and the numbers and lists in it must come out unchanged in the
Chinese line, with no English words left; a line no template knows must stop the
job, not pass through in English.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("docs_zh_readings",
                                              ROOT / "tools" / "docs_zh_readings.py")
zr = importlib.util.module_from_spec(spec)
spec.loader.exec_module(zr)

CJK = re.compile(r"[\u4e00-\u9fff]")


def numbers(s: str) -> list[str]:
    return re.findall(r"-?\d+(?:\.\d+)?(?:e[+-]\d+)?", s)


def english_words(s: str) -> list[str]:
    """Words of 3+ Latin letters outside code spans and math."""
    s = re.sub(r"`[^`]*`", "", s)
    s = re.sub(r"\$[^$]*\$", "", s)
    return re.findall(r"[A-Za-z]{3,}", s)


# (templates, English line as the generators write it, a piece the Chinese must keep)
SAMPLES = [
    (zr.LAYER_PREDICTIONS,
     "Right guesses (bold cells) out of 23, row by row, the mean probability given to the "
     "actual next character, and where the guess is right (input → next):", "23"),
    (zr.LAYER_PREDICTIONS, "- **x₀ embeddings**: 0 of 23, mean p 0.02", "x₀"),
    (zr.LAYER_PREDICTIONS,
     "- **x₁ after layer 0**: 9 of 23, mean p 0.34: `H→E` `X→␣` `A→N`", "`H→E` `X→␣` `A→N`"),
    (zr.LAYER_PREDICTIONS,
     "- **x₄ after layer 3 (output)**: 11 of 23, mean p 0.40: `哪→里` `。→⏎` `⏎→早`",
     "`哪→里` `。→⏎` `⏎→早`"),
    (zr.LAYER_PREDICTIONS,
     "Change in right guesses made by each layer: layer 0 +9, layer 1 +1, layer 2 +4, "
     "layer 3 -2. Still wrong at the output: `T→H` `␣→F` `C→R`.", "`T→H` `␣→F` `C→R`"),
    (zr.POSITION_SIMILARITY,
     "Mean cosine similarity of two positions $d$ apart (the right-hand plot), read out:", "$d$"),
    (zr.POSITION_SIMILARITY, "| $d$ | 1 | 2 | 3 | 4 | 5 | 6 | 7 | 8 |", "| 8 |"),
    (zr.POSITION_SIMILARITY, "|---|---:|---:|---:|", "|---|---:|"),
    (zr.POSITION_SIMILARITY, "| mean | 0.49 | -0.02 | 0.18 | 0.55 |", "| 0.49 | -0.02 |"),
    (zr.POSITION_SIMILARITY,
     "It is largest at $d = 4$ (0.55); 46 of the 63 distances have a negative mean. "
     "Over $d = 1..8$ it does not fall steadily: it goes up and down.", "$d = 4$"),
    (zr.POSITION_SIMILARITY,
     "It is largest at $d = 1$ (0.61); 0 of the 31 distances have a negative mean. "
     "Over $d = 1..8$ it falls steadily with distance.", "$d = 1..8$"),
    (zr.LR_SCHEDULE,
     "| settings | `--warmup-iters` | lr at step 0 | peak `--lr` | halfway | `--min-lr` | "
     "steps |", "`--warmup-iters`"),
    (zr.LR_SCHEDULE,
     "| `defaults` | 100 | 2.00e-05 | 2.00e-03 | 1.05e-03 (step 1050) | 1.00e-04 | 2000 |",
     "2.00e-05"),
    (zr.LR_SCHEDULE,
     "| `--preset nanogpt-cpu` | 100 | 1.00e-05 | 1.00e-03 | 5.50e-04 (step 1050) | 1.00e-04 "
     "| 2000 |", "`--preset nanogpt-cpu`"),
    # tools/docs_presets.py writes these (the file exists once its Tiny Shakespeare job ran).
    (zr.PRESETS,
     "| preset | `--dtype` | steps | final val loss | best val loss | first eval at val <= 1.80 "
     "| training loop |", "1.80"),
    (zr.PRESETS,
     "| `shakespeare-2min` | auto (bfloat16) | 3000 | 1.7712 | 1.7650 | 98 s | 115 s |",
     "bfloat16"),
    (zr.PRESETS,
     "| `nanogpt-cpu` | float32 | 2000 | 1.8858 | 1.8858 | not reached | 62 s |", "float32"),
]


@pytest.mark.parametrize(("templates", "line", "kept"), SAMPLES)
def test_every_template_keeps_the_numbers_and_leaves_no_english(templates, line, kept):
    zh = zr.translate_line(line, templates)
    assert sorted(numbers(zh)) == sorted(numbers(line))
    assert kept in zh
    assert english_words(zh) == [], zh
    assert CJK.search(zh) or line.startswith("|") and not re.search(r"[a-z]{3,}", line)


def test_the_direction_of_the_position_reading_is_kept():
    steady = "It is largest at $d = 1$ (0.61); 0 of the 31 distances have a negative mean. " \
             "Over $d = 1..8$ it falls steadily with distance."
    wavy = steady.replace("falls steadily with distance.",
                          "does not fall steadily: it goes up and down.")
    assert zr.translate_line(steady, zr.POSITION_SIMILARITY) != zr.translate_line(
        wavy, zr.POSITION_SIMILARITY)
    assert "并不" in zr.translate_line(wavy, zr.POSITION_SIMILARITY)


def test_no_wrong_guess_left_says_so():
    line = "Change in right guesses made by each layer: layer 0 +3. Still wrong at the output: none."
    assert zr.translate_line(line, zr.LAYER_PREDICTIONS).endswith("没有。")


@pytest.mark.parametrize("line", [
    "Right guesses out of 23, row by row:",                       # reworded
    "- **x₁ after block 0**: 9 of 23, mean p 0.34",               # an unknown row name
    "| `--preset other` | 100 | 1e-05 | 1e-03 | 5e-04 (step 9) | 1e-04 | 2000 |x",
    "Something new the generator started to print.",
])
def test_an_unknown_line_stops_the_job(line):
    templates = zr.LAYER_PREDICTIONS + zr.LR_SCHEDULE
    with pytest.raises(SystemExit, match="docs_zh_readings"):
        zr.translate_line(line, templates, "x.md")


def test_the_job_translates_every_fragment_and_fails_on_a_missing_one(tmp_path):
    gen = ROOT / "docs" / "generated"
    written = {}
    present = {n: t for n, t in zr.FRAGMENTS.items() if (gen / n).is_file()}
    zr.translate_files(gen, present, written.__setitem__)
    assert set(written) == {zr.zh_name(n) for n in present}
    for name, text in written.items():
        english = (gen / name.replace("_zh.md", ".md")).read_text(encoding="utf-8")
        assert sorted(numbers(text)) == sorted(numbers(english))
        assert english_words(text) == []
    with pytest.raises(SystemExit, match="missing"):
        zr.translate_files(tmp_path, {"nothing.md": zr.LR_SCHEDULE}, written.__setitem__)


def test_the_jobs_declare_the_english_fragments_as_inputs():
    import sys
    sys.path.insert(0, str(ROOT / "tools"))
    import gen_docs

    by_name = {j.name: j for j in gen_docs.JOBS}
    job = by_name["zh_readings"]
    assert {f"docs/generated/{n}" for n in zr.FRAGMENTS} <= set(job.files)
    assert "tools/docs_zh_readings.py" in job.files
    assert set(job.outputs) == {zr.zh_name(n) for n in zr.FRAGMENTS}
    assert by_name["zh_readings_shakespeare"].shakespeare
