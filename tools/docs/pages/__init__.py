"""One module per docs page; each lists its ``JOBS``. Here: the runs several pages share.

Every stage is trained at its defaults on the two built-in corpora with three seeds (the
spread is the noise any difference between stages must beat), and with one seed on the
classic corpora; stage 5 on those also with its presets.
"""

from __future__ import annotations

from .. import Run

STAGES = ("stage2_bigram", "stage3_attention", "stage4_block", "stage5_gpt")
BUILTIN = ("en", "zh")
CLASSIC = ("shakespeare", "tang")
SEEDS = ("1337", "1338", "1339")
PRESETS = {"shakespeare": "shakespeare-2min", "tang": "tang-2min"}  # stage 5's two-minute runs


def train(stage: str, data: str = "en", *flags: str, seed: str = "1337") -> Run:
    """``python -m <stage>.train --data DATA FLAGS --seed SEED`` (and --threads, --dtype)."""
    return Run(stage, "--data", data, *flags, "--seed", seed)


def preset(name: str) -> Run:
    data = "tang" if name.startswith("tang") else "shakespeare"
    return Run("stage5_gpt", "--preset", name, data=data)


# Words the figures print, for the Chinese edition (the stages' plots.py LABELS in Chinese).
ZH_LABELS = {"step": "步数", "loss": "交叉熵损失（nats）", "train": "训练", "val": "验证",
             "key": "键 j（被关注的位置）", "query": "查询 i（在它之后做预测）",
             "key_pos": "键的位置 j", "query_pos": "查询的位置 i", "weight": "注意力权重",
             "grid": "{stage}：注意力，提示为\n{prompt!r}", "panel": "第 {i} 层，第 {j} 个头",
             "head": "第 {j} 个头", "layer": "第 {i} 层（共 0..{last}）：注意力，提示为\n{prompt!r}"}


def _jobs():
    from . import compare, explorer, stage1, stage2, stage3, stage4, stage5, troubleshooting

    pages = (stage1, stage2, stage3, stage4, stage5, compare, troubleshooting, explorer)
    return [job for page in pages for job in page.JOBS]


JOBS = _jobs()
