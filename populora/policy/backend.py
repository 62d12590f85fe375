"""The policy a rank runs: one trainer + one generation engine (``Policy``).

``Policy`` composes the trainer (``HFBackend``: adapters, log-probabilities, optimizers; the source of
truth for weights) with an engine (``engine.py``), and is the ``PolicyBackend`` the loop and the
evaluation talk to: every change of an adapter's weights marks it for publishing, and the engine
receives the changed adapters right before its next ``generate``; an engine that can free its GPU
memory is put to sleep before the trainer's first forward of a phase. Requests whose prompt is longer
than ``policy.max_prompt_tokens`` are refused one by one (``GenerationResult.refused``), never failing
the batch. ``populora.policy.make_backend`` builds it.

Publishing is a phase with a cost (``publish``): the step loop calls it once the step's weights are final,
it is timed, and every ``policy.publish_check_every`` steps it is checked: a few fixed token sequences
(``check_sequences``) are scored under every adapter by the trainer and by the engine
(``GenerationEngine.score``), and a mean difference above the engine's tolerance is a ``ServedMismatch``
naming the member, the step and the difference (the run stops; the last checkpoint is intact). It is
what catches an engine that silently serves other weights than the trainer's: a stale version, an
adapter applied twice, another member's weights.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field

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
from populora.policy.engine import PROMPT_TOO_LONG, GenerationEngine, ServedMismatch

CHECK_PROMPT_TOKENS = 8  # ours: a short prompt before each check completion (any length would do)


@dataclass
class PublishReport:
    """One publish: the adapters sent to the engine and, when checked, each checked adapter's mean absolute
    log-probability difference (engine vs trainer, nats per token)."""

    published: list[str] = field(default_factory=list)
    differences: dict[str, float] = field(default_factory=dict)

    def metrics(self) -> dict[str, float]:
        out = {"publish/adapters": float(len(self.published))}
        if self.differences:
            out["publish/check_max_diff"] = max(self.differences.values())
        return out


def check_sequences(vocab_size: int, sequences: int, tokens: int, seed: int = 0) -> tuple[list[list[int]], list[list[int]]]:
    """``(prompts, completions)``: the fixed token sequences of the publish check (random ids from a
    seeded generator, the same for every adapter and every check; ids below 10 skipped: special tokens)."""
    rng = random.Random(seed)
    prompts = [[rng.randrange(10, vocab_size) for _ in range(CHECK_PROMPT_TOKENS)] for _ in range(sequences)]
    completions = [[rng.randrange(10, vocab_size) for _ in range(tokens)] for _ in range(sequences)]
    return prompts, completions


def time_publish(policy: Policy, names: Sequence[str]) -> float:
    """Seconds of one publish of ``names`` (each marked changed, then ``policy.publish()``: written and, on
    vLLM, loaded by the engine; next to nothing for an engine that serves the trainer's own weights)."""
    import time

    for name in names:
        policy.set_weights(name, policy.get_weights(name))
    t0 = time.perf_counter()
    policy.publish()
    return time.perf_counter() - t0


def mean_difference(trainer: torch.Tensor, mask: torch.Tensor, served: Sequence[Sequence[float]]) -> float:
    """Mean absolute difference per token between the trainer's ``[B, T]`` log-probabilities (valid where
    ``mask``) and the engine's per-completion lists."""
    total, count = 0.0, 0
    for i, row in enumerate(served):
        mine = trainer[i][mask[i]].double().cpu()
        if len(row) != len(mine):
            return float("inf")  # the engine scored other tokens: as wrong as it gets
        total += float((mine - torch.tensor(row, dtype=torch.float64)).abs().sum())
        count += len(row)
    return total / max(1, count)


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

    def replace_adapter(self, old: str, new: str, weights: AdapterWeights) -> None:
        self.trainer.replace_adapter(old, new, weights)
        self._dirty.discard(old)
        self._dirty.add(new)
        self.engine.retire(old)

    def keep_masters_on_host(self, names) -> None:
        self.trainer.keep_masters_on_host(names)

    def get_weights(self, name: str) -> AdapterWeights:
        return self.trainer.get_weights(name)

    def set_weights(self, name: str, weights: AdapterWeights) -> None:
        self.trainer.set_weights(name, weights)
        self._dirty.add(name)

    def publish_pending(self) -> list[str]:
        """Send every adapter changed since the last publish to the engine; returns their names."""
        names = sorted(self._dirty)
        if not self.engine.shares_trainer_weights and names:
            self.engine.publish_many([(name, self.trainer.get_weights(name)) for name in names])
        self._dirty.clear()
        return names

    def publish(self) -> PublishReport:
        """The publish phase: every adapter changed since the last publish goes to the engine."""
        return PublishReport(self.publish_pending())

    def check_due(self, step: int | None) -> bool:
        """Whether the publish of ``step`` is checked (``policy.publish_check_every``; 0 = never)."""
        every = self.config.publish_check_every
        return bool(every) and (step is None or step % every == 0)

    def check_served(self, names: Sequence[str], step: int | None = None) -> dict[str, float]:
        """Each adapter's mean absolute difference between the engine's and the trainer's log-probabilities
        of the check sequences; raises ``ServedMismatch`` at the first one above the engine's tolerance.
        Empty when the engine serves the trainer's own weights (nothing to compare)."""
        if self.engine.shares_trainer_weights:
            return {}
        self.publish_pending()  # nothing is compared against a version the engine never got
        c = self.config
        vocab = min(len(self.trainer.tokenizer), self.trainer.base.config.vocab_size)
        prompts, completions = check_sequences(vocab, c.publish_check_sequences, c.publish_check_tokens)
        tolerance = self.engine.tolerance()
        names = list(names)
        k = len(prompts)
        served = self.engine.score([n for n in names for _ in range(k)], prompts * len(names), completions * len(names))
        if served is None:
            return {}
        out: dict[str, float] = {}
        mine = self._trainer_scores(names, prompts, completions)
        for i, name in enumerate(names):
            tl = mine[i]
            out[name] = diff = mean_difference(tl.logprobs, tl.mask, served[i * k:(i + 1) * k])
            if not diff <= tolerance:
                when = f"at step {step}" if step is not None else "after a publish"
                raise ServedMismatch(
                    f"{when}, engine {self.engine.name!r} does not serve member {name!r} as the trainer holds it: its "
                    f"log-probabilities of {k} x {c.publish_check_tokens} check tokens differ from the "
                    f"trainer's by {diff:.3g} nats per token on average (tolerance {tolerance:g})")
        return out

    def _trainer_scores(self, names: list[str], prompts, completions) -> list[TokenLogprobs]:
        """The trainer's log-probabilities of the check sequences under each adapter. With a fused pass, the
        rows of all adapters go through shared passes of ``policy.train_micro_batch`` rows (one adapter at
        a time would switch the trainer's active adapter per member, which costs the trainer a walk over
        every adapter's layers: quadratic in the population); else one ``completion_logprobs`` each."""
        k = len(prompts)
        if not hasattr(self.trainer, "fused_logprobs"):
            return [self.trainer.completion_logprobs(n, prompts, completions, with_grad=False) for n in names]
        rows = [(n, j) for n in names for j in range(k)]
        step = max(self.config.train_micro_batch, k)
        parts = []
        with torch.no_grad():
            for s in range(0, len(rows), step):
                chunk = rows[s:s + step]
                tl = self.trainer.fused_logprobs([n for n, _ in chunk], [prompts[j] for _, j in chunk],
                                                 [completions[j] for _, j in chunk])
                parts += [TokenLogprobs(tl.logprobs[i:i + 1], tl.mask[i:i + 1], None) for i in range(len(chunk))]
        return [TokenLogprobs(torch.cat([p.logprobs for p in parts[i * k:(i + 1) * k]]),
                              torch.cat([p.mask for p in parts[i * k:(i + 1) * k]]), None) for i in range(len(names))]

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
