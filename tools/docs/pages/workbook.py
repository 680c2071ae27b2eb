"""The "Your turn" box of every stage page and the table of the workbook page, from the
exercises tools/workbook.py cuts out, so the boxes and the workbook cannot disagree."""

from __future__ import annotations

from .. import Job, Page, table

HEAD = {"en": ["Exercise", "What you write", "Where", "Read first"],
        "zh": ["练习", "你要写的", "位置", "先读"]}
BOX = {"en": ('!!! example "Your turn: write the heart of stage {n} yourself"\n\n'
              "    Make a copy of this stage with these pieces cut out, fill them in, and let "
              "the stage's own tests grade them, exercise by exercise ([how](workbook.md)):\n\n"
              "    ```bash\n    make workbook STAGE={n}\n    make grade STAGE={n}\n    ```\n\n"),
       "zh": ('!!! example "轮到你了：亲手写出第{zh}步的核心"\n\n'
              "    把本步代码复制一份，挖掉下面几处由你补全，再用本步自带的测试逐题评分"
              "（[具体做法](workbook.md)）：\n\n"
              "    ```bash\n    make workbook STAGE={n}\n    make grade STAGE={n}\n    ```\n\n")}


def rows(exercises, linked: bool = False) -> list[tuple]:
    """A row per exercise; ``linked``: its "Read first" link leads to its stage's page."""
    out = []
    for ex in exercises:
        to = f"{ex.package}.md#{ex.anchor}" if linked else f"#{ex.anchor}"
        out.append((ex.id, (ex.title, ex.title_zh), f"`{ex.package}/{ex.file}`: `{ex.qualname}`",
                    (f"[{ex.read}]({to})", f"[{ex.read_zh}]({to})")))
    return out


def write(page: Page) -> None:
    from tools import workbook as W

    for n in sorted(W.STAGES):
        boxes = table(HEAD, rows(W.exercises(n)))
        page.both(f"your_turn_stage{n}", {lang: BOX[lang].format(n=n, zh="一二三四五"[n - 1]) + "\n".join(
            "    " + line for line in boxes[lang].splitlines()) for lang in boxes})
    page.both("exercises", table(HEAD, rows(W.EXERCISES, linked=True)))


JOBS = [Job("workbook", write, files=("tools/workbook.py",))]
