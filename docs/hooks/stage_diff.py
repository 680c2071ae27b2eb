"""MkDocs hook: show what changed between two stage folders, at build time.

A page may contain a marker line (alone on its line, outside code fences):

    <!-- stage-diff: stage2_bigram stage3_attention -->
    <!-- stage-diff: stage2_bigram stage3_attention model.py -->

The first form diffs every ``*.py`` file of the two folders (recursively,
ignoring ``__pycache__`` and ``corpus/``); the second diffs one file. The
marker is replaced by, in this order:

- a summary table: each file that differs, whether it is new, changed or
  removed, the lines added and removed, and one line on why it changed (the
  reason tests/test_stage_copies.py's ``CHANGED`` gives for the pair of stages,
  else the first line of the file's docstring);
- a sentence naming the byte-identical files;
- one collapsible ``<details>`` per file, the files that carry the idea
  (``model.py``, ``train.py``) open and the rest closed, with one
  ```` ```diff ```` fence per hunk made with :func:`difflib.unified_diff`, so the
  diff in the docs is always the diff of the code in the repository.

A hunk whose new lines lie inside a snippet section of the new file
(``# --8<-- [start:head]`` ... ``[end:head]``) that the same page includes
(``--8<-- "stage3_attention/model.py:head"``) gets a link to the section of the
page that shows and explains that code (the heading above the include). The link
is written as a placeholder at the Markdown stage and resolved against the page's
table of contents once the page is rendered; a section whose heading cannot be
found gets no link. Folders are relative to the directory of ``mkdocs.yml`` (the
repository root).

A folder or file that does not exist fails the build (``PluginError``).
Registered in mkdocs.yml under ``hooks:``; :func:`render_stage_diff` is plain
Python so it can be unit-tested without MkDocs.
"""

from __future__ import annotations

import ast
import difflib
import html
import os
import re
from pathlib import Path

try:  # The hook runs inside MkDocs; the unit tests import it without MkDocs.
    from mkdocs.exceptions import PluginError as _BuildError
except ImportError:  # pragma: no cover
    _BuildError = RuntimeError


class StageDiffError(_BuildError):
    """A stage-diff marker names a folder or file that does not exist."""


MARKER_RE = re.compile(
    r"^[ \t]*<!--[ \t]*stage-diff:[ \t]*(?P<args>[^>]*?)[ \t]*-->[ \t]*$"
)
FENCE_RE = re.compile(r"^[ \t]*(?P<fence>`{3,}|~{3,})")
IGNORED_DIRS = {"__pycache__", "corpus"}
OPEN_FILES = {"model.py", "train.py"}  # the files that carry a stage's idea: shown open
SECTION_RE = re.compile(r"--8<--\s*\[(?P<kind>start|end):(?P<name>[\w-]+)\]")
INCLUDE_RE = re.compile(r"""^[ \t]*(?:;*)--8<--[ \t]+["'](?P<path>[^"':]+):(?P<name>[\w-]+)["']""")
HEADING_RE = re.compile(r"^(?P<hashes>#{1,6})[ \t]+(?P<text>.+?)[ \t]*#*[ \t]*$")
HUNK_RE = re.compile(r"^@@ -\d+(?:,\d+)? \+(?P<start>\d+)(?:,\d+)? @@")
EXPLAINED_RE = re.compile(r'<p class="stage-diff-explained">.*?</p>', re.DOTALL)
LINK_RE = re.compile(r'<a class="stage-diff-link" data-section="(?P<key>[^"]*)" '
                     r'data-heading="(?P<heading>[^"]*)" href="#">[^<]*</a>')


def _python_files(folder: Path) -> dict[str, Path]:
    """Relative POSIX path -> file, for every *.py under folder (ignored dirs skipped)."""
    found: dict[str, Path] = {}
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = sorted(d for d in dirnames if d not in IGNORED_DIRS and not d.startswith("."))
        for name in sorted(filenames):
            if name.endswith(".py"):
                path = Path(dirpath) / name
                found[path.relative_to(folder).as_posix()] = path
    return found


def _lines(path: Path | None) -> list[str]:
    if path is None:
        return []
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
        lines.append("\\ No newline at end of file\n")
    return lines


