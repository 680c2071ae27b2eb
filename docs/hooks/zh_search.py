"""Chinese search, for the Chinese edition (mkdocs.zh.yml).

Material's search plugin segments Chinese text with jieba (a dependency of the docs
extra) and indexes each word. jieba's dictionary does not know a few of the course's
terms and splits them (层归一化 -> 层 + 归一化), so a query for the term would not
find it as a word: zh_terms.txt teaches it those words, one per line.
"""

from pathlib import Path

import jieba


def on_config(config):
    for word in Path(__file__).with_name("zh_terms.txt").read_text(encoding="utf-8").split():
        jieba.add_word(word)
    return config
