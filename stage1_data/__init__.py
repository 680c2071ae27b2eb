"""Stage 1: text becomes numbers.

A character-level vocabulary, encode and decode, the train/val split, and
batches of (input, target) windows: the data exactly as every later model sees
it. ``python -m stage1_data`` prints all of it for the built-in corpus.

Every stage folder copies the previous one and changes only what that stage
teaches: ``diff -ru`` of two neighbouring stage folders shows one stage's idea.
"""
