# specsweep: two commands do everything on a fresh machine (see README.md).
#   make reports   set up .venv, then build every published report under reports/
#   make test      set up .venv, then run the test suite
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.specsweep-installed

.PHONY: setup reports test clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "specsweep needs Python >= 3.11; set PYTHON=/path/to/python3.11")'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	@touch $(STAMP)

reports: $(STAMP)
	$(BIN)/python -m specsweep.publish

test: $(STAMP)
	$(BIN)/python -m pytest

clean:
	rm -rf $(VENV) reports/_build
