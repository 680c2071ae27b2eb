"""MkDocs hook: a line ``<!-- stage-diff: OLD NEW [FILE] -->`` outside code fences becomes the diff of
two stage folders of the repository root, of every ``*.py`` (but in ``__pycache__/``, ``corpus/``) or
of FILE: a table (per file: new, changed or removed, lines added and removed, :func:`why_changed`),
the identical files, a ``<details>`` per file (``model.py``, ``train.py`` open), one ``diff`` fence per
hunk; a hunk adding lines to a definition the page includes (includes.py) links to the heading above it.
A folder or file that does not exist fails the build."""

import ast
import difflib
import html
import json
import re
from pathlib import Path

from includes import definition  # the sibling hook: MkDocs puts this folder on sys.path
from mkdocs.exceptions import PluginError

StageDiffError = PluginError  # a marker is malformed, or names a folder or file that does not exist
MARKER_RE = re.compile(r"^[ \t]*<!--[ \t]*stage-diff:[ \t]*([^>]*?)[ \t]*-->[ \t]*$")
FENCE_RE = re.compile(r"^[ \t]*(`{3,}|~{3,})")
HEADING_RE = re.compile(r"^#{1,6}[ \t]+(.+?)(?:[ \t]*\{[^}]*\})?[ \t]*#*[ \t]*$")  # minus {#id}
INCLUDE_RE = re.compile(r"""^[ \t]*--8<--[ \t]+["']([^"':]+\.py:[\w.]+)["']""")
PARAGRAPH_RE = re.compile(r'<p class="stage-diff-explained">([^<]*)(.*?)</p>', re.DOTALL)
LINK_RE = re.compile(r'<a class="stage-diff-link" data-section="([^"]*)" data-heading="([^"]*)"')
OPEN_FILES = {"model.py", "train.py"}  # the files that carry a stage's idea: shown open
WORDS = {  # (English, Chinese); the Chinese edition is built with theme.language zh
    "summary": ("`{a}` → `{b}`: {n}, +{add} −{rem} lines.", "`{a}` → `{b}`：{n}，+{add} −{rem} 行。"),
    "one": ("`{a}/{f}` → `{b}/{f}`: +{add} −{rem} lines.", "`{a}/{f}` → `{b}/{f}`：+{add} −{rem} 行。"),
    "files": ("{n} files differ", "{n} 个文件不同"), "file": ("1 file differs", "1 个文件不同"),
    "same": ("Identical in `{a}` and `{b}`: {files}.", "在 `{a}` 和 `{b}` 中完全相同：{files}。"),
    "header": ("| file | change | added | removed | why |", "| 文件 | 变化 | 新增 | 删除 | 说明 |"),
    "new": ("new", "新增"), "removed": ("removed", "删除"), "changed": ("changed", "修改"),
    "explained": ("Explained in: ", "讲解见："), "sep": (", ", "、"),
}
CHANGES = "docs/hooks/stage_changes.json"  # why each file differs, in both languages


def _python_files(folder: Path, only: str | None) -> dict[str, Path]:
    """rel -> file: every *.py of a stage folder (but in __pycache__/ and corpus/), or ``only``."""
    if not folder.is_dir():
        raise StageDiffError(f"stage-diff: folder '{folder.name}' does not exist (looked for {folder})")
    paths = [folder / only] if only else sorted(folder.rglob("*.py"))
    return {p.relative_to(folder).as_posix(): p for p in paths
            if p.is_file() and not {"__pycache__", "corpus"} & set(p.relative_to(folder).parts)}

def _diff(old: str, new: str, rel: str, a: Path | None, b: Path | None) -> tuple[list[str], int, int]:
    """The unified diff of a file: its hunks (the file header with the first), lines added, removed."""
    texts = [[s + "\n" for s in p.read_text(encoding="utf-8").splitlines()] if p else [] for p in (a, b)]
    names = [f"{stage}/{rel}" if p else "/dev/null" for stage, p in ((old, a), (new, b))]
    lines = list(difflib.unified_diff(*texts, *names))
    starts = [i for i, line in enumerate(lines) if line.startswith("@@")][1:]  # the header: in hunk 1
    hunks = ["".join(lines[i:j]) for i, j in zip([0, *starts], [*starts, len(lines)], strict=True) if lines]
    return hunks, sum(s[0] == "+" for s in lines[2:]), sum(s[0] == "-" for s in lines[2:])

