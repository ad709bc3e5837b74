# Two commands on a fresh machine with python3, pip and make:
#   make demo   set everything up (.venv) and run the main job
#   make test   set everything up (.venv), lint (ruff) and type-check (mypy) src/, build the API reference (fails on a
#               broken docstring) and run the tests
#   make docs   the API reference alone: build/api/index.html
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup demo test docs clean

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[test,simulation]'
	# private set intersection; --no-deps: its protobuf==6.30.2 pin conflicts with flwr's, and
	# it runs with the protobuf flwr brings (checked by tests/federation/test_psi.py)
	$(BIN)/python -m pip install --quiet --no-deps openmined-psi==2.0.6
	touch $(STAMP)

setup: $(STAMP)

demo: $(STAMP)
	$(BIN)/fedpgm demo

docs: $(STAMP)
	$(BIN)/python scripts/api_docs.py --out build/api

test: $(STAMP) docs
	$(BIN)/ruff check src
	$(BIN)/mypy src
	# two workers, a test file at a time on each (its module fixtures once); the tests that time
	# themselves (deadlines, budgets) after them, alone, so that no other test shares their CPU
	$(BIN)/python -m pytest -n 2 --dist loadfile -m "not timing"
	$(BIN)/python -m pytest -m timing

clean:
	rm -rf $(VENV) build src/*.egg-info .pytest_cache
