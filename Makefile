# make demo: set up a virtual environment and run the built-in demo.
# make test: set up with vdnnsim[dev,torch,hf] (test dependencies, torch, torchvision and
#            transformers) and run the test suite.
# make fuzz: a 10,000-case fuzzing campaign (bench/fuzz.py); failing inputs go to fuzz-failures/.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
CORE   := $(VENV)/.installed-core
DEV    := $(VENV)/.installed-dev

.PHONY: demo test bench fuzz clean

$(CORE): setup.cfg pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e .
	touch $(CORE)

$(DEV): $(CORE)
	$(BIN)/python -m pip install -q -e '.[dev,torch,hf]'
	touch $(DEV)

demo: $(CORE)
	$(BIN)/vdnnsim run configs/demo.yaml

test: $(DEV)
	$(BIN)/python -m pytest

bench: $(CORE)
	$(BIN)/python bench/bench_engine.py
	$(BIN)/python bench/bench_sweep.py
	$(BIN)/python bench/bench_validate.py
	$(BIN)/python bench/bench_planner.py

fuzz: $(DEV)
	$(BIN)/python bench/fuzz.py --seed 1 --cases 10000 --out fuzz-failures

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .hypothesis