def why_changed(rel: str, old: str, new: str, file: Path | None, root: Path, zh: bool = False) -> str:
    """Why a file differs: its reason in CHANGES for consecutive stages, else the gist of its docstring.
    CHANGES: {"changed": {stage: {file: [English, Chinese]}}, "gist_zh": {...}}."""
    a, b = (int(m[1]) if (m := re.match(r"stage(\d+)_", Path(s).name)) else None for s in (old, new))
    notes = json.loads((root / CHANGES).read_text(encoding="utf-8")) if (root / CHANGES).is_file() else {}
    changed = notes.get("changed", {}) if a is not None and b == a + 1 else {}
    if (reason := changed.get(Path(new).name, {}).get(rel)) or file is None:
        return reason[zh] if reason else WORDS["removed"][zh]
    doc = ast.get_docstring(ast.parse(file.read_text(encoding="utf-8"))) or ""
    gist = " ".join(doc.split("\n\n")[0].split())  # the first paragraph, on one line
    gists = notes.get("gist_zh", {}) if zh else {}
    return gists.get(f"{Path(new).name}/{rel}", gists.get(rel, gist))

def _cell(text: str) -> str:
    """Text for a table cell: "|" escaped, "<" and "&" too outside code spans ("python -m
    <stage>.train" is no tag; in a code span Markdown shows them as they are typed)."""
    parts = re.split(r"(`+[^`]+`+)", text)
    return "".join(p if p.startswith("`") else html.escape(p) for p in parts).replace("|", "\\|")

def _outside_code(markdown: str) -> list[tuple[str, bool]]:
    """Each line of a page, and whether it lies outside the code fences."""
    out, fence = [], ""
    for line in markdown.split("\n"):
        m = FENCE_RE.match(line)
        out.append((line, not (fence or m)))
        closes = fence and re.fullmatch(rf"[ \t]*{fence}{fence[0]}*[ \t]*", line)  # as long, or longer
        fence = "" if closes else fence or (m[1] if m else "")
    return out

def page_includes(markdown: str) -> dict[str, str]:
    """``"stage3_attention/model.py:Head"`` -> the heading above that include."""
    found, heading = {}, ""
    for line, outside in _outside_code(markdown):
        if outside and (h := HEADING_RE.match(line)):
            heading = h[1]
        elif heading and (m := INCLUDE_RE.match(line)):
            found.setdefault(m[1], heading)
    return found

def _spans(path: Path | None, file: str, includes: dict[str, str]) -> dict[str, tuple[int, int]]:
    """The lines (first, last) of each definition of ``file`` the page includes."""
    spans = {}
    for key in includes if path else ():
        where, _, name = key.rpartition(":")
        if where == file:
            try:
                spans[key] = definition(path, name)[:2]
            except (KeyError, SyntaxError):
                pass
    return spans

def _links(hunk: str, file: str, path: Path | None, includes: dict[str, str]) -> list[str]:
    """Placeholder links to the headings above the included definitions the hunk adds lines to."""
    m = re.search(r"^@@ -\S+ \+(\d+).*\n", hunk, re.MULTILINE)
    in_new = [line for line in hunk[m.end():].split("\n")[:-1] if line[0] != "-"]  # as in the new file
    added = [int(m[1]) + i for i, line in enumerate(in_new) if line[0] == "+"]  # their line numbers
    shown = [key for key, (first, last) in _spans(path, file, includes).items()
             if any(first <= n <= last for n in added)]  # the definitions it touches
    headings = {includes[key]: key for key in shown if key in includes}  # one link per heading
    return [f'<a class="stage-diff-link" data-section="{html.escape(key)}" data-heading="{html.escape(h)}" '
            f'href="#">{html.escape(h)}</a>' for h, key in headings.items()]

