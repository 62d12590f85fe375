"""The backend interface: one frozen base model, many named LoRA adapters.

The implementation is ``populora.policy.backend.Policy``: an ``HFBackend`` trainer (transformers +
peft; CPU float32 or CUDA bf16; it can also generate) composed with a generation engine (``hf``: the
trainer's own decode loop; ``vllm``: vLLM multi-LoRA generation on the same GPU). The training loop, the evaluation suite and the benchmarks talk
only to this interface.

Generation: one ``generate`` call serves requests for many adapters at once (a mixed-adapter
batch); each request names its adapter (``None`` = the bare base model).

Training: ``completion_logprobs`` gives per-token log-probabilities of given completions under one
adapter with gradients flowing into that adapter only; ``optimizer_step`` applies the gradients to
that adapter with its own AdamW state.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from populora.policy.adapters import AdapterWeights


@dataclass(frozen=True)
class SamplingParams:
    """Decoding settings shared by all requests of one ``generate`` call.

    ``temperature == 0`` means greedy. ``seed`` makes sampling reproducible for a given batch.
    ``stop`` strings end a completion; the stop string itself is not part of the returned text.
    """

    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 256
    stop: tuple[str, ...] = ()
    n: int = 1
    seed: int | None = None

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ValueError(f"sampling.temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"sampling.top_p must be in (0, 1], got {self.top_p}")
        if self.max_new_tokens < 1:
            raise ValueError(f"sampling.max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.n < 1:
            raise ValueError(f"sampling.n must be >= 1, got {self.n}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


@dataclass(frozen=True)
class GenerationRequest:
    """One prompt (already formatted text) for one adapter (``None`` = base model).

    ``index``: the request's position in the caller's whole list of requests. With a seeded
    ``SamplingParams`` it decides the request's sampling seed (default: its position in this call),
    so a request's completions are the same whichever other requests share the call, e.g. when the
    requests of a step are split over several ranks.
    """

    prompt: str
    adapter: str | None = None
    index: int | None = None


@dataclass
class Completion:
    """One sampled continuation: token ids, text, logprob of each sampled token, why it ended."""

    token_ids: list[int]
    text: str
    logprobs: list[float]
    finish_reason: str  # "stop" (EOS or stop string), "length", or "abort" (the engine gave up on it)


@dataclass
class GenerationResult:
    """The ``n`` completions of one request, in request order. ``refused`` says why a request got no
    completion at all (``prompt_too_long:<tokens>``); such a request costs nothing and trains nothing."""

    prompt_token_ids: list[int]
    completions: list[Completion] = field(default_factory=list)
    refused: str | None = None


@dataclass
class TokenLogprobs:
    """Per-token log-probabilities of a batch of completions under one adapter.

    ``logprobs[i, t]`` is log p(completion_i[t] | prompt_i, completion_i[:t]); positions where
    ``mask`` is False are padding. ``entropy`` (same shape) is filled when asked for.
    """

    logprobs: torch.Tensor  # [B, T] float32
    mask: torch.Tensor  # [B, T] bool
    entropy: torch.Tensor | None = None


class UnknownAdapter(KeyError):
    """A request or call names an adapter that is not registered."""

    def __str__(self) -> str:
        return str(self.args[0])


class PolicyBackend(ABC):
    """One frozen base + named LoRA adapters. See the module docstring."""

    #: a ``transformers`` tokenizer for the base model
    tokenizer: Any

    # -- adapters ---------------------------------------------------------------------------
    @abstractmethod
    def add_adapter(self, name: str, weights: AdapterWeights) -> None:
        """Register a new adapter under ``name`` (error if the name exists)."""

    @abstractmethod
    def remove_adapter(self, name: str) -> None:
        """Forget an adapter and its optimizer state."""

    @abstractmethod
    def get_weights(self, name: str) -> AdapterWeights:
        """A detached copy of the adapter's current weights."""

    @abstractmethod
    def set_weights(self, name: str, weights: AdapterWeights) -> None:
        """Overwrite an adapter's weights in place (same rank and modules)."""

    @abstractmethod
    def adapter_names(self) -> list[str]:
        """Names of the registered adapters."""

    @abstractmethod
    def module_shapes(self) -> dict[str, tuple[int, int]]:
        """``{module path: (in_features, out_features)}`` of the LoRA target modules of the base."""

    # -- generation -------------------------------------------------------------------------
    @abstractmethod
    def generate(self, requests: Sequence[GenerationRequest], sampling: SamplingParams) -> list[GenerationResult]:
        """Generate for every request in as few batched passes as possible (mixed adapters)."""

    # -- training ---------------------------------------------------------------------------
    @abstractmethod
    def completion_logprobs(
        self,
        adapter: str,
        prompt_ids: Sequence[Sequence[int]],
        completion_ids: Sequence[Sequence[int]],
        *,
        with_grad: bool = True,
        with_entropy: bool = False,
    ) -> TokenLogprobs:
        """Log-probabilities of completions under ``adapter`` (``None``-free: an adapter is required).

        With ``with_grad`` the result is differentiable with respect to that adapter's LoRA
        parameters only; the base and all other adapters receive no gradient.
        """

    def fused_logprobs(
        self,
        adapters: Sequence[str],
        prompt_ids: Sequence[Sequence[int]],
        completion_ids: Sequence[Sequence[int]],
        *,
        with_entropy: bool = False,
    ) -> TokenLogprobs:
        """Like ``completion_logprobs`` with gradients, but row ``i`` runs under ``adapters[i]``: rows of
        several adapters in one pass, each adapter receiving only its own rows' gradient (the fused
        update, ``rl.update_strategy: fused``). Optional: a backend without it trains sequentially."""
        raise NotImplementedError(f"{type(self).__name__} has no fused pass (fused_logprobs); "
                                  "set rl.update_strategy=sequential")

    @abstractmethod
    def trainable_parameters(self, adapter: str) -> list[torch.nn.Parameter]:
        """The adapter's LoRA parameters (A and B of each module, in a fixed order): what its optimizer
        steps and what ranks sharing a member sum gradients of."""

    @abstractmethod
    def optimizer_step(self, adapter: str, loss: torch.Tensor, *, max_grad_norm: float | None = None) -> float:
        """Backward ``loss``, clip, and take one AdamW step on ``adapter``; returns the grad norm."""

    @abstractmethod
    def discard_gradients(self, adapter: str) -> None:
        """Drop the gradients accumulated for ``adapter`` without a step (e.g. after a non-finite loss)."""

    @abstractmethod
    def optimizer_state(self, adapter: str) -> dict:
        """The adapter's optimizer state (for checkpoints)."""

    @abstractmethod
    def load_optimizer_state(self, adapter: str, state: dict) -> None:
        """Restore an optimizer state saved by ``optimizer_state``."""

    @abstractmethod
    def reset_optimizer(self, adapter: str) -> None:
        """Fresh optimizer state (e.g. for an evolved child)."""

    # -- convenience --------------------------------------------------------------------------
    def encode(self, text: str) -> list[int]:
        """Token ids of a fully formatted prompt, as ``generate`` tokenizes it (no special tokens added)."""
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def replace_adapter(self, old: str, new: str, weights: AdapterWeights) -> None:
        """``new`` takes ``old``'s place with ``weights`` and a fresh optimizer state; ``old`` is forgotten
        (an evolved child replacing a member). A backend whose adapters can change places more cheaply
        than a removal and an addition overrides it."""
        self.remove_adapter(old)
        self.add_adapter(new, weights)

    def keep_masters_on_host(self, names) -> None:  # noqa: B027 - optional hook
        """Where the weights of adapters this rank does not train may live (a backend with float32 master
        weights keeps those of ``names`` in host memory); default: nothing to move."""

    def rename_adapter(self, old: str, new: str) -> None:
        """Move an adapter (weights and optimizer state) to a new name."""
        weights = self.get_weights(old)
        state = self.optimizer_state(old)
        self.remove_adapter(old)
        self.add_adapter(new, weights)
        self.load_optimizer_state(new, state)

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release engines and memory."""
