"""One module per docs page; each lists its ``JOBS``. Here: the runs several pages share.

Every stage is trained at its defaults on the two built-in corpora with three seeds (the
spread is the noise any difference between stages must beat), and with one seed on the
classic corpora; stage 5 on those also with its presets.
"""

from __future__ import annotations

import importlib

from .. import Run

STAGES = ("stage2_bigram", "stage3_attention", "stage4_block", "stage5_gpt")
BUILTIN = ("en", "zh")
CLASSIC = ("shakespeare", "tang")
SEEDS = ("1337", "1338", "1339")
PRESETS = {"shakespeare": "shakespeare-2min", "tang": "tang-2min"}  # stage 5's two-minute runs


def train(stage: str, data: str = "en", *flags: str, seed: str = "1337") -> Run:
    """``python -m <stage>.train --data DATA FLAGS --seed SEED`` (and --threads, --dtype)."""
    return Run(stage, "--data", data, *flags, "--seed", seed)


def classic(stage: str, data: str) -> Run:
    """A stage at its defaults on a corpus; the bigram on the Tang poems for 300 steps only:
    its table has 6,456 x 6,456 weights, every one updated at every step."""
    if (stage, data) == ("stage2_bigram", "tang"):
        return train(stage, data, "--max-iters", "300", "--eval-interval", "100")
    return train(stage, data)


def preset(name: str) -> Run:
    """Stage 5 with a preset, on two threads as a reader would run it: the time it prints
    is the one the preset's name promises."""
    data = "tang" if name.startswith("tang") else "shakespeare"
    return Run("stage5_gpt", "--preset", name, "--threads", "2", data=data)


# Words the figures print, for the Chinese edition (the stages' plots.py LABELS in Chinese).
ZH_LABELS = {"step": "步数", "loss": "交叉熵损失（nats）", "train": "训练", "val": "验证",
             "key": "键 j（被关注的位置）", "query": "查询 i（在它之后做预测）",
             "key_pos": "键的位置 j", "query_pos": "查询的位置 i", "weight": "注意力权重",
             "grid": "{stage}：注意力，提示词：\n{prompt}", "panel": "第 {i} 层，第 {j} 个头",
             "head": "第 {j} 个头", "layer": "第 {i} 层（第 0 到 {last} 层）的注意力，提示词：\n{prompt}"}


PAGES = ("stage1", "stage2", "stage3", "stage4", "stage5", "compare", "troubleshooting",
         "explorer", "scale", "bench", "workbook")  # in the order the jobs are made
JOBS = [job for name in PAGES for job in importlib.import_module(f".{name}", __name__).JOBS]