def render_stage_diff(root: Path | str, old: str, new: str, only: str | None = None,
                      includes: dict[str, str] | None = None, lang: str = "en") -> str:
    """Markdown for the diff of root/old and root/new; ``includes`` from :func:`page_includes`."""
    zh, root, stage = lang.startswith("zh"), Path(root).resolve(), Path(new).name
    w = {key: words[zh] for key, words in WORDS.items()}
    a, b = (_python_files(root / name, only) for name in (old, new))
    if only and not (a or b):
        raise StageDiffError(f"stage-diff: file '{only}' exists in neither '{old}' nor '{new}'")
    same = [rel for rel in sorted(a.keys() & b.keys()) if a[rel].read_bytes() == b[rel].read_bytes()]
    rels = sorted((a.keys() | b.keys()) - set(same),  # the files that carry the idea first
                  key=lambda rel: (Path(rel).name not in OPEN_FILES, rel))
    diffs = {rel: _diff(old, new, rel, a.get(rel), b.get(rel)) for rel in rels}
    anchors = {rel: re.sub(r"[^a-z0-9]+", "-", f"diff-{stage}-{rel}".lower()).strip("-") for rel in rels}
    out = ['<div class="stage-diff" markdown>', ""]
    if rels:
        n = w["files"].format(n=len(rels)) if len(rels) > 1 else w["file"]
        add, rem = (sum(d[i] for d in diffs.values()) for i in (1, 2))
        out += [w["one" if only else "summary"].format(a=old, b=new, f=only, n=n, add=add, rem=rem), "",
                '<div class="stage-diff-summary" markdown>', "", w["header"], "|---|---|--:|--:|---|"]
        for rel, (_, add, rem) in diffs.items():
            why = _cell(why_changed(rel, old, new, b.get(rel), root, zh))
            what = w["new"] if rel not in a else w["removed"] if rel not in b else w["changed"]
            name = html.escape(rel).replace("_", "&#95;")  # Markdown: __init__ is no emphasis
            out.append(f'| <a href="#{anchors[rel]}"><code>{name}</code></a> | {what} '
                       f"| +{add} | −{rem} | {why} |")
        out += ["", "</div>", ""]
    if same:
        out += [w["same"].format(a=old, b=new, files=w["sep"].join(f"`{rel}`" for rel in same)), ""]
    for rel, (hunks, add, rem) in diffs.items():
        is_open = " open" if only or Path(rel).name in OPEN_FILES else ""
        out += [f'<details class="stage-diff-file" id="{anchors[rel]}"{is_open} markdown="1">',
                f'<summary><code>{html.escape(rel)}</code> <span class="stage-diff-count">+{add} −{rem}'
                "</span></summary>", ""]
        for hunk in hunks:
            if links := _links(hunk, f"{stage}/{rel}", b.get(rel), includes or {}):
                out += [f'<p class="stage-diff-explained">{w["explained"]}{w["sep"].join(links)}</p>', ""]
            fence = "`" * max(3, 1 + max(map(len, re.findall("`+", hunk)), default=0))
            out += [f"{fence}diff", hunk.rstrip("\n"), fence, ""]
        out += ["</details>", ""]
    return "\n".join([*out, "</div>"])

def replace_markers(markdown: str, root: Path | str, lang: str = "en") -> str:
    """Replace every stage-diff marker line outside code fences."""
    includes, out = page_includes(markdown), []
    for line, outside in _outside_code(markdown):
        if outside and (m := MARKER_RE.match(line)):
            if len(args := m[1].split()) not in (2, 3):
                raise StageDiffError(f"stage-diff: expected 'OLD NEW [FILE]', got {m[1]!r}")
            line = render_stage_diff(root, *args, includes=includes, lang=lang)
        out.append(line)
    return "\n".join(out)

def _key(text: str) -> str:
    """A heading's text reduced to letters and digits: Markdown and HTML compare equal."""
    return re.sub(r"[\W_]+", "", re.sub(r"<[^>]+>", "", html.unescape(text))).lower()

def _code_spans(text: str) -> str:
    """A heading's Markdown code spans (`backward()`) as HTML code, as the heading shows them."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", text)

def resolve_links(content: str, lang: str = "en") -> str:
    """Point the placeholder links at their headings' ids; drop a paragraph left without a link."""
    headings = re.findall(r'<h[1-6][^>]*\bid="([^"]+)"[^>]*>(.*?)</h[1-6]>', content, re.DOTALL)
    ids = {_key(title): id_ for id_, title in reversed(headings)}  # the first of a title wins
    def paragraph(p: re.Match) -> str:
        links = [f'<a class="stage-diff-link" href="#{ids[_key(h)]}" title="{key}">'
                 f"{_code_spans(html.escape(html.unescape(h)))}</a>"
                 for key, h in LINK_RE.findall(p[2]) if _key(h) in ids]
        sep = WORDS["sep"][lang.startswith("zh")]
        return f'<p class="stage-diff-explained">{p[1]}{sep.join(links)}</p>' if links else ""
    return PARAGRAPH_RE.sub(paragraph, content)

def on_page_markdown(markdown: str, page, config, files, **kwargs) -> str:
    return replace_markers(markdown, Path(config.config_file_path).parent, config["theme"]["language"])

def on_page_content(html_: str, page, config, files, **kwargs) -> str:
    return resolve_links(html_, config["theme"]["language"]) if "stage-diff-link" in html_ else html_
