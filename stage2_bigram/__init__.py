"""Stage 2: the bigram model, the first language model.

One lookup table: the scores of the next character depend only on the current
one. The stage adds the training loop (forward, loss, backward, step), the
cross-entropy loss and sampling, and a harness that keeps checkpoints.

Every stage folder copies the previous one and changes only what that stage
teaches: ``diff -ru`` of two neighbouring stage folders shows one stage's idea.
"""