def _file_diff(old_name: str, new_name: str, rel: str, old: Path | None, new: Path | None) -> str:
    fromfile = f"{old_name}/{rel}" if old is not None else "/dev/null"
    tofile = f"{new_name}/{rel}" if new is not None else "/dev/null"
    return "".join(difflib.unified_diff(_lines(old), _lines(new), fromfile, tofile, n=3))


def _folder(root: Path, name: str) -> Path:
    path = (root / name).resolve()
    if not path.is_dir():
        raise StageDiffError(
            f"stage-diff: folder '{name}' does not exist (looked for {path})"
        )
    return path


def _changed_reasons(root: Path) -> dict[str, dict[str, str]]:
    """tests/test_stage_copies.py's ``CHANGED``: later stage -> {file: why it differs}.

    Read from the source (``ast``), not imported; {} when the file or the name is missing.
    """
    path = root / "tests" / "test_stage_copies.py"
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError):
        return {}
    for node in tree.body:
        target = node.target if isinstance(node, ast.AnnAssign) else (
            node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else None)
        if isinstance(target, ast.Name) and target.id == "CHANGED" and node.value is not None:
            try:
                value = ast.literal_eval(node.value)
            except ValueError:
                return {}
            return value if isinstance(value, dict) else {}
    return {}


def _docstring_line(path: Path | None) -> str:
    """The first line of a Python file's module docstring ('' when it has none)."""
    if path is None:
        return ""
    try:
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))
    except (OSError, SyntaxError):
        return ""
    return doc.strip().splitlines()[0].strip() if doc and doc.strip() else ""


# The hook's own words, per edition (the Chinese one is built with theme.language zh).
TEXT = {
    "en": {"summary": "`{a}` → `{b}`: {differ}, +{add} −{rem} lines.",
           "differ": "{n} files differ", "differs": "1 file differs",
           "unchanged": "Unchanged: ", "identical_one": "`{f}` is identical in `{a}` and `{b}`.",
           "identical_all": "The Python files are identical in `{a}` and `{b}`.",
           "header": "| file | change | added | removed | why |",
           "new": "new", "removed": "removed", "changed": "changed",
           "explained": "Explained in: "},
    "zh": {"summary": "`{a}` → `{b}`：{differ}，+{add} −{rem} 行。",
           "differ": "{n} 个文件不同", "differs": "1 个文件不同",
           "unchanged": "未改动：", "identical_one": "`{f}` 在 `{a}` 和 `{b}` 中完全相同。",
           "identical_all": "`{a}` 和 `{b}` 的 Python 文件完全相同。",
           "header": "| 文件 | 变化 | 新增 | 删除 | 原因 |",
           "new": "新增", "removed": "删除", "changed": "修改",
           "explained": "讲解见："},
}
# The Chinese edition's words for why a file differs: CHANGED's reasons (by the later
# stage), and the gist of a docstring's first line (by stage and file, or by file).
CHANGED_ZH = {
    ("stage3_attention", "model.py"): "词元嵌入 + 位置嵌入和一个因果自注意力头，取代二元模型的查找表",
    ("stage3_attention", "plots.py"): "新增 plot_attention：注意力权重的热图",
    ("stage3_attention", "train.py"): "模型参数（--n-embd、--pos）、新的默认值，写出 attention.png",
    ("stage4_block", "model.py"): "多头注意力（两种写法）、前馈网络、带残差连接和层归一化的块，以及逐一拿掉各部分的开关",
    ("stage4_block", "train.py"): "块的参数（--n-head、--n-layer、--dropout、--norm、--no-residual、--no-ffwd ……）及其默认值",
    ("stage5_gpt", "model.py"): "GPT：最后的层归一化、GPT-2 初始化、权重共享、SDPA 与可追踪的显式路径",
    ("stage5_gpt", "train.py"): "GPT 的参数与训练配方：AdamW 分组权重衰减、预热 + 余弦衰减、梯度裁剪",
    ("stage5_gpt", "visualize.py"): "每一层每个头的注意力、位置相似度、logit lens（来自 lens.py）",
}
DOCSTRING_ZH = {
    ("stage2_bigram", "model.py"): "二元语言模型：下一个字符只取决于当前字符",
    ("stage5_gpt", "model.py"): "GPT：一叠 Transformer 块，按 GPT-2 的方式初始化和连接",
    "checkpoint.py": "安全地保存和加载训练检查点",
    "cli.py": "这一步各个命令行工具共用的小函数",
    "harness.py": "训练框架：训练循环之外，一次真正的训练所需要的一切",
    "model.py": "这一步的模型",
    "plots.py": "把图画成 PNG 文件，字体能显示中文",
    "sample.py": "用训练好的检查点生成文本：python -m <stage>.sample",
    "train.py": "训练这一步的模型并保存：python -m <stage>.train",
    "visualize.py": "用图看训练好的模型内部：python -m <stage>.visualize",
    "inspect.py": "打印一个注意力头的完整计算过程：python -m <stage>.inspect",
    "lens.py": "训练好的 GPT 学到了什么，用数字和图展示：注意力、logit lens、位置相似度",
    "data.py": "语料的加载、划分和批次",
    "tokenizer.py": "字符级分词器",
}


