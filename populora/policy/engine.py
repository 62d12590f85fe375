"""Generation engines: the interface, the registry, and what a rank tells its engine.

A *generation engine* serves completions for many named adapters at once. It knows three things:
``publish(name, weights)`` (from now on, ``name`` means these weights), ``retire(name)`` and
``generate(requests, sampling)``. Engines are registered by name (``policy.engine`` picks one):
``hf`` generates with the trainer's own peft model (``hf_engine.py``), ``vllm`` with a vLLM
multi-LoRA engine on the same GPU (``vllm_engine.py``).

Adding an engine is ONE module, ``populora/policy/<name>_engine.py``, with a
``@register_engine("<name>")`` subclass of :class:`GenerationEngine`, plus its row in
docs/backends.md. The registry imports every such module (``engines()``), and everything else asks
the class: ``policy.engine`` validation and the ``policy.<name>:`` section of the run config
(``config.py``), ``populora eval --backend``, the memory plan's engine item and fixes
(``populora/plan``), evaluation's chunk size, the doctor's verdict. An engine module must not import
``populora.policy.config`` at module level (``config.py`` imports the engine modules to build
``PolicyConfig``): annotations go under ``TYPE_CHECKING``, errors use ``validation.py``. This module
itself does not import it at all (it is below ``config.py``): the ``policy`` its class methods receive
is the run's ``PolicyConfig``.

The policy a rank runs, one trainer + one engine, is ``backend.Policy``.
"""

from __future__ import annotations

import functools
import importlib
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from populora.policy.adapters import AdapterWeights
from populora.policy.base import (
    GenerationRequest,
    GenerationResult,
    SamplingParams,
)
from populora.policy.engine_memory import EngineMemory, Knob

PROMPT_TOO_LONG = "prompt_too_long"


class EngineFailure(RuntimeError):
    """The generation engine cannot serve: it did not start, its process died, its device failed.

    Not a property of one request: retrying would fail again, and going on would train on nothing.
    The run stops on every rank with this message (it names the engine and the cause); requests that
    fail on their own (``GenerationResult.refused``) are not engine failures.
    """


class ServedMismatch(EngineFailure):
    """The engine does not serve the weights the trainer holds: after a publish, its log-probabilities of
    the check sequences differ from the trainer's by more than its tolerance. The message names the
    member, the step and the difference; the run stops as on any engine failure (last checkpoint intact)."""


@dataclass(frozen=True)
class EngineContext:
    """Where an engine runs: the rank it serves and the seed of its own random stream.

    ``seed``: the engine's sampling stream when requests carry no seed of their own (vLLM's ``seed``);
    a run derives it from its seed and the rank (``engine_seed``), so ranks given the same prompts
    draw different samples and runs of a seed sweep do not share a stream.
    ``local_rank`` / ``local_world``: this rank among the ranks of its node (per-rank caches, cores).
    """

    seed: int = 0
    rank: int = 0
    local_rank: int = 0
    local_world: int = 1


def engine_seed(run_seed: int, rank: int) -> int:
    """A 31-bit engine seed that depends on the run's seed and the rank (ours: any mix that keeps
    ranks and runs apart; numpy's SeedSequence hashing, as ``selfplay.loop.step_seed``)."""
    import numpy as np

    return int(np.random.default_rng([run_seed, rank, 0x5EED]).integers(0, 2**31 - 1))


