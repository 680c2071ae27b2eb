"""Stage 4: the Transformer block.

Several attention heads at once, an MLP, residual connections and LayerNorm make
a block; blocks stack into a deep model that still trains, with dropout against
overfitting. Switches take each part out to measure what it buys.

Every stage folder copies the previous one and changes only what that stage
teaches: ``diff -ru`` of two neighbouring stage folders shows one stage's idea.
"""
