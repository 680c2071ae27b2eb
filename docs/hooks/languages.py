"""The language switch lands on the same page in the other edition.

Both editions have the same page files: the English site at the root, the Chinese one
under zh/ (built from docs/zh/ by mkdocs.zh.yml). Material's selector would go to the
other edition's home page (it looks the page up in a sitemap, which needs a site_url);
here each page's alternate links point straight at its counterpart instead.
"""

import re

EDITIONS = (("en", "English", ""), ("zh", "中文", "zh/"))  # (lang, name, folder from the root)


def on_page_context(context, page, config, nav):
    here = config["theme"]["language"]
    up = "../" if here == "zh" else ""  # from this edition's root to the English root
    config["extra"]["alternate"] = [
        {"name": name, "lang": lang, "link": up + folder + page.file.url}
        for lang, name, folder in EDITIONS
    ]
    return context


def on_post_page(output, page, config):
    """Drop the head's <link rel="alternate" hreflang> tags. Material's script fetches the
    sitemap.xml of each of them to map pages between languages, which the links above
    already do; from the file system that fetch is blocked and logs errors."""
    return ALTERNATE_LINK.sub("", output)


ALTERNATE_LINK = re.compile(r'<link rel="alternate" href="[^"]*" hreflang="[^"]*">\s*')