class GenerationEngine(ABC):
    """Serves completions for named adapters; see the module docstring.

    An engine class declares, beside ``publish``/``retire``/``generate`` (the only required part;
    every other attribute has the default named):

    - ``name``: set by ``@register_engine("<name>")``, the value of ``policy.engine``;
    - ``summary``: one line for ``populora eval --help`` and docs/backends.md's table of engines
      (default: empty);
    - ``Config``: the dataclass of its own settings, which becomes the ``policy.<name>:`` section of
      the run config (keys ``policy.<name>.<field>``; its ``__post_init__`` raises
      ``validation.PolicyConfigError`` naming the key); default ``None``: no section;
    - ``check_config(policy)``: checks of the whole ``PolicyConfig`` with this engine, when it loads
      (default: none); ``check_available()``: raises ``ImportError`` naming what to install when a
      package the engine needs is missing, called before any weights load (default: nothing needed);
    - ``shares_trainer_weights``: it generates with the trainer's live weights, so publishing needs
      no copy of them (default ``False``);
    - ``assumes_gpu``: the memory plan resolves ``policy.device: auto`` to CUDA even on a machine
      without one (default ``False``: CUDA when torch sees a GPU, else CPU);
    - ``cuda_processes``: processes of its own holding a CUDA context beside the trainer's, as the
      memory plan counts them (default 0: it runs in the trainer's process);
    - ``eval_chunk_size(policy)``: requests per ``generate`` call in ``populora eval`` without
      ``--chunk-size`` (default ``policy.max_batch_size``: an interrupted evaluation loses at most one
      batch; 0 = every pending request of a benchmark at once);
    - ``plan_memory(inputs, gpu_gib)`` and ``plan_knobs(inputs)``: its part of the memory plan
      (``engine_memory.py``; default: no memory of its own, "not modelled" in the table, no knobs).
    """

    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    Config: ClassVar[type | None] = None
    #: the largest mean absolute difference, in nats per token, between the engine's and the trainer's
    #: log-probabilities of the same tokens under the same adapter that still counts as the same weights
    #: (``score``; 0: the engine has no scoring, nothing is checked)
    logprob_tolerance: ClassVar[float] = 0.0
    shares_trainer_weights: ClassVar[bool] = False
    assumes_gpu: ClassVar[bool] = False
    cuda_processes: ClassVar[int] = 0

    @abstractmethod
    def publish(self, name: str, weights: AdapterWeights) -> None:
        """From the next ``generate`` on, requests for ``name`` use ``weights``."""

    def publish_many(self, items: Sequence[tuple[str, AdapterWeights]]) -> None:
        """``publish`` of every ``(name, weights)``; an engine may overlap them (default: one by one)."""
        for name, weights in items:
            self.publish(name, weights)

    @abstractmethod
    def retire(self, name: str) -> None:
        """``name`` is gone: free what the engine holds for it."""

    @abstractmethod
    def generate(self, requests: Sequence[GenerationRequest], sampling: SamplingParams) -> list[GenerationResult]:
        """All requests (mixed adapters) in as few batched passes as the engine can."""

    def score(self, adapters: Sequence[str], prompt_ids: Sequence[Sequence[int]],
              completion_ids: Sequence[Sequence[int]]) -> list[list[float]] | None:
        """Per-token log-probabilities of each completion after its prompt under the version of its row's
        adapter (``adapters[i]``) the engine serves now, as ``completion_logprobs`` gives them, all rows in
        as few passes as the engine can; ``None`` when the engine generates
        with the trainer's own weights (``shares_trainer_weights``: nothing to compare). The check that
        the engine serves what the trainer trained (``backend.Policy.publish``) compares the two."""
        return None

    def tolerance(self) -> float:
        """``logprob_tolerance`` of this engine as it runs (an engine may tell its platforms apart)."""
        return self.logprob_tolerance

    def sleep(self) -> None:  # noqa: B027 - optional: engines that hold GPU memory of their own
        """Free GPU memory for the trainer until the next ``generate``."""

    def process_ids(self) -> list[int]:
        """Pids of the processes of its own that compute its generations; default none: it computes
        in this process, with this process's threads."""
        return []

    def reset_prefix_cache(self) -> None:  # noqa: B027 - optional: engines that keep prompts' KV blocks
        """Forget the KV blocks of prompts seen before, so that the next call computes them again
        (``populora bench generate`` times its arms on the same prompts)."""

    def close(self) -> None:  # noqa: B027 - optional
        """Release the engine."""

    # -- what the rest of the code asks the class (defaults in the class docstring) ---------------
    @classmethod  # noqa: B027 - optional
    def check_config(cls, policy: Any) -> None:
        """Checks of the whole policy section with this engine; raise ``PolicyConfigError``."""

    @classmethod  # noqa: B027 - optional
    def check_available(cls) -> None:
        """Raise ``ImportError`` naming what to install if a package the engine needs is missing."""

    @classmethod
    def eval_chunk_size(cls, policy: Any) -> int:
        """Requests per ``generate`` call in ``populora eval`` (0 = all pending of a benchmark)."""
        return policy.max_batch_size

    @classmethod
    def plan_memory(cls, inputs, gpu_gib: float) -> EngineMemory:
        """The engine's part of the memory plan of ``inputs`` (a ``PlanInputs``) on ``gpu_gib`` GiB."""
        return EngineMemory()

    @classmethod
    def plan_knobs(cls, inputs) -> list[Knob]:
        """Settings of its own that the plan's fix search may turn, switches first."""
        return []


ENGINES: dict[str, type[GenerationEngine]] = {}
MODULE_SUFFIX = "_engine"  # populora/policy/<name>_engine.py


def register_engine(name: str):
    """Class decorator: ``@register_engine("vllm")`` makes ``policy.engine: vllm`` build that class
    as ``cls(config, trainer, max_new_tokens=..., context=...)``: the longest completion it will be
    asked for (or None when unknown) and its ``EngineContext``. Sets ``cls.name``."""

    def deco(cls):
        if name in ENGINES and ENGINES[name] is not cls:
            raise ValueError(f"engine {name!r} is registered twice")
        cls.name = name
        ENGINES[name] = cls
        return cls

    return deco


@functools.cache
def engine_modules() -> tuple[str, ...]:
    """Names of the engine modules, ``populora/policy/<name>_engine.py``, read from the directory once
    per process (``PolicyConfig`` gets its engine sections from them when it is built)."""
    return tuple(sorted(p.stem[: -len(MODULE_SUFFIX)] for p in Path(__file__).parent.glob(f"*{MODULE_SUFFIX}.py")))


def engines() -> dict[str, type[GenerationEngine]]:
    """Every engine by name: each engine module imported once (a module that registers no engine of
    its own name is an error naming it)."""
    for name in engine_modules():
        if name not in ENGINES:
            try:
                importlib.import_module(f"populora.policy.{name}{MODULE_SUFFIX}")
            except ImportError as e:
                if e.name != "populora.policy.config":
                    raise
                raise ImportError(f"populora/policy/{name}{MODULE_SUFFIX}.py imports populora.policy.config at module "
                                  "level, which imports the engine modules: import it under TYPE_CHECKING or inside "
                                  f"a function ({e})") from e
            if name not in ENGINES:
                raise ValueError(f"populora/policy/{name}{MODULE_SUFFIX}.py registers no engine {name!r}: "
                                 f"decorate its engine class with @register_engine({name!r})")
    return dict(sorted(ENGINES.items()))


def engine_names() -> list[str]:
    """The values ``policy.engine`` accepts."""
    return list(engines())


def engine_class(name: str) -> type[GenerationEngine]:
    """The engine class for ``policy.engine``."""
    known = engines()
    if name not in known:
        raise ValueError(f"policy.engine: unknown engine {name!r}; known: {sorted(known)}")
    return known[name]
