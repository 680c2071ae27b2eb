"""gen_docs jobs for the Chinese edition: the stages run on the built-in Chinese corpus.

Where an English page shows what a stage printed or drew about English text, its
Chinese counterpart (docs/zh/) shows the same for the Chinese corpus (``--data zh``):
stage 1's look at the data, stages 2 to 4's training transcripts and figures, and
stage 5's one-head inspection and streamed sample of a Chinese prompt. Stage 5's
Chinese training and figures come from the ``stage5_zh`` job of tools/gen_docs.py.
The names are the English outputs' with ``_zh``.

    python tools/gen_docs.py --only stage1_zh stage2_zh stage3_zh stage4_zh stage5_zh_prompts
"""

from __future__ import annotations

from pathlib import Path

INSPECT_PROMPT = "小狐狸说"  # one head's computation on a short Chinese prompt
SAMPLE_PROMPT = "老师："  # the streamed sample's start, as "TEACHER:" in English
SECONDS = {"stage2_bigram": 12, "stage3_attention": 28, "stage4_block": 100}


def jobs(Job, gen_docs) -> list:
    here = ("tools/docs_zh.py",)
    out = [Job(
        "stage1_zh", "what stage 1 prints about the Chinese corpus", stage1_zh_job(gen_docs),
        stages=("stage1_data",), files=here, outputs=("stage1_data_zh.txt",), seconds=5)]
    for stage in gen_docs.STAGES[:-1]:
        n = stage[5]
        out.append(Job(
            f"stage{n}_zh", f"train {stage} at its defaults on zh: transcript and figures",
            gen_docs.train_job,
            params={"stage": stage, "out": f"out/zh_{stage}", "flags": ("--data", "zh"),
                    "transcript": f"{stage}_train_zh.txt", "tag": "_zh", "record": False},
            stages=(stage,), files=here, code=gen_docs.TRAINING,
            outputs=gen_docs.train_outputs(stage, "_zh"), seconds=SECONDS[stage]))
    out.append(Job(
        "stage5_zh_prompts", "stage 5 on zh: one head's computation and a sample of a Chinese "
        "prompt", stage5_prompts_job(gen_docs), stages=("stage5_gpt",), files=here,
        code=gen_docs.TRAINING, outputs=("stage5_gpt_inspect_zh.txt", "stage5_gpt_sample_zh.txt"),
        seconds=150))
    return out


def stage1_zh_job(gen_docs):
    def stage1_zh(work: Path, job) -> None:
        gen_docs.write("stage1_data_zh.txt", gen_docs.run(work, "stage1_data", "--data", "zh"))
    return stage1_zh


def stage5_prompts_job(gen_docs):
    def stage5_zh_prompts(work: Path, job) -> None:
        """Train the Chinese GPT at the defaults (as stage5_zh does), then inspect and sample."""
        out = "out/zh_prompts"
        gen_docs.run(work, "stage5_gpt.train", "--data", "zh", "--out-dir", out)
        gen_docs.write("stage5_gpt_inspect_zh.txt", gen_docs.run(
            work, "stage5_gpt.inspect", "--ckpt", f"{out}/best.pt", "--prompt", INSPECT_PROMPT))
        gen_docs.write("stage5_gpt_sample_zh.txt", gen_docs.run(
            work, "stage5_gpt.sample", "--ckpt", f"{out}/best.pt", "--prompt", SAMPLE_PROMPT,
            "--tokens", "200", "--temperature", "0.8"))
    return stage5_zh_prompts
