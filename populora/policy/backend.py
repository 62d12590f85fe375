"""The policy a rank runs: one trainer + one generation engine (``Policy``).

``Policy`` composes the trainer (``HFBackend``: adapters, log-probabilities, optimizers; the source of
truth for weights) with an engine (``engine.py``), and is the ``PolicyBackend`` the loop and the
evaluation talk to: every change of an adapter's weights marks it for publishing, and the engine
receives the changed adapters right before its next ``generate``; an engine that can free its GPU
memory is put to sleep before the trainer's first forward of a phase. Requests whose prompt is longer
than ``policy.max_prompt_tokens`` are refused one by one (``GenerationResult.refused``), never failing
the batch. ``populora.policy.make_backend`` builds it.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from populora.policy.adapters import AdapterWeights
from populora.policy.base import (
    GenerationRequest,
    GenerationResult,
    PolicyBackend,
    SamplingParams,
    TokenLogprobs,
    UnknownAdapter,
)
from populora.policy.config import PolicyConfig
from populora.policy.engine import PROMPT_TOO_LONG, GenerationEngine


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

    def fused_logprobs(self, adapters, prompt_ids, completion_ids, *, with_entropy=False) -> TokenLogprobs:
        self.engine.sleep()
        return self.trainer.fused_logprobs(adapters, prompt_ids, completion_ids, with_entropy=with_entropy)

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

    # -- what callers read of the trainer (anything else: ``policy.trainer.<x>``) ------------------
    @property
    def device(self) -> torch.device:
        """The trainer's device (where its base and adapters are)."""
        return self.trainer.device

    @property
    def base(self) -> torch.nn.Module:
        """The trainer's frozen base model."""
        return self.trainer.base

    def close(self) -> None:
        self.engine.close()
        self.trainer.close()


def _indexed(request: GenerationRequest, position: int) -> GenerationRequest:
    """The request with its seeding index fixed to its position in the caller's call (so refusing
    another request does not change its samples)."""
    if request.index is not None:
        return request
    return GenerationRequest(request.prompt, request.adapter, position)
