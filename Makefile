# make demo: set up a virtual environment and run the built-in demo.
# make test: set up (with test dependencies) and run the test suite.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test bench clean

$(STAMP): setup.cfg pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev,torch]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/vdnnsim run configs/demo.yaml

test: $(STAMP)
	$(BIN)/python -m pytest

bench: $(STAMP)
	$(BIN)/python bench/bench_engine.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .hypothesis
