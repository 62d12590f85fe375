"""``VLLMBackend``: vLLM multi-LoRA generation + an ``HFBackend`` trainer on the same GPU.

Generation: one ``vllm.LLM(enable_lora=True, max_loras>=N, max_lora_rank=r)`` engine; every
request carries the ``LoRARequest`` of its member's current published version, and all members'
requests go into ONE ``LLM.generate`` call, which vLLM schedules as mixed-adapter batches.

Training: delegated to an ``HFBackend`` holding its own copy of the base on the same device (the
source of truth for adapter weights and optimizer states). Weights changed by ``optimizer_step``
or ``set_weights`` are published lazily, right before the next ``generate``: a new PEFT directory,
a new name and a new integer id (see ``lora_registry.py`` for why both must be new).

Memory plan (7B base on one 80 GB GPU; see docs/backends.md): vLLM takes
``policy.vllm.gpu_memory_utilization`` of the GPU for its weights, LoRA slots and KV cache; the trainer
uses the rest. With ``policy.vllm.sleep_between_phases`` the engine sleeps (level 1: weights offloaded
to CPU memory, KV cache dropped) during training and wakes up for generation.

vLLM is imported only when the backend is constructed, so this module imports without it.
"""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Sequence
from pathlib import Path

import torch

from populora.policy.adapters import AdapterWeights
from populora.policy.base import (
    Completion,
    GenerationRequest,
    GenerationResult,
    PolicyBackend,
    SamplingParams,
    TokenLogprobs,
)
from populora.policy.config import PolicyConfig
from populora.policy.hf import HFBackend
from populora.policy.lora_registry import LoraRegistry, PublishedAdapter, sampling_seeds

INSTALL_HINT = "pip install 'populora[vllm]' (needs a CUDA GPU)"


def _import_vllm():
    try:
        import vllm
    except ImportError as e:
        raise ImportError(f"policy.engine=vllm needs vLLM: {INSTALL_HINT}") from e
    return vllm


