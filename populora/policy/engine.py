"""Generation engines, and the policy a rank runs: one trainer + one engine.

A *generation engine* serves completions for many named adapters at once. It knows three things:
``publish(name, weights)`` (from now on, ``name`` means these weights), ``retire(name)`` and
``generate(requests, sampling)``. Engines are registered by name (``ENGINES``; ``policy.engine``
picks one): ``hf`` generates with the trainer's own peft model (``hf_engine.py``), ``vllm`` with a
vLLM multi-LoRA engine on the same GPU (``vllm_engine.py``). Adding an engine is one module with a
``@register_engine("name")`` class, plus docs.

``Policy`` composes the trainer (``HFBackend``: adapters, log-probabilities, optimizers; the source of
truth for weights) with an engine, and is the ``PolicyBackend`` the loop and the evaluation talk to:
every change of an adapter's weights marks it for publishing, and the engine receives the changed
adapters right before its next ``generate``; an engine that can free its GPU memory is put to sleep
before the trainer's first forward of a phase. Requests whose prompt is longer than
``policy.max_prompt_tokens`` are refused one by one (``GenerationResult.refused``), never failing
the batch.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from populora.policy.adapters import AdapterWeights
from populora.policy.base import (
    GenerationRequest,
    GenerationResult,
    PolicyBackend,
    SamplingParams,
    TokenLogprobs,
)
from populora.policy.config import PolicyConfig

PROMPT_TOO_LONG = "prompt_too_long"


class EngineFailure(RuntimeError):
    """The generation engine cannot serve: it did not start, its process died, its device failed.

    Not a property of one request: retrying would fail again, and going on would train on nothing.
    The run stops on every rank with this message (it names the engine and the cause); requests that
    fail on their own (``GenerationResult.refused``) are not engine failures.
    """


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

    ``shares_trainer_weights``: the engine generates with the trainer's live weights (the HF engine),
    so publishing needs no copy of them.
    """

    shares_trainer_weights: bool = False

    @abstractmethod
    def publish(self, name: str, weights: AdapterWeights) -> None:
        """From the next ``generate`` on, requests for ``name`` use ``weights``."""

    @abstractmethod
    def retire(self, name: str) -> None:
        """``name`` is gone: free what the engine holds for it."""

    @abstractmethod
    def generate(self, requests: Sequence[GenerationRequest], sampling: SamplingParams) -> list[GenerationResult]:
        """All requests (mixed adapters) in as few batched passes as the engine can."""

    def sleep(self) -> None:  # noqa: B027 - optional: engines that hold GPU memory of their own
        """Free GPU memory for the trainer until the next ``generate``."""

    def close(self) -> None:  # noqa: B027 - optional
        """Release the engine."""


ENGINES: dict[str, Callable[..., GenerationEngine]] = {}


def register_engine(name: str):
    """Class decorator: ``@register_engine("vllm")`` makes ``policy.engine: vllm`` build that class
    as ``cls(config, trainer, max_new_tokens=..., context=...)``: the longest completion it will be
    asked for (or None when unknown) and its ``EngineContext``."""

    def deco(cls):
        if name in ENGINES:
            raise ValueError(f"engine {name!r} is registered twice")
        ENGINES[name] = cls
        return cls

    return deco


def engine_class(name: str):
    """The engine class for ``policy.engine`` (its module is imported on first use)."""
    import importlib

    if name not in ENGINES:
        try:
            importlib.import_module(f"populora.policy.{name}_engine")
        except ModuleNotFoundError as e:
            if e.name != f"populora.policy.{name}_engine":
                raise
    if name not in ENGINES:
        raise ValueError(f"policy.engine: unknown engine {name!r}; known: {sorted(ENGINES)}")
    return ENGINES[name]


