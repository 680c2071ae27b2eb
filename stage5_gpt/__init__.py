"""A step of the tutorial "Build a GPT, stage by stage".

Every stage folder is a self-contained package: it copies the previous stage and
changes only what this stage teaches. Compare two stages with
``diff -ru stage1_data stage2_bigram``.
"""
