# The two commands a newcomer needs: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint conformance bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/kai-ray simulate examples/quickstart

test: $(STAMP)
	$(BIN)/python -m pytest

lint: $(STAMP)
	$(BIN)/ruff check kai_ray tests
	$(BIN)/mypy kai_ray

conformance: $(STAMP)
	$(PYTHON) ../shared/conformance/check.py ../shared/conformance/scenarios \
	    --cmd '$(BIN)/kai-ray simulate {scenario} --output json' --jobs 2

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
