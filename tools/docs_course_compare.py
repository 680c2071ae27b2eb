"""gen_docs jobs: the compare page's second same-budget table, where every idea pays off,
and the sentences that read both same-budget tables.

At gen_docs.BUDGET (2000 steps of 16 x 32) the single attention head of stage 3 is
still learning and ends no better than the bigram, which has long learned all that
one character of context can tell. PAYOFF gives every stage more steps, the same
batch and context: there each stage beats the one before it on validation loss.
The jobs train each stage at PAYOFF with tools/compare.py (one stage per job, like
the budget_stage* jobs), assemble the table, and write compare_reading_en.md: the
numbers the page quotes about both tables, read from the stored rows, never typed;
and its Chinese twin compare_reading_en_zh.md for docs/zh/compare.md, with the same
numbers (``reading_zh``; the name is the English one's with ``_zh``, as for every
Chinese twin of a generated file).

    python tools/gen_docs.py --only payoff_stage2 payoff_stage3 payoff_stage4 payoff_stage5
"""

from __future__ import annotations

from itertools import pairwise
from pathlib import Path

# Everything but the steps as in gen_docs.BUDGET, so the two tables differ in one thing.
PAYOFF = ("--data", "en", "--max-iters", "3000", "--batch-size", "16", "--block-size", "32")
TABLE = "compare_payoff_en.md"
READING = "compare_reading_en.md"
READING_ZH = "compare_reading_en_zh.md"  # the same reading for docs/zh/compare.md
NAMES = {2: "the bigram", 3: "one attention head", 4: "the Transformer blocks",
         5: "the GPT recipe"}
NAMES_ZH = {2: "二元模型", 3: "单个注意力头", 4: "Transformer 块", 5: "完整的 GPT 配方"}
NUMERALS_ZH = {2: "二", 3: "三", 4: "四", 5: "五"}  # 第三步: the Chinese pages' stage names


def flag(flags: tuple[str, ...], name: str) -> str:
    return flags[flags.index(name) + 1]


def budget_words(flags: tuple[str, ...]) -> str:
    return (f"{int(flag(flags, '--max-iters')):,} steps of batch {flag(flags, '--batch-size')} "
            f"× block {flag(flags, '--block-size')}")


def gain(rows: dict[int, dict], a: int, b: int) -> float:
    """How much lower stage b's final val loss is than stage a's (nats; < 0: higher)."""
    return rows[a]["val_loss"] - rows[b]["val_loss"]


def pair_sentence(rows: dict[int, dict], a: int, b: int) -> str:
    d = gain(rows, a, b)
    va, vb = rows[a]["val_loss"], rows[b]["val_loss"]
    if d > 0.005:
        return f"stage {b} improves on stage {a} by **{d:.3f} nats** ({va:.4f} → {vb:.4f})"
    if d >= -0.005:
        return f"stage {b} is **no better** than stage {a} (stage {a}: {va:.4f}, stage {b}: {vb:.4f})"
    return (f"stage {b} is **worse** than stage {a} by {-d:.3f} nats "
            f"(stage {a}: {va:.4f}, stage {b}: {vb:.4f})")


def facts(small: dict[int, dict], payoff: dict[int, dict], small_flags: tuple[str, ...],
          payoff_flags: tuple[str, ...]) -> tuple:
    """What both readings (English and Chinese) say: the stages, whether every idea pays
    off at the larger budget, the rows of stages 2 and 3 at both budgets, the extra steps."""
    stages = sorted(payoff)
    every = all(gain(payoff, a, b) > 0.005 for a, b in pairwise(stages))
    extra = int(flag(payoff_flags, "--max-iters")) - int(flag(small_flags, "--max-iters"))
    return stages, every, small[2], small[3], payoff[2], payoff[3], extra


def reading(small: dict[int, dict], payoff: dict[int, dict], small_flags: tuple[str, ...],
            payoff_flags: tuple[str, ...]) -> str:
    """The compare page's reading of the two same-budget tables, from their rows."""
    stages, every, s2, s3, p2, p3, extra = facts(small, payoff, small_flags, payoff_flags)
    lines = [
        f"**At {budget_words(small_flags)}**, "
        + "; ".join(pair_sentence(small, a, b) for a, b in pairwise(stages)) + ".",
        "",
        f"The bigram has {s2['params']:,} parameters, one score for each pair of characters, "
        f"and it needs no other part to work: each step adjusts the scores of the pairs in "
        f"the batch directly, so it learns early all that one character of context can tell, and "
        f"{extra:,} more steps change its validation loss by only "
        f"{p2['val_loss'] - s2['val_loss']:+.4f} ({s2['val_loss']:.4f} → {p2['val_loss']:.4f}). "
        f"Stage 3's {s3['params']:,} parameters must first learn embeddings, a query, a key "
        f"and a value map and an output layer that work together before attention can add "
        f"anything to what the current character says; at this budget it is still doing so, "
        f"and the same {extra:,} more steps take it from {s3['val_loss']:.4f} to "
        f"{p3['val_loss']:.4f}. Attention does not pay off at the small budget because it has "
        f"not finished learning yet, not because context does not help.",
        "",
        f"**At {budget_words(payoff_flags)}**, "
        + "; ".join(pair_sentence(payoff, a, b) for a, b in pairwise(stages)) + ". "
        + (f"Each idea earns its keep: from {NAMES[stages[0]]} to {NAMES[stages[-1]]}, the "
           f"validation loss falls by {gain(payoff, stages[0], stages[-1]):.3f} nats in all."
           if every else "Not every idea pays off at this budget either."),
    ]
    return "\n".join(lines)


