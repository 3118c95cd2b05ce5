# make demo:  set up a virtual environment and run the built-in demo.
# make test:  set up with vdnnsim[dev,torch,hf,peft,diffusers] (test dependencies, torch,
#             torchvision, transformers, peft and diffusers) and run the test suite on
#             every core (pytest-xdist).
# make quick: the tests without those marked slow (a minute or so), for the edit-test loop.
# make wheel-check: build the wheel, install it into a fresh virtual environment and run the
#             demo, reproduce and list from it, outside the source tree (.ci/run does this).
# make fuzz:  the full fuzzing campaign, 10,000 cases of the test run's seed (the test run
#             takes the first 1,500); bench/fuzz.py explores other seeds.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
PIP    := $(VENV)/.pip-upgraded
CORE   := $(VENV)/.installed-core
DEV    := $(VENV)/.installed-dev
WHEEL_CHECK := build/wheel-check

.PHONY: demo test quick wheel-check bench fuzz clean

$(PIP):
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	touch $(PIP)

# --no-compile: pip would byte-compile every file of torch and transformers (a minute of
# the install on 2 cores); what runs compiles its own modules once, on first import.
$(CORE): setup.cfg pyproject.toml | $(PIP)
	$(BIN)/python -m pip install -q --no-compile -e .
	touch $(CORE)

# One pip run installs vdnnsim and every extra (the core install is part of it: a second
# run only resolved and built it again); after make demo it adds the extras.
$(DEV): setup.cfg pyproject.toml | $(PIP)
	$(BIN)/python -m pip install -q --no-compile -e '.[dev,torch,hf,peft,diffusers]'
	touch $(CORE) $(DEV)

demo: $(CORE)
	$(BIN)/vdnnsim run configs/demo.yaml

# The test run writes bytecode (an empty PYTHONDONTWRITEBYTECODE, where the machine sets
# it): its hundreds of vdnnsim subprocesses then compile the package once, not each.
test: $(DEV)
	PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest -n auto --dist worksteal

quick: $(DEV)
	PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest -n auto --dist worksteal -m "not slow"

wheel-check: $(CORE)
	rm -rf $(WHEEL_CHECK)
	$(BIN)/python -m pip wheel -q --no-deps -w $(WHEEL_CHECK)/dist .
	$(PYTHON) -m venv $(WHEEL_CHECK)/venv
	$(WHEEL_CHECK)/venv/bin/python -m pip install -q $(WHEEL_CHECK)/dist/vdnnsim-*.whl
	bash bench/wheel_check.sh $(WHEEL_CHECK)/venv $(BIN)/vdnnsim

bench: $(CORE)
	$(BIN)/python bench/bench_engine.py
	$(BIN)/python bench/bench_sweep.py
	$(BIN)/python bench/bench_validate.py
	$(BIN)/python bench/bench_planner.py

fuzz: $(DEV)
	VDNNSIM_FUZZ_CASES=10000 $(BIN)/python -m pytest tests/test_fuzz.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .hypothesis
