# Two commands do everything, each setting itself up on a fresh machine:
#   make train   train the stage-5 GPT on the built-in corpus
#   make test    run the whole test suite (ruff included)
# Both create .venv and install the project into it the first time.

PYTHON ?= python3
# A pinned torch first: on CPU-only machines this takes the small CPU wheel, and the
# project's own open requirement (torch>=2.2) is then already satisfied.
TORCH ?= torch==2.13.0
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: train test test-slow docs docs-serve docs-figures bench lint clean workbook grade

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet "$(TORCH)"
	$(BIN)/python -m pip install --quiet -e ".[test,docs,gpt2]"
	touch $(STAMP)

# Ends with the next command to try: the two-minute preset of a classic corpus, the Tang
# poems for a Chinese locale ($LANG zh_*), Tiny Shakespeare otherwise.
train: $(STAMP)
	$(BIN)/python -m stage5_gpt.train
	@case "$$LANG$$LC_ALL" in zh*|*zh_*) \
	  echo "Next, Tang poems in about two minutes: .venv/bin/python -m stage5_gpt.train --preset tang-2min";; \
	*) echo "Next, Tiny Shakespeare in about two minutes: .venv/bin/python -m stage5_gpt.train --preset shakespeare-2min";; \
	esac

# The fast suite (1 to 4 minutes on two cores here: one pytest process per core, each test
# file in one of them; about a third of it the two browser test files);
# test-slow: what takes longer (the grader's mutation suite, torchrun, a stored docs run
# repeated). CI runs both.
test: $(STAMP)
	$(BIN)/python -m pytest -m "not slow" -n auto --dist loadfile

test-slow: $(STAMP)
	$(BIN)/python -m pytest -m slow

lint: $(STAMP)
	$(BIN)/ruff check .

# Both editions: English into site/, then Chinese into site/zh/ (the English build empties site/).
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict -f mkdocs.zh.yml

docs-serve: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve

# make docs-figures  remakes what is stale of the docs' numbers and figures (python -m
# tools.docs --list shows what and how long). The Tiny Shakespeare and Tang runs need local
# copies once: make docs-figures ARGS="--shakespeare FILE --tang FOLDER".
docs-figures: $(STAMP)
	$(BIN)/python -m tools.docs $(ARGS)

bench: $(STAMP)
	$(BIN)/python tools/bench.py

# make workbook STAGE=3  copies stage 3 into workbook/ with its key pieces cut out
#                        (FORCE=1 starts again over an existing one, which is kept, renamed);
# make grade STAGE=3     grades your workbook with stage 3's own tests, per exercise.
STAGE ?= 3
workbook: $(STAMP)
	$(BIN)/python tools/workbook.py make --stage $(STAGE)$(if $(FORCE), --force)

grade: $(STAMP)
	$(BIN)/python tools/workbook.py grade --stage $(STAGE)

clean:
	rm -rf $(VENV) out site .pytest_cache .ruff_cache
