"""tools/docs/verse.py: the one count of Tang verse form that every page quotes."""

from __future__ import annotations

import doctest

from tools.docs import verse
from tools.docs.verse import verse_form


def test_the_module_example_holds():
    assert doctest.testmod(verse).failed == 0


def test_a_poem_counts_its_clauses_titles_and_sentence_ends():
    poem = "静夜思\n床前明月光，疑是地上霜。\n举头望明月，低头思故乡。\n"
    form = verse_form(poem, last_line=True)
    assert (form["lines"], form["titles"], form["clauses"], form["five"]) == (3, 1, 4, 4)
    assert form["five_or_seven"] == form["five_to_seven"] == form["lines_end"] == 1.0
    assert form["marks"] == 4 and form["mean_clause"] == 5


def test_the_last_line_is_left_out_of_lines_and_titles_unless_asked():
    text = "床前明月光，疑是地上霜。\n春日"
    assert (verse_form(text)["lines"], verse_form(text)["titles"]) == (1, 0)
    assert (verse_form(text, last_line=True)["lines"], verse_form(text, last_line=True)["titles"]) == (2, 1)


def test_a_clause_counts_only_when_a_mark_ends_it_in_any_line():
    text = "床前明月光，疑是地上霜。\n举头望明月，低"
    assert verse_form(text)["clauses"] == verse_form(text, last_line=True)["clauses"] == 3
    assert verse_form(text)["marks"] == 3


def test_other_lengths_and_unfinished_clauses():
    form = verse_form("一二三，一二三四五六七。\n一二三四五六，未完\nx", last_line=False)
    assert form["clauses"] == 3 and (form["five"], form["seven"]) == (0, 1)
    assert form["five_or_seven"] == 1 / 3 and form["five_to_seven"] == 2 / 3
    assert form["lines_end"] == 0.5  # the second line ends without a full stop


def test_text_without_verse_gives_zeros_not_errors():
    for text in ("", "\n\n", "no marks here\nnor here\n", "一行"):
        form = verse_form(text)
        assert form["clauses"] == 0 and form["five_or_seven"] == 0 and form["lines_end"] == 0


def test_several_samples_count_together_each_without_its_last_line():
    one, two = "春日\n床前明月光，疑是地上霜。\n举", "秋夜\n举头望明月，低头思故乡。\n低"
    form = verse_form(one, two)
    assert (form["lines"], form["titles"], form["clauses"], form["marks"]) == (4, 2, 4, 4)
    assert verse_form(one + "\n" + two)["lines"] == 5  # joined, the cut "举" would count
