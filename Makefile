# Two commands do everything, each setting itself up on a fresh machine:
#   make train   train the stage-5 GPT on the built-in corpus
#   make test    run the whole test suite (ruff included)
# Every target runs tasks.py (the same commands without make: python tasks.py train, on
# Windows py tasks.py train), which makes .venv and installs what the target needs the
# first time. CPU_TORCH=1 installs PyTorch's CPU build (Linux without an NVIDIA GPU);
# PYTHON=python3.11 picks the Python that makes .venv (3.10+ to train, 3.11+ for test/docs).

PYTHON ?= python3
TASKS = $(PYTHON) tasks.py$(if $(filter 1 yes true on,$(CPU_TORCH)), --cpu-torch)
BIN := .venv/bin

.PHONY: train test test-slow docs docs-serve docs-figures bench lint clean workbook grade

train:
	$(TASKS) train

# The fast suite (1 to 4 minutes on two cores here: one pytest process per core, each test
# file in one of them; about a third of it the two browser test files);
# test-slow: what takes longer (the grader's mutation suite, torchrun, a stored docs run
# repeated). CI runs both.
test:
	$(TASKS) test

test-slow:
	$(TASKS) test-slow

lint:
	$(TASKS) lint

# Both editions: English into site/, then Chinese into site/zh/ (the English build empties site/).
docs:
	$(TASKS) docs

docs-serve:
	$(TASKS) docs-serve

# make docs-figures  remakes what is stale of the docs' numbers and figures (python -m
# tools.docs --list shows what and how long). The Tiny Shakespeare and Tang runs need local
# copies once: make docs-figures ARGS="--shakespeare FILE --tang FOLDER".
docs-figures:
	$(TASKS) test --only-install
	$(BIN)/python -m tools.docs $(ARGS)

bench:
	$(TASKS) train --only-install
	$(BIN)/python tools/bench.py

# make workbook STAGE=3  copies stage 3 into workbook/ with its key pieces cut out
#                        (FORCE=1 starts again over an existing one, which is kept, renamed);
# make grade STAGE=3     grades your workbook with stage 3's own tests, per exercise.
STAGE ?= 3
workbook:
	$(TASKS) test --only-install
	$(BIN)/python tools/workbook.py make --stage $(STAGE)$(if $(FORCE), --force)

grade:
	$(TASKS) test --only-install
	$(BIN)/python tools/workbook.py grade --stage $(STAGE)

clean:
	rm -rf .venv out site .pytest_cache .ruff_cache
