# Every target sets itself up from nothing: `make demo` and `make test` work on a fresh clone.
PYTHON ?= python3
# torch first and pinned: an unpinned requirement can pull a multi-GB CUDA build. GPU users may override,
# e.g. `make install TORCH=torch==2.13.0` with their CUDA index configured for pip.
TORCH ?= torch==2.13.0
VENV := .venv
BIN := $(VENV)/bin

.PHONY: install demo test test-fast lint format clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check "$(TORCH)"
	$(BIN)/pip install --quiet --disable-pip-version-check -e ".[dev,ray]"
	touch $@

# SFT warm start (format + some arithmetic), then GRPO on the built-in arithmetic task.
demo: install
	$(BIN)/ascent sft examples/demo_sft.yaml
	$(BIN)/ascent train examples/demo.yaml

test: install
	$(BIN)/python -m pytest

# Everything except the slow end-to-end runs.
test-fast: install
	$(BIN)/python -m pytest -m "not slow"

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: install
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

clean:
	rm -rf $(VENV) runs .pytest_cache .ruff_cache *.egg-info