class VLLMBackend(PolicyBackend):
    """vLLM generation for all members at once; HF/peft training. Same interface as HFBackend."""

    def __init__(self, config: PolicyConfig, *, adamw=None, trainer: HFBackend | None = None) -> None:
        _import_vllm()  # fail early, before loading the trainer's copy of the base

        if not torch.cuda.is_available():
            raise RuntimeError("policy.engine=vllm needs a CUDA GPU; use policy.engine=hf on CPU")
        self.config = config
        self.trainer = trainer if trainer is not None else HFBackend(config, adamw=adamw)
        self.tokenizer = self.trainer.tokenizer
        root = Path(config.vllm.adapter_dir) if config.vllm.adapter_dir else Path(tempfile.mkdtemp(prefix="populora-lora-"))
        self.registry = LoraRegistry(root, base_model_name=config.model)
        self._dirty: set[str] = set()
        self._llm = None  # created at the first generate, when the population size is known
        self._asleep = False

    @property
    def llm(self):
        """The vLLM engine; ``max_loras`` = ``policy.vllm.max_loras`` or the number of adapters at creation.

        A population keeps its size (evolution replaces members), so sizing the LoRA slots at
        the first ``generate`` lets every member's requests run in the same batch.
        """
        if self._llm is None:
            vllm = _import_vllm()
            from vllm.engine.arg_utils import EngineArgs

            from populora.policy.models import resolve_model

            config = self.config
            max_loras = config.vllm.max_loras or max(1, len(self.trainer.adapter_names()))
            kwargs = dict(
                model=resolve_model(config.model),
                tokenizer=resolve_model(config.model),
                dtype=config.dtype if config.dtype != "auto" else "bfloat16",
                enable_lora=True,
                max_loras=max_loras,
                max_lora_rank=config.lora.rank,
                max_cpu_loras=config.vllm.max_cpu_loras or 2 * max_loras,
                gpu_memory_utilization=config.vllm.gpu_memory_utilization,
                max_model_len=config.vllm.max_model_len,
                enable_sleep_mode=config.vllm.sleep_between_phases,
                enforce_eager=config.vllm.enforce_eager,
                seed=0,  # sampling is seeded per request (SamplingParams.seed)
            )
            if "logprobs_mode" in {f.name for f in dataclasses.fields(EngineArgs)}:
                kwargs["logprobs_mode"] = "raw_logprobs"  # same quantity as HFBackend / completion_logprobs
            self._llm = vllm.LLM(**kwargs)
        return self._llm

    # -- adapters (the trainer holds the truth; the registry mirrors it for vLLM) --------------
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
        if name in self.registry:
            self._unload(self.registry.retire(name))

    def get_weights(self, name: str) -> AdapterWeights:
        return self.trainer.get_weights(name)

    def set_weights(self, name: str, weights: AdapterWeights) -> None:
        self.trainer.set_weights(name, weights)
        self._dirty.add(name)

    def _unload(self, adapter: PublishedAdapter) -> None:
        """Drop a retired version from the engine's LoRA cache and delete its files."""
        if self._llm is not None:
            try:
                self._llm.llm_engine.remove_lora(adapter.lora_int_id)
            except (KeyError, ValueError, AttributeError):
                pass  # never loaded (no request used it) or already evicted by vLLM's LRU cache
        self.registry.delete_files(adapter)

    def publish_pending(self) -> list[PublishedAdapter]:
        """Publish every adapter changed since the last generate as a new version."""
        published = []
        for name in sorted(self._dirty):
            new, old = self.registry.publish(name, self.trainer.get_weights(name))
            if old is not None:
                self._unload(old)
            published.append(new)
        self._dirty.clear()
        return published

    # -- generation -------------------------------------------------------------------------
    def _wake(self) -> None:
        if self._asleep:
            self._llm.wake_up()
            self._asleep = False

    def sleep(self) -> None:
        """Free the engine's GPU memory for training (only with policy.vllm.sleep_between_phases)."""
        if self.config.vllm.sleep_between_phases and self._llm is not None and not self._asleep:
            self._llm.sleep(level=1)
            self._asleep = True

    def generate(self, requests: Sequence[GenerationRequest], sampling: SamplingParams) -> list[GenerationResult]:
        from vllm import SamplingParams as VSamplingParams
        from vllm.inputs import TokensPrompt
        from vllm.lora.request import LoRARequest

        for r in requests:
            if r.adapter is not None and r.adapter not in self.trainer.adapter_names():
                raise KeyError(f"unknown adapter {r.adapter!r}; registered: {sorted(self.trainer.adapter_names())}")
        self._wake()
        self.publish_pending()
        prompts = [self.trainer.encode(r.prompt) for r in requests]
        params = [
            VSamplingParams(
                n=sampling.n,
                temperature=sampling.temperature,
                top_p=sampling.top_p,
                max_tokens=sampling.max_new_tokens,
                stop=list(sampling.stop) or None,
                seed=s,
                logprobs=0,  # the sampled token's logprob only
            )
            for s in sampling_seeds(sampling.seed, [i if r.index is None else r.index for i, r in enumerate(requests)])
        ]
        loras = [
            None if p is None else LoRARequest(p.lora_name, p.lora_int_id, str(p.path))
            for p in self.registry.route([r.adapter for r in requests])
        ]
        outputs = self.llm.generate(
            [TokensPrompt(prompt_token_ids=p) for p in prompts], sampling_params=params, lora_request=loras, use_tqdm=False
        )
        results = []
        for prompt, out in zip(prompts, outputs):
            comps = []
            for o in sorted(out.outputs, key=lambda o: o.index):
                lps = [step[tok].logprob for tok, step in zip(o.token_ids, o.logprobs or [])]
                comps.append(Completion(list(o.token_ids), o.text, lps, "stop" if o.finish_reason == "stop" else "length"))
            results.append(GenerationResult(prompt_token_ids=list(prompt), completions=comps))
        return results

    # -- training: the HF trainer ----------------------------------------------------------------
    def completion_logprobs(self, adapter, prompt_ids, completion_ids, *, with_grad=True, with_entropy=False) -> TokenLogprobs:
        self.sleep()
        return self.trainer.completion_logprobs(
            adapter, prompt_ids, completion_ids, with_grad=with_grad, with_entropy=with_entropy
        )

    def optimizer_step(self, adapter: str, loss: torch.Tensor | None, *, max_grad_norm: float | None = None) -> float:
        norm = self.trainer.optimizer_step(adapter, loss, max_grad_norm=max_grad_norm)
        self._dirty.add(adapter)
        return norm

    def discard_gradients(self, adapter: str) -> None:
        self.trainer.discard_gradients(adapter)

    def optimizer_state(self, adapter: str) -> dict:
        return self.trainer.optimizer_state(adapter)

    def trainable_parameters(self, adapter: str) -> list[torch.nn.Parameter]:
        return self.trainer.trainable_parameters(adapter)

    def load_optimizer_state(self, adapter: str, state: dict) -> None:
        self.trainer.load_optimizer_state(adapter, state)

    def reset_optimizer(self, adapter: str) -> None:
        self.trainer.reset_optimizer(adapter)

    def set_learning_rate(self, adapter: str, lr: float) -> None:
        self.trainer.set_learning_rate(adapter, lr)

    def close(self) -> None:
        self.trainer.close()
        self._llm = None
        torch.cuda.empty_cache()
