"""Stage 5: the GPT.

The stack of blocks becomes GPT-2's architecture and recipe: a final LayerNorm,
GPT-2's initialisation, AdamW with weight decay on the matrices, a warmup and
cosine learning-rate schedule, gradient clipping, a KV cache for generation,
and figures of what the trained model learned.

Every stage folder copies the previous one and changes only what that stage
teaches: ``diff -ru`` of two neighbouring stage folders shows one stage's idea.
"""