def _stage_number(name: str) -> int | None:
    m = re.match(r"stage(\d+)_", Path(name).name)
    return int(m.group(1)) if m else None


def why_changed(root: Path, old_name: str, new_name: str, rel: str,
                old: Path | None, new: Path | None, lang: str = "en") -> str:
    """One line on why ``rel`` differs between the two stages: the reason CHANGED gives
    for consecutive stages, else the first line of the new file's docstring."""
    zh = lang.startswith("zh")
    if new is None:
        return TEXT["zh" if zh else "en"]["removed"]
    stage = Path(new_name).name
    a, b = _stage_number(old_name), _stage_number(new_name)
    if old is not None and a is not None and b == a + 1:
        reason = (CHANGED_ZH.get((stage, rel)) if zh
                  else _changed_reasons(root).get(stage, {}).get(rel))
        if reason:
            return reason
    if zh:
        return DOCSTRING_ZH.get((stage, rel), DOCSTRING_ZH.get(rel, ""))
    return _docstring_line(new)


def _sections(path: Path | None) -> list[tuple[str, int, int]]:
    """The snippet sections of a file: (name, start line, end line), 1-based, markers
    excluded (a section without its end marker runs to the end of the file)."""
    if path is None:
        return []
    lines = path.read_text(encoding="utf-8").splitlines()
    open_: dict[str, int] = {}
    found = []
    for n, line in enumerate(lines, 1):
        m = SECTION_RE.search(line)
        if m and m.group("kind") == "start":
            open_[m.group("name")] = n
        elif m and m.group("name") in open_:
            found.append((m.group("name"), open_.pop(m.group("name")), n))
    found += [(name, start, len(lines) + 1) for name, start in open_.items()]
    return found


def _hunks(diff: str) -> list[tuple[str, list[int]]]:
    """The hunks of a unified diff (the file header goes with the first) and, per hunk,
    the new-file line numbers of its added lines."""
    hunks: list[tuple[list[str], list[int]]] = []
    header: list[str] = []
    line_no = 0
    for line in diff.splitlines(keepends=True):
        m = HUNK_RE.match(line)
        if m:
            hunks.append((header + [line], []))
            header = []
            line_no = int(m.group("start"))
        elif not hunks:
            header.append(line)
        else:
            hunks[-1][0].append(line)
            if line.startswith("+"):
                hunks[-1][1].append(line_no)
                line_no += 1
            elif line.startswith(" "):
                line_no += 1
    return [("".join(text), added) for text, added in hunks]


def _counts(diff: str) -> tuple[int, int]:
    lines = diff.splitlines()
    added = sum(1 for x in lines if x.startswith("+") and not x.startswith("+++"))
    removed = sum(1 for x in lines if x.startswith("-") and not x.startswith("---"))
    return added, removed


def _fence(body: str) -> str:
    """A fence longer than any backtick run inside, so the code cannot close it."""
    longest = max((len(m) for m in re.findall(r"`+", body)), default=0)
    return "`" * max(3, longest + 1)


def _anchor(new_name: str, rel: str) -> str:
    return "diff-" + re.sub(r"[^A-Za-z0-9]+", "-", f"{Path(new_name).name}-{rel}").strip("-").lower()


