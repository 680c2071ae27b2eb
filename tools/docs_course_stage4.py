"""gen_docs jobs: what each part of stage 4's block buys, measured one part at a time.

Stage 4 adds four ideas at once: several heads, a feed-forward network, residual
connections and LayerNorm. These jobs train stage 4 with its own trainer and
defaults (same data, seed, steps, batch) with one part taken out at a time
(``--no-residual``, ``--no-ffwd``, ``--norm none``; one head instead of four is the
existing ``stage4_n_head_1`` job), and the whole block with two other seeds, so the
table can say how far apart two runs of the *same* model land. The table job then
writes the table the stage-4 page includes and the sentences that read it, from
the stored rows, so the reading follows the numbers whenever they are regenerated.
The reading measures each row against the loss of a model that knows only how
often each character occurs (computed from stage 4's own train/val split). The
same job writes the Chinese edition's table and reading (``..._zh.md``), with the
same numbers, from the same rows.

    python tools/gen_docs.py --only stage4_ablation_no_residual stage4_ablation_no_ffwd \\
        stage4_ablation_norm_none stage4_ablation_seed_1338 stage4_ablation_seed_1339
    python tools/gen_docs.py --only stage4_ablation     # the table only, from stored rows
"""

from __future__ import annotations

import sys
from pathlib import Path

MODULE = "tools/docs_course_stage4.py"
TABLE = "stage4_ablation.md"
READING = "stage4_ablation_reading.md"
TABLE_ZH = "stage4_ablation_zh.md"  # the same table and reading for docs/zh/stage4_block.md
READING_ZH = "stage4_ablation_reading_zh.md"
FULL = "stage4_en"  # gen_docs' job: stage 4 at its defaults
# (job, what is taken out, the change in a sentence, the flags that make it).
ABLATIONS = (
    ("stage4_ablation_no_residual", "residual connections",
     "removing the residual connections", ("--no-residual",)),
    ("stage4_ablation_no_ffwd", "feed-forward", "removing the feed-forward network",
     ("--no-ffwd",)),
    ("stage4_ablation_norm_none", "LayerNorm", "removing LayerNorm", ("--norm", "none")),
    ("stage4_n_head_1", "heads: one of 64, not four of 16",
     "going from four heads to one", ("--n-head", "1")),
)
# The Chinese edition's words for each ablation: (what is taken out, the change).
ZH = {
    "stage4_ablation_no_residual": ("残差连接", "去掉残差连接"),
    "stage4_ablation_no_ffwd": ("前馈网络", "去掉前馈网络"),
    "stage4_ablation_norm_none": ("层归一化", "去掉层归一化"),
    "stage4_n_head_1": ("头：一个 64 维的，而非四个 16 维的", "把四个头换成一个"),
}
SEEDS = (1338, 1339)  # the full block again: how far a different seed alone moves the loss
# About how long each training takes on 2 idle cores (stage 4 at its defaults: 48 s).
SECONDS = {"stage4_ablation_no_residual": 50, "stage4_ablation_no_ffwd": 35,
           "stage4_ablation_norm_none": 45}


def seed_job(seed: int) -> str:
    return f"stage4_ablation_seed_{seed}"


def fmt_delta(d: float) -> str:
    return f"{d:+.4f}"


def frequency_loss(gen_docs) -> float:
    """Val loss of predicting every character by its frequency in the training split."""
    sys.path.insert(0, str(gen_docs.ROOT))
    import torch

    from stage4_block.data import Corpus

    corpus = Corpus.load("en")
    counts = torch.bincount(corpus.train.long(), minlength=corpus.tokenizer.vocab_size)
    p = counts.double() / counts.sum()
    if (p[corpus.val.long()] == 0).any():
        sys.exit("a validation character never occurs in the training split")
    return -torch.log(p[corpus.val.long()]).mean().item()


def ablation_rows(gen_docs) -> tuple[dict, list[tuple[str, str, tuple[str, ...], dict]], list[dict]]:
    """The full block's row, the ablations' rows and the other seeds' rows, as stored."""
    full = gen_docs.load_run(FULL)
    rows = [(change, part, flags, gen_docs.load_run(job))
            for job, part, change, flags in ABLATIONS]
    return full, rows, [gen_docs.load_run(seed_job(s)) for s in SEEDS]


