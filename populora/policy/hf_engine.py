"""``policy.engine: hf``: generation by the trainer's own peft model (``HFBackend.generate``).

The trainer's adapters ARE the weights it generates with, so publishing copies nothing
(``shares_trainer_weights``); a mixed-adapter batch runs in one decode loop (see ``decode.py``).
Works on CPU and GPU; on a GPU, vLLM (``vllm_engine.py``) is much faster at long generations.
"""

from __future__ import annotations

from collections.abc import Sequence

from populora.policy.adapters import AdapterWeights
from populora.policy.base import GenerationRequest, GenerationResult, SamplingParams
from populora.policy.config import PolicyConfig
from populora.policy.engine import EngineContext, GenerationEngine, register_engine


@register_engine("hf")
class HFEngine(GenerationEngine):
    shares_trainer_weights = True

    def __init__(self, config: PolicyConfig, trainer, max_new_tokens: int | None = None,
                 context: EngineContext | None = None) -> None:
        self.trainer = trainer  # sampling is seeded per request (decode.py): no stream of its own

    def publish(self, name: str, weights: AdapterWeights) -> None:
        """Nothing to do: the trainer's live weights are served."""

    def retire(self, name: str) -> None:
        """Nothing to do: the trainer forgot the adapter."""

    def generate(self, requests: Sequence[GenerationRequest], sampling: SamplingParams) -> list[GenerationResult]:
        return self.trainer.generate(requests, sampling)
