# Two entry points for a fresh machine with only Python (see README.md):
#   make demo   -- the main job
#   make test   -- the default test suite (what CI runs)
# Both create .venv and install the suite into it on first use.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# Offline dataset copies, where this checkout has them beside it; the embedded default (digits)
# needs none. A data root that is named but missing is an error, so it is only named if present.
SHARED_DATA := $(abspath ../shared/data)
ifneq ($(wildcard $(SHARED_DATA)),)
export DPAUDIT_DATA_ROOT ?= $(SHARED_DATA)
endif
RUN_DIR ?= runs/demo

.PHONY: demo test test-extended test-slow install install-test clean

# The main job installs what it runs and nothing else; the test-only peers (Ray, Flower,
# Playwright, Opacus, Foolbox, ART, the linters) come with the test extra, for `make test` only.
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e .
	touch $@

$(VENV)/.installed-test: $(VENV)/.installed
	$(BIN)/python -m pip install --quiet -e ".[test]"
	touch $@

install: $(VENV)/.installed

install-test: $(VENV)/.installed-test

demo: install
	$(BIN)/dpaudit epsilon --sampling-rate 0.01 --noise-multiplier 4 --num-steps 10000 --delta 1e-5
	$(BIN)/dpaudit audit --threat white-box --dataset digits --model digits-mlp --target-epsilon 2 --delta 1e-5 \
		--num-workers 2 --name demo-white-box --out $(RUN_DIR)
	$(BIN)/dpaudit audit --threat black-box --method one-run --dataset digits --model digits-mlp --target-epsilon 2 --delta 1e-5 \
		--sampling-rate 0.05 --epochs 10 --learning-rate 0.5 --num-canaries 300 --name demo-one-run --out $(RUN_DIR)

# The test command: lint (ruff), format check, types (mypy over dpaudit/, attacks/, defenses/, reports/), the docs'
# strict build (a dangling link or docstring reference fails; the site goes to a scratch folder),
# then the default (not slow) test suite.
DOCS_SITE ?= $(or $(TMPDIR),/tmp)/dpaudit-site
test: install-test
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict -d $(DOCS_SITE)
	$(BIN)/python -m pytest -q

# The extended tier: tests of seconds each (real trainings, runs end to end through the command line).
# Together they take longer than the default suite's budget, so they are opt-in here; .ci/run runs them.
test-extended: install-test
	$(BIN)/python -m pytest -q -m 'extended and not slow and not cluster'

test-slow: install-test
	$(BIN)/python -m pytest -q -m slow

clean:
	rm -rf $(VENV) build site *.egg-info