def budget_words_zh(flags: tuple[str, ...]) -> str:
    return (f"{int(flag(flags, '--max-iters')):,} 步、批次 {flag(flags, '--batch-size')} "
            f"× 上下文 {flag(flags, '--block-size')}")


def pair_sentence_zh(rows: dict[int, dict], a: int, b: int) -> str:
    """``pair_sentence`` in Chinese: the same comparison, the same numbers."""
    d = gain(rows, a, b)
    va, vb = rows[a]["val_loss"], rows[b]["val_loss"]
    sa, sb = f"第{NUMERALS_ZH[a]}步", f"第{NUMERALS_ZH[b]}步"
    if d > 0.005:
        return f"{sb}的验证损失比{sa}低 **{d:.3f} 奈特**（{va:.4f} → {vb:.4f}）"
    if d >= -0.005:
        return f"{sb}**并不比**{sa}好（{sa}：{va:.4f}，{sb}：{vb:.4f}）"
    return f"{sb}比{sa}**差**，验证损失高 {-d:.3f} 奈特（{sa}：{va:.4f}，{sb}：{vb:.4f}）"


def reading_zh(small: dict[int, dict], payoff: dict[int, dict], small_flags: tuple[str, ...],
               payoff_flags: tuple[str, ...]) -> str:
    """``reading`` in Chinese, for docs/zh/compare.md: the same numbers, from the same rows."""
    stages, every, s2, s3, p2, p3, extra = facts(small, payoff, small_flags, payoff_flags)
    lines = [
        f"**在 {budget_words_zh(small_flags)} 的预算下**，"
        + "；".join(pair_sentence_zh(small, a, b) for a, b in pairwise(stages)) + "。",
        "",
        f"二元模型有 {s2['params']:,} 个参数，每一对字符一个分数，而且它不需要任何别的部件配合"
        f"就能工作：每一步都直接调整批次里出现的那些字符对的分数，所以一个字符的上下文所能提供的"
        f"信息，它很早就全学到了；再多训练 {extra:,} 步，它的验证损失只变化了 "
        f"{p2['val_loss'] - s2['val_loss']:+.4f}（{s2['val_loss']:.4f} → {p2['val_loss']:.4f}）。"
        f"第三步的 {s3['params']:,} 个参数则不同：嵌入、查询（query）、键（key）和值（value）"
        f"三个映射以及输出层必须先学会彼此配合，注意力才能在当前字符本身提供的信息之外再补充"
        f"些什么；在这个预算下它还在学，同样多训练 {extra:,} 步，就让它从 "
        f"{s3['val_loss']:.4f} 降到了 {p3['val_loss']:.4f}。注意力在小预算下没有带来回报，是因为"
        f"它还没学完，而不是因为上下文没有用。",
        "",
        f"**在 {budget_words_zh(payoff_flags)} 的预算下**，"
        + "；".join(pair_sentence_zh(payoff, a, b) for a, b in pairwise(stages)) + "。"
        + (f"每个想法都物有所值：从{NAMES_ZH[stages[0]]}到{NAMES_ZH[stages[-1]]}，验证损失"
           f"一共下降了 {gain(payoff, stages[0], stages[-1]):.3f} 奈特。"
           if every else "在这个预算下，也并非每个想法都有回报。"),
    ]
    return "\n".join(lines)


def jobs(Job, gen_docs) -> list:
    here = "tools/docs_course_compare.py"
    # The trainings and their table list tools/compare.py but not this module: all they
    # take from it is PAYOFF, which their params hold, so editing the reading below
    # does not retrain four stages.
    out = []
    for stage, seconds in zip(gen_docs.STAGES, (15, 30, 80, 120), strict=True):
        n = stage[5]
        out.append(Job(
            f"payoff_stage{n}", f"tools/compare.py --stages {n} at the budget where every idea "
                                "pays off (3000 steps)",
            gen_docs.budget_job, params={"number": int(n), "flags": PAYOFF}, stages=(stage,),
            files=("tools/compare.py",), code=("run", "write", "record_run", "budget_job"),
            outputs=(f"{gen_docs.RUNS}/payoff_stage{n}.json",), seconds=seconds))
    out.append(Job(
        "compare_payoff_en", "the table of every stage at the budget where every idea pays off",
        gen_docs.budget_table_job, params={"flags": PAYOFF}, files=("tools/compare.py",),
        code=("write", "load_run", "budget_table_job"),
        needs=tuple(f"payoff_stage{s[5]}" for s in gen_docs.STAGES), outputs=(TABLE,)))
    out.append(Job(
        "compare_reading_en", "the compare page's reading of the two same-budget tables "
        "(and its Chinese twin)",
        reading_action(gen_docs), files=(here,), code=("write", "load_run"),
        needs=(*(f"budget_stage{s[5]}" for s in gen_docs.STAGES),
               *(f"payoff_stage{s[5]}" for s in gen_docs.STAGES)),
        outputs=(READING, READING_ZH)))
    return out


def reading_action(gen_docs):
    """The reading job's action: gen_docs calls ``action(work, job)``."""
    def compare_reading(work: Path, job) -> None:
        small = {int(s[5]): gen_docs.load_run(f"budget_stage{s[5]}") for s in gen_docs.STAGES}
        payoff = {int(s[5]): gen_docs.load_run(f"payoff_stage{s[5]}") for s in gen_docs.STAGES}
        gen_docs.write(READING, reading(small, payoff, gen_docs.BUDGET, PAYOFF))
        gen_docs.write(READING_ZH, reading_zh(small, payoff, gen_docs.BUDGET, PAYOFF))
    return compare_reading