def table(full: dict, rows: list, seeds: list[dict]) -> str:
    """Markdown: one line per variant, with its val loss against the full block's."""
    def line(label: str, flags: str, r: dict) -> str:
        return (f"| {label} | {flags} | {r['params']:,} | {r['train_loss']:.4f} | "
                f"{r['val_loss']:.4f} | {fmt_delta(r['val_loss'] - full['val_loss'])} | "
                f"{r['train_seconds']:.0f} |")

    out = ["| taken out | flags | parameters | train loss | val loss | val vs full | time (s) |",
           "|---|---|--:|--:|--:|--:|--:|",
           f"| nothing (the full block) | (defaults) | {full['params']:,} | "
           f"{full['train_loss']:.4f} | **{full['val_loss']:.4f}** | 0 | "
           f"{full['train_seconds']:.0f} |"]
    for _, part, flags, r in rows:
        out.append(line(part, f"`{' '.join(flags)}`", r))
    for seed, r in zip(SEEDS, seeds, strict=True):
        out.append(line("nothing, other seed", f"`--seed {seed}`", r))
    return "\n".join(out)


def reading(full: dict, rows: list, seeds: list[dict], base: float) -> str:
    """The sentences that read the table: the parts in order of what they buy.

    ``base`` is the val loss of a model that knows only the character frequencies.
    """
    noise = max(abs(r["val_loss"] - full["val_loss"]) for r in seeds)
    seed_vals = " and ".join(f"{r['val_loss']:.4f}" for r in seeds)
    ranked = sorted(rows, key=lambda row: row[3]["val_loss"], reverse=True)
    out = [f"A model that knows only how often each character occurs in the training text, "
           f"and nothing about context, has a validation loss of **{base:.4f}**; the full block "
           f"reaches **{full['val_loss']:.4f}**. The same block with two other seeds reaches "
           f"{seed_vals}: differences up to **{noise:.4f}** are what a different seed alone "
           "does, so read only larger ones as the effect of a part."]

    def way(r: dict) -> str:
        share = (base - r["val_loss"]) / (base - full["val_loss"])
        return f"{100 * share:.0f}% of the way from the frequency loss down to the full block"

    items = []
    for change, _, flags, r in ranked:
        d = r["val_loss"] - full["val_loss"]
        params = r["params"] - full["params"]
        size = (f"; it also removes {-params:,} of the {full['params']:,} parameters"
                if params < 0 else "; the parameter count is the same" if params == 0 else "")
        if d > noise:
            verdict = f"costs **{fmt_delta(d)}** (val {r['val_loss']:.4f}: {way(r)})"
        elif d < -noise:
            verdict = (f"*improves* the val loss by {-d:.4f} (val {r['val_loss']:.4f}): at this "
                       "size and budget the part does not pay for itself")
        else:
            verdict = (f"changes the val loss by {fmt_delta(d)} (val {r['val_loss']:.4f}), "
                       "within the seed-to-seed spread: no measurable effect at this size")
        items.append(f"- {change[0].upper() + change[1:]} (`{' '.join(flags)}`) {verdict}{size}.")
    top_change, _, _, top = ranked[0]
    top_d = top["val_loss"] - full["val_loss"]
    if top_d > noise:
        rest = [r for _, _, _, r in ranked[1:]]
        second = rest[0]["val_loss"] - full["val_loss"] if rest else 0.0
        ratio = f": {top_d / second:.1f} times the next largest" if second > noise else ""
        out.append(f"The largest cost comes from {top_change}{ratio}. Part by part, from the "
                   "largest cost to the smallest:")
    else:
        out.append("No single part makes a difference larger than the seed-to-seed spread at "
                   "this size. Part by part:")
    return "\n\n".join([*out, "\n".join(items)])


def zh_rows(rows: list) -> list:
    """The rows with the Chinese words for the part and the change (same order as ABLATIONS)."""
    return [(ZH[job][1], ZH[job][0], flags, r)
            for (job, *_), (_, _, flags, r) in zip(ABLATIONS, rows, strict=True)]


def table_zh(full: dict, rows: list, seeds: list[dict]) -> str:
    """The table of ``table`` for the Chinese edition: the same numbers, Chinese words."""
    def line(label: str, flags: str, r: dict) -> str:
        return (f"| {label} | {flags} | {r['params']:,} | {r['train_loss']:.4f} | "
                f"{r['val_loss']:.4f} | {fmt_delta(r['val_loss'] - full['val_loss'])} | "
                f"{r['train_seconds']:.0f} |")

    out = ["| 去掉的部分 | 选项 | 参数量 | 训练损失 | 验证损失 | 与完整块之差 | 用时（秒） |",
           "|---|---|--:|--:|--:|--:|--:|",
           f"| 无（完整的块） | （默认值） | {full['params']:,} | "
           f"{full['train_loss']:.4f} | **{full['val_loss']:.4f}** | 0 | "
           f"{full['train_seconds']:.0f} |"]
    for _, part, flags, r in zh_rows(rows):
        out.append(line(part, f"`{' '.join(flags)}`", r))
    for seed, r in zip(SEEDS, seeds, strict=True):
        out.append(line("无，换一个种子", f"`--seed {seed}`", r))
    return "\n".join(out)