class Policy(PolicyBackend):
    """One trainer + one generation engine (see the module docstring)."""

    def __init__(self, config: PolicyConfig, trainer, engine: GenerationEngine) -> None:
        self.config, self.trainer, self.engine = config, trainer, engine
        self.tokenizer = trainer.tokenizer
        self._dirty: set[str] = set(trainer.adapter_names())

    # -- adapters: the trainer holds the truth; the engine is told before it generates ---------
    def module_shapes(self) -> dict[str, tuple[int, int]]:
        return self.trainer.module_shapes()

    def adapter_names(self) -> list[str]:
        return self.trainer.adapter_names()

    def new_adapter_weights(self, seed: int | None = None) -> AdapterWeights:
        return self.trainer.new_adapter_weights(seed)

    def add_adapter(self, name: str, weights: AdapterWeights | None = None) -> None:
        self.trainer.add_adapter(name, weights)
        self._dirty.add(name)

    def remove_adapter(self, name: str) -> None:
        self.trainer.remove_adapter(name)
        self._dirty.discard(name)
        self.engine.retire(name)

    def get_weights(self, name: str) -> AdapterWeights:
        return self.trainer.get_weights(name)

    def set_weights(self, name: str, weights: AdapterWeights) -> None:
        self.trainer.set_weights(name, weights)
        self._dirty.add(name)

    def publish_pending(self) -> None:
        if not self.engine.shares_trainer_weights:
            for name in sorted(self._dirty):
                self.engine.publish(name, self.trainer.get_weights(name))
        self._dirty.clear()

    # -- generation ---------------------------------------------------------------------------
    def generate(self, requests: Sequence[GenerationRequest], sampling: SamplingParams) -> list[GenerationResult]:
        from populora.policy.hf import UnknownAdapter

        known = set(self.trainer.adapter_names())
        for r in requests:
            if r.adapter is not None and r.adapter not in known:
                raise UnknownAdapter(f"unknown adapter {r.adapter!r}; registered: {sorted(known)}")
        results: list[GenerationResult | None] = [None] * len(requests)
        accepted = []
        for i, r in enumerate(requests):
            ids = self.trainer.encode(r.prompt)
            if len(ids) > self.config.max_prompt_tokens:
                results[i] = GenerationResult(ids, [], refused=f"{PROMPT_TOO_LONG}:{len(ids)}")
            else:
                accepted.append(i)
        if accepted:
            self.publish_pending()
            served = self.engine.generate([_indexed(requests[i], i) for i in accepted], sampling)
            for i, res in zip(accepted, served):
                results[i] = res
        return [r for r in results if r is not None]

    # -- training: the trainer ------------------------------------------------------------------
    def completion_logprobs(self, adapter, prompt_ids, completion_ids, *, with_grad=True,
                            with_entropy=False) -> TokenLogprobs:
        self.engine.sleep()
        return self.trainer.completion_logprobs(adapter, prompt_ids, completion_ids, with_grad=with_grad,
                                                with_entropy=with_entropy)

    def trainable_parameters(self, adapter: str) -> list[torch.nn.Parameter]:
        return self.trainer.trainable_parameters(adapter)

    def optimizer_step(self, adapter: str, loss: torch.Tensor | None, *, max_grad_norm: float | None = None) -> float:
        norm = self.trainer.optimizer_step(adapter, loss, max_grad_norm=max_grad_norm)
        self._dirty.add(adapter)
        return norm

    def discard_gradients(self, adapter: str) -> None:
        self.trainer.discard_gradients(adapter)

    def optimizer_state(self, adapter: str) -> dict:
        return self.trainer.optimizer_state(adapter)

    def load_optimizer_state(self, adapter: str, state: dict) -> None:
        self.trainer.load_optimizer_state(adapter, state)

    def reset_optimizer(self, adapter: str) -> None:
        self.trainer.reset_optimizer(adapter)

    def set_learning_rate(self, adapter: str, lr: float) -> None:
        self.trainer.set_learning_rate(adapter, lr)

    def __getattr__(self, name: str) -> Any:
        # trainer attributes the tests and benchmarks read (``base``, ``device``, ``eos_ids``, ...)
        if name in ("trainer", "engine", "config"):
            raise AttributeError(name)
        return getattr(self.trainer, name)

    def close(self) -> None:
        self.engine.close()
        self.trainer.close()


def _indexed(request: GenerationRequest, position: int) -> GenerationRequest:
    """The request with its seeding index fixed to its position in the caller's call (so refusing
    another request does not change its samples)."""
    if request.index is not None:
        return request
    return GenerationRequest(request.prompt, request.adapter, position)
