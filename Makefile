# Two entry points for a fresh machine with only Python (see README.md):
#   make demo   -- the main job
#   make test   -- the default test suite (what CI runs)
# Both create .venv and install the suite into it on first use.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# Offline dataset copies; the embedded default (digits) needs none.
export DPAUDIT_DATA_ROOT ?= $(abspath ../shared/data)
RUN_DIR ?= runs/demo

.PHONY: demo test test-slow install clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[test]"
	touch $@

install: $(VENV)/.installed

demo: install
	$(BIN)/dpaudit epsilon --sampling-rate 0.01 --noise-multiplier 4 --steps 10000 --delta 1e-5
	$(BIN)/dpaudit epsilon --sampling-rate 0.01 --steps 10000 --delta 1e-5 --target-epsilon 2
	$(BIN)/dpaudit datasets
	$(BIN)/dpaudit train --defense nonprivate --dataset digits --model digits-mlp --epochs 30 --out $(RUN_DIR)

test: install
	$(BIN)/python -m pytest -q

test-slow: install
	$(BIN)/python -m pytest -q -m slow

clean:
	rm -rf $(VENV) build *.egg-info