def reading_zh(full: dict, rows: list, seeds: list[dict], base: float) -> str:
    """The sentences of ``reading`` for the Chinese edition: the same numbers and verdicts."""
    noise = max(abs(r["val_loss"] - full["val_loss"]) for r in seeds)
    seed_vals = " 和 ".join(f"{r['val_loss']:.4f}" for r in seeds)
    ranked = sorted(zh_rows(rows), key=lambda row: row[3]["val_loss"], reverse=True)
    out = [f"一个只知道每个字符在训练文本里出现得有多频繁、对上下文一无所知的模型，验证损失是 "
           f"**{base:.4f}**；完整的块达到 **{full['val_loss']:.4f}**。同一个块换两个种子再训练，"
           f"分别得到 {seed_vals}：不超过 **{noise:.4f}** 的差距，单是换个种子就会出现，"
           "所以只有比它更大的差距才能算作某个部件的作用。"]

    def way(r: dict) -> str:
        share = (base - r["val_loss"]) / (base - full["val_loss"])
        return f"从频率损失到完整块的这段下降走完了 {100 * share:.0f}%"

    items = []
    for change, _, flags, r in ranked:
        d = r["val_loss"] - full["val_loss"]
        params = r["params"] - full["params"]
        size = (f"；同时还去掉了 {full['params']:,} 个参数中的 {-params:,} 个"
                if params < 0 else "；参数量不变" if params == 0 else "")
        if d > noise:
            verdict = f"代价是 **{fmt_delta(d)}**（验证损失 {r['val_loss']:.4f}：{way(r)}）"
        elif d < -noise:
            verdict = (f"反而让验证损失*降低*了 {-d:.4f}（验证损失 {r['val_loss']:.4f}）："
                       "在这个规模和训练量下，这个部件得不偿失")
        else:
            verdict = (f"让验证损失变化了 {fmt_delta(d)}（验证损失 {r['val_loss']:.4f}），"
                       "没有超出种子之间的差距：在这个规模下看不出可测量的作用")
        items.append(f"- {change}（`{' '.join(flags)}`）{verdict}{size}。")
    top_change, _, _, top = ranked[0]
    top_d = top["val_loss"] - full["val_loss"]
    if top_d > noise:
        rest = [r for _, _, _, r in ranked[1:]]
        second = rest[0]["val_loss"] - full["val_loss"] if rest else 0.0
        ratio = f"，是第二大代价的 {top_d / second:.1f} 倍" if second > noise else ""
        out.append(f"代价最大的是{top_change}{ratio}。下面按代价从大到小，逐个部件来看：")
    else:
        out.append("在这个规模下，没有哪个部件造成的差距超出种子之间的差距。逐个部件来看：")
    return "\n\n".join([*out, "\n".join(items)])


def ablation_table(work: Path, job, gen_docs) -> None:
    full, rows, seeds = ablation_rows(gen_docs)
    base = frequency_loss(gen_docs)
    gen_docs.write(TABLE, table(full, rows, seeds))
    gen_docs.write(READING, reading(full, rows, seeds, base))
    gen_docs.write(TABLE_ZH, table_zh(full, rows, seeds))
    gen_docs.write(READING_ZH, reading_zh(full, rows, seeds, base))


def jobs(Job, gen_docs) -> list:
    def train(name: str, about: str, flags: tuple[str, ...], seconds: int):
        return Job(
            name, about, gen_docs.train_job,
            params={"stage": "stage4_block", "out": f"out/{name}", "flags": flags,
                    "figures": False},
            stages=("stage4_block",), files=(MODULE,), code=gen_docs.TRAINING,
            outputs=(f"{gen_docs.RUNS}/{name}.json",), seconds=seconds)

    out = [train(name, f"train stage4_block without {part} ({' '.join(flags)})", flags,
                 SECONDS[name])
           for name, part, _, flags in ABLATIONS if name in SECONDS]
    out += [train(seed_job(s), f"train stage4_block at its defaults with --seed {s}",
                  ("--seed", str(s)), 50) for s in SEEDS]

    def stage4_ablation(work: Path, job) -> None:
        ablation_table(work, job, gen_docs)

    out.append(Job(
        "stage4_ablation", "the table of what each part of stage 4's block buys, and its reading",
        stage4_ablation, stages=("stage4_block",), files=(MODULE,), code=gen_docs.TABLE,
        needs=(FULL, *(a[0] for a in ABLATIONS), *(seed_job(s) for s in SEEDS)),
        outputs=(TABLE, READING, TABLE_ZH, READING_ZH)))
    return out
