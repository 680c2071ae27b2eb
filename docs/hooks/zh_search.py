"""Chinese search, for the Chinese edition (mkdocs.zh.yml).

Material's search plugin segments Chinese text with jieba (a dependency of the docs
extra) and indexes each word. jieba's dictionary does not know a few of the course's
terms and splits them (层归一化 -> 层 + 归一化), so a query for the term would not
find it as a word: zh_terms.txt teaches it those words, one per line.

In the browser, Material (9.8.2) cuts a Chinese query into the longest words its index
holds, but its loop stops one character short (`j < query.length`), so a query is never
looked up whole: 层归一化 became 层 + 归 + ..., and the page that teaches the word showed
"missing 层, 归". on_post_build fixes that one comparison in the built search worker.
"""

import logging
from pathlib import Path

import jieba

log = logging.getLogger("mkdocs.hooks.zh_search")
LOOP = "for(let o=s+1;o<t.length;o++)t.slice(s,o)in e"  # Material's segment(), minified
FIXED = LOOP.replace("o<t.length", "o<=t.length")


def on_config(config):
    for word in Path(__file__).with_name("zh_terms.txt").read_text(encoding="utf-8").split():
        jieba.add_word(word)
    return config


def on_post_build(config):
    fixed = False
    for worker in Path(config["site_dir"], "assets/javascripts/workers").glob("search.*.min.js"):
        text = worker.read_text(encoding="utf-8")
        if LOOP in text:
            text = text.replace(LOOP, FIXED)
            worker.write_text(text, encoding="utf-8")
        fixed = fixed or FIXED in text  # also when a rebuild finds it already fixed
    if not fixed:
        log.warning("zh_search: Material's search worker changed; the query-splitting fix "
                    "in docs/hooks/zh_search.py no longer applies (check it against the "
                    "pinned mkdocs-material)")