def page_includes(markdown: str) -> dict[str, str]:
    """``"stage3_attention/model.py:head"`` -> the text of the heading above that include,
    for every snippet-section include of a page (outside code fences or inside: the
    includes of code live in fences)."""
    found: dict[str, str] = {}
    heading = ""
    open_fence: str | None = None
    for line in markdown.split("\n"):
        fence = FENCE_RE.match(line)
        if fence and open_fence is None:
            open_fence = fence.group("fence")
        elif fence and line.strip().startswith(open_fence) and not line.strip().strip(open_fence[0]):
            open_fence = None
        elif open_fence is None and (h := HEADING_RE.match(line)):
            heading = re.sub(r"\s*\{[^}]*\}\s*$", "", h.group("text"))  # minus {#id} / {.class}
        m = INCLUDE_RE.match(line)
        if m and heading:
            found.setdefault(f"{m.group('path')}:{m.group('name')}", heading)
    return found


def render_stage_diff(root: Path | str, old_name: str, new_name: str, only: str | None = None,
                      includes: dict[str, str] | None = None, lang: str = "en") -> str:
    """Markdown for the differences between folders root/old_name and root/new_name.

    A summary table, a sentence about unchanged files and one collapsible diff per
    file (see the module docstring), wrapped in ``<div class="stage-diff" markdown>``
    (md_in_html) for styling and tests. ``includes`` (see :func:`page_includes`) says
    which snippet sections the page shows, under which heading: hunks inside them
    get a link there.
    """
    root = Path(root)
    t = TEXT["zh" if lang.startswith("zh") else "en"]
    old_dir = _folder(root, old_name)
    new_dir = _folder(root, new_name)
    includes = includes or {}

    if only is not None:
        old_file = old_dir / only
        new_file = new_dir / only
        if not old_file.is_file() and not new_file.is_file():
            raise StageDiffError(
                f"stage-diff: file '{only}' exists in neither '{old_name}' nor '{new_name}'"
            )
        old_files = {only: old_file} if old_file.is_file() else {}
        new_files = {only: new_file} if new_file.is_file() else {}
    else:
        old_files = _python_files(old_dir)
        new_files = _python_files(new_dir)

    unchanged: list[str] = []
    changed: list[tuple[str, Path | None, Path | None, str]] = []
    for rel in sorted(set(old_files) | set(new_files)):
        old, new = old_files.get(rel), new_files.get(rel)
        if old is not None and new is not None and old.read_bytes() == new.read_bytes():
            unchanged.append(rel)
            continue
        changed.append((rel, old, new, _file_diff(old_name, new_name, rel, old, new)))
    # The files that carry the idea first, then the others in name order.
    changed.sort(key=lambda c: (Path(c[0]).name not in OPEN_FILES, c[0]))

    parts = ['<div class="stage-diff" markdown>', ""]
    if changed:
        total_add = total_del = 0
        rows = []
        for rel, old, new, diff in changed:
            add, rem = _counts(diff)
            total_add, total_del = total_add + add, total_del + rem
            what = t["new"] if old is None else t["removed"] if new is None else t["changed"]
            # Escaped: a docstring's "python -m <stage>.train" is text, not an HTML tag.
            why = html.escape(why_changed(root, old_name, new_name, rel, old, new, lang)).replace("|", "\\|")
            rows.append(f'| <a href="#{_anchor(new_name, rel)}"><code>{html.escape(rel)}</code></a> '
                        f"| {what} | +{add} | −{rem} | {why} |")
        differ = t["differ"].format(n=len(changed)) if len(changed) != 1 else t["differs"]
        parts += [t["summary"].format(a=old_name, b=new_name, differ=differ, add=total_add,
                                      rem=total_del), "",
                  '<div class="stage-diff-summary" markdown>', "",
                  t["header"], "|---|---|--:|--:|---|", *rows, "",
                  "</div>", ""]
    if unchanged:
        sep, end = ("、", "。") if t is TEXT["zh"] else (", ", ".")
        parts += [t["unchanged"] + sep.join(f"`{rel}`" for rel in unchanged) + end, ""]
    if not changed:
        same = t["identical_one"] if only else t["identical_all"]
        parts += [same.format(f=only, a=old_name, b=new_name), ""]
    for rel, _old, new, diff in changed:
        add, rem = _counts(diff)
        is_open = " open" if only is not None or Path(rel).name in OPEN_FILES else ""
        sections = _sections(new)
        parts += [f'<details class="stage-diff-file" id="{_anchor(new_name, rel)}"{is_open} '
                  'markdown="1">',
                  f"<summary><code>{html.escape(rel)}</code> "
                  f'<span class="stage-diff-count">+{add} −{rem}</span></summary>', ""]
        for text, added in _hunks(diff):
            names = [name for name, start, end in sections
                     if any(start < n < end for n in added)]
            keys = [f"{Path(new_name).name}/{rel}:{name}" for name in names]
            seen: set[str] = set()  # one link per heading, however many sections sit under it
            keys = [k for k in keys if k in includes
                    and not (includes[k] in seen or seen.add(includes[k]))]
            links = [f'<a class="stage-diff-link" data-section="{html.escape(k, quote=True)}" '
                     f'data-heading="{html.escape(includes[k], quote=True)}" href="#">'
                     f"{html.escape(includes[k])}</a>" for k in keys if k in includes]
            if links:
                parts += [f'<p class="stage-diff-explained">{t["explained"]}{", ".join(links)}</p>',
                          ""]
            fence = _fence(text)
            parts += [f"{fence}diff", text.rstrip("\n"), fence, ""]
        parts += ["</details>", ""]
    parts += ["</div>"]
    return "\n".join(parts)


