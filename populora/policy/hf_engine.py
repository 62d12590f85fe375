"""``policy.engine: hf``: generation by the trainer's own peft model (``HFBackend.generate``).

The trainer's adapters ARE the weights it generates with, so publishing copies nothing
(``shares_trainer_weights``); a mixed-adapter batch runs in one decode loop (see ``decode.py``).
Works on CPU and GPU; on a GPU, vLLM (``vllm_engine.py``) is much faster at long generations.

Memory plan: the KV cache of one decode micro-batch (``policy.max_batch_size`` rows) at full length
plus its prefill working set and a stacked copy of every adapter's LoRA weights (``multi_lora.py``),
during generation only (nothing stays while the trainer runs).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from populora.policy.adapters import AdapterWeights
from populora.policy.base import GenerationRequest, GenerationResult, SamplingParams
from populora.policy.engine import EngineContext, GenerationEngine, register_engine
from populora.policy.engine_memory import EngineMemory

if TYPE_CHECKING:  # config.py imports this module
    from populora.policy.config import PolicyConfig


@register_engine("hf")
class HFEngine(GenerationEngine):
    summary = "transformers + peft: the trainer's own decode loop with mixed-adapter batches, CPU or GPU"
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

    @classmethod
    def plan_memory(cls, inputs, gpu_gib: float) -> EngineMemory:
        """KV cache of one decode micro-batch at full length + its prefill working set: the MLP's
        intermediate and the hidden states of every prompt token, and three float32 rows of logits."""
        p, rows, s = inputs, inputs.policy.max_batch_size, inputs.shape
        tokens = p.prompt_tokens + p.new_tokens
        kv = rows * tokens * p.kv_bytes_per_token
        prefill = rows * p.prompt_tokens * (2 * s.intermediate + 4 * s.hidden) * p.d + rows * s.vocab * 4 * 3
        # multi_lora.py stacks every served adapter's LoRA weights once per generate call (kept between
        # calls, dropped when a training pass starts)
        stacks = p.adapters * p.adapter_params * p.ad
        return EngineMemory(
            awake=kv + prefill + stacks, training=0.0,
            details={"kv_cache_tokens": rows * tokens, "stacked_adapters_bytes": stacks},
            what=f"HF decode of {rows} rows x {tokens} tokens: KV cache + prefill + the adapters stacked for the "
                 "multi-adapter product (generation phase only)")
