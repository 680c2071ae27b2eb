"""Stage 3: one head of causal self-attention.

Characters become vectors (token embeddings) that know where they sit (position
embeddings), and each position looks back at the ones before it, weighing them
by relevance: predictions now depend on context.

Every stage folder copies the previous one and changes only what that stage
teaches: ``diff -ru`` of two neighbouring stage folders shows one stage's idea.
"""