def replace_markers(markdown: str, root: Path | str, lang: str = "en") -> str:
    """Replace every stage-diff marker line outside code fences."""
    out: list[str] = []
    open_fence: str | None = None
    includes = page_includes(markdown)
    for line in markdown.split("\n"):
        fence = FENCE_RE.match(line)
        if open_fence is None:
            if fence:
                open_fence = fence.group("fence")
            else:
                match = MARKER_RE.match(line)
                if match:
                    args = match.group("args").split()
                    if len(args) not in (2, 3):
                        raise StageDiffError(
                            f"stage-diff: expected 'OLD NEW [FILE]', got {match.group('args')!r}"
                        )
                    out.append(render_stage_diff(root, *args, includes=includes, lang=lang))
                    continue
        elif fence and fence.group("fence")[0] == open_fence[0] and len(fence.group("fence")) >= len(open_fence) \
                and not line.strip()[len(fence.group("fence")):].strip():
            open_fence = None
        out.append(line)
    return "\n".join(out)


def _root(config) -> Path:
    return Path(config.config_file_path).resolve().parent


def on_page_markdown(markdown, page, config, files, **kwargs):
    if "stage-diff:" not in markdown:
        return markdown
    try:
        return replace_markers(markdown, _root(config), config["theme"]["language"])
    except StageDiffError as err:
        raise StageDiffError(f"{page.file.src_uri}: {err}") from err


def _key(text: str) -> str:
    """A heading's text reduced to letters and digits: Markdown and HTML compare equal."""
    text = re.sub(r"<[^>]+>", "", html.unescape(text))
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # [text](url) -> text
    text = re.sub(r"\{[^}]*\}\s*$", "", text)  # a trailing attr_list {#id}
    return re.sub(r"[\W_]+", "", text).lower()


def resolve_links(content: str, headings: list[tuple[str, str]]) -> str:
    """Point each hunk's placeholder link at its heading: ``headings`` is the page's
    (title, id) in order. A paragraph left without a link is dropped."""
    ids = {}
    for title, id_ in headings:
        ids.setdefault(_key(title), id_)

    def link(m: re.Match) -> str | None:
        heading = html.unescape(m.group("heading"))
        id_ = ids.get(_key(heading))
        if id_ is None:
            return None
        return (f'<a class="stage-diff-link" href="#{id_}" '
                f'title="{m.group("key")}">{html.escape(heading)}</a>')

    def paragraph(m: re.Match) -> str:
        links = [x for x in map(link, LINK_RE.finditer(m.group(0))) if x]
        return f'<p class="stage-diff-explained">Explained in: {", ".join(links)}</p>' if links else ""

    return EXPLAINED_RE.sub(paragraph, content)


def _toc(items) -> list[tuple[str, str]]:
    out = []
    for item in items:
        out.append((item.title, item.id))
        out += _toc(item.children)
    return out


def on_page_content(html_, page, config, files, **kwargs):
    if "stage-diff-link" not in html_:
        return html_
    return resolve_links(html_, _toc(page.toc))


def on_serve(server, config, builder, **kwargs):
    """`mkdocs serve`: rebuild when the code of a stage changes."""
    root = _root(config)
    for folder in sorted(root.glob("stage*_*")):
        if folder.is_dir():
            server.watch(str(folder))
    return server
