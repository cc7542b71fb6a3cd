# Works from a fresh clone: every target that needs tools creates .venv first (STYLE.md §5).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# CI (set by .ci/run's environment) runs many derandomized Hypothesis examples; locally a few.
HYPOTHESIS_PROFILE := $(if $(CI),--hypothesis-profile ci,)

# A subset of the tests: make test PYTEST_ARGS="tests/functional/test_explorer.py -x"
PYTEST_ARGS ?=

.PHONY: all run test pytest system-deps lint fmt bench clean
all: test

$(STAMP): pyproject.toml setup.py miner/_kernel.c simulator/_engine.c simulator/_flow.c  # C sources: rebuild the kernels
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -e '.[test]'
	touch $@

run: $(STAMP)  # 3 devnet nodes + a miner + tx load; prints the explorer URL; Ctrl-C stops all
	$(BIN)/python scripts/devnet.py $(ARGS)  # e.g. make run ARGS="--miners 3 --tps 5"

test: lint pytest  # lint, format check, types, then all tests (import contracts run inside pytest)

pytest: $(STAMP) system-deps  # the tests only (or PYTEST_ARGS), without lint
	$(BIN)/pytest $(HYPOTHESIS_PROFILE) $(PYTEST_ARGS)

system-deps:  # Chromium + chromedriver (the explorer's browser test), fuse3 + libfuse3-3 (the power-loss tests): installed as root with apt-get
	sh scripts/ensure-system-deps.sh

lint: $(STAMP)  # ruff lint, ruff format check, mypy --strict
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

fmt: $(STAMP)  # rewrite: format, then safe lint fixes
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

bench: $(STAMP)
	$(BIN)/python bench/core.py

clean:
	rm -rf $(VENV) build dist *.egg-info .mypy_cache .ruff_cache .pytest_cache .hypothesis
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
