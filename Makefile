# kernelwright: two commands after cloning.
#   make demo   set up, then run the optimization loop (builtin policy) on the bundled softmax example
#   make test   set up, then run the test suite (CPU only; GPU tests: make test-gpu on a GPU host)
PYTHON ?= python3
VENV ?= .venv
TORCH ?= torch==2.13.0
BIN := $(VENV)/bin
STAMP := $(VENV)/.kernelwright-installed

.PHONY: setup demo test test-gpu clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q "$(TORCH)"
	$(BIN)/python -m pip install -q -e ".[dev,ray]"
	touch $(STAMP)

setup: $(STAMP)

demo: $(STAMP)
	$(BIN)/kernelwright optimize examples/softmax/problem.py --seed-kernel examples/softmax/seed.py --iterations 2 --branches 2

test: $(STAMP)
	$(BIN)/python -m pytest -q

test-gpu: $(STAMP)
	$(BIN)/python -m pytest -q -m gpu

clean:
	rm -rf $(VENV) .pytest_cache
