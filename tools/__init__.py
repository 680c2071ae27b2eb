"""The tutorial's tools: learner tools (compare.py, bench.py, workbook.py, memory.py)
and the generator of the docs' numbers and figures (the ``tools.docs`` package).
Run them from the repository root, e.g. ``python tools/compare.py`` or
``python -m tools.docs --list``.
"""
