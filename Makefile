# The README's commands. Each does its own set-up on a fresh machine.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.ci-runner-installed

.PHONY: demo test lint typecheck unit bench env clean

## demo: run the example's train.yaml on this machine (no cluster, no GitLab)
demo: env
	$(VENV)/bin/ci-runner render --config examples/simple_ml/train.yaml

## test: lint, type-check and run every test (slow end-to-end tests included)
test: env lint typecheck
	$(PY) -m pytest -q

lint: env
	$(VENV)/bin/ruff check ci_runner tests bench
	$(VENV)/bin/ruff format --check ci_runner tests bench

typecheck: env
	$(VENV)/bin/mypy

## unit: the fast tests only
unit: env
	$(PY) -m pytest -q -m "not slow"

## env: the project's virtualenv with ci-runner and its test tools
env: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $@

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
