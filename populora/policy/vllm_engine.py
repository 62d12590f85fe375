"""``policy.engine: vllm``: vLLM multi-LoRA generation on the trainer's GPU.

One ``vllm.LLM(enable_lora=True, max_loras>=N, max_lora_rank=r)`` engine; every request carries the
``LoRARequest`` of its adapter's current published version, and all requests of a call go into ONE
``LLM.generate``, which vLLM schedules as mixed-adapter batches.

Publishing: vLLM caches adapters by integer id and by name, so every new version of an adapter gets a
new directory, name and id (``lora_registry.py``), written in the engine's dtype (bf16 by default:
half the bytes of the trainer's fp32 master weights, and what vLLM computes in anyway).

Versions (``vllm_api.py``): engine arguments are checked against the installed vLLM's ``EngineArgs``;
an option the installed vLLM lacks is an error naming the option when it was asked for
(``policy.vllm.sleep_between_phases``), and is left out when it only selects vLLM's default
(``logprobs_mode="raw_logprobs"``). ``data/vllm_api.json`` records the surface of each release and a
test checks every keyword used here against every supported release.

Memory: vLLM takes ``policy.vllm.gpu_memory_utilization`` of the GPU at start; with the trainer
already resident that share must be free, or the engine cannot start: the engine checks it first and
names the largest value that fits. Sleep mode (``sleep_between_phases``) offloads the engine's
weights and drops its KV cache while the trainer runs; the trainer's cached blocks are released
(``torch.cuda.empty_cache``) before the engine wakes up, so that it can take its memory back.

Sampling seeds: ``policy.vllm.seeded_sampling`` gives each request its own seed (reproducible
rollouts for a given batch) at the price of vLLM's per-request sampling path, which is slower than its
batched sampler; off by default (vLLM's rollouts are not batch-invariant anyway, so a seed does not
make a resumed or re-sharded run repeat itself on GPU).

vLLM is imported only when the engine is built, so this module imports without it.
"""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Sequence
from pathlib import Path

import torch

from populora.policy.adapters import AdapterWeights
from populora.policy.base import Completion, GenerationRequest, GenerationResult, SamplingParams
from populora.policy.config import PolicyConfig
from populora.policy.engine import GenerationEngine, register_engine
from populora.policy.lora_registry import LoraRegistry, PublishedAdapter, sampling_seeds

INSTALL_HINT = "pip install 'populora[vllm]' (needs a CUDA GPU)"
DEFAULT_NEW_TOKENS = 4096  # for max_model_len when nothing says how long completions may be
FINISH_REASONS = {"stop": "stop", "length": "length"}  # anything else ("abort", None) is "abort"


class VLLMEngineError(RuntimeError):
    """The installed vLLM or the GPU cannot do what the config asks; the message names the option."""


def _import_vllm():
    try:
        import vllm
    except ImportError as e:
        raise ImportError(f"policy.engine=vllm needs vLLM: {INSTALL_HINT}") from e
    return vllm


def check_config(config: PolicyConfig) -> None:
    """What the vLLM engine needs of a config, checked when the config loads (no vLLM, no GPU needed):
    a LoRA rank every supported vLLM release serves."""
    from populora.policy.config import PolicyConfigError
    from populora.policy.vllm_api import supported_lora_ranks

    ranks = supported_lora_ranks()
    if config.lora.rank not in ranks:
        raise PolicyConfigError(f"policy.lora.rank must be one vLLM serves {ranks} with policy.engine=vllm, "
                                f"got {config.lora.rank}")


def engine_kwargs(config: PolicyConfig, max_loras: int, max_model_len: int, available: set[str],
                  version: str = "installed") -> dict:
    """Keyword arguments of ``vllm.LLM`` for ``config``, checked against ``available`` (the names the
    installed vLLM's ``LLM`` / ``EngineArgs`` take). Pure: tested against every release in the table."""
    v = config.vllm
    from populora.policy.models import resolve_model

    kwargs = dict(
        model=resolve_model(config.model),
        tokenizer=resolve_model(config.model),
        dtype=config.dtype if config.dtype != "auto" else "bfloat16",
        enable_lora=True,
        max_loras=max_loras,
        max_lora_rank=config.lora.rank,
        max_cpu_loras=v.max_cpu_loras or 2 * max_loras,
        gpu_memory_utilization=v.gpu_memory_utilization,
        max_model_len=max_model_len,
        enforce_eager=v.enforce_eager,
        seed=0,  # the engine's own generator; requests carry their seeds when seeded_sampling is on
    )
    if v.sleep_between_phases:
        kwargs["enable_sleep_mode"] = True
    if "logprobs_mode" in available:
        kwargs["logprobs_mode"] = "raw_logprobs"  # same quantity as HFBackend / completion_logprobs
    missing = sorted(k for k in kwargs if k not in available)
    if missing:
        option = {"enable_sleep_mode": "policy.vllm.sleep_between_phases"}.get(missing[0], missing[0])
        raise VLLMEngineError(f"vLLM {version} does not take {missing}: turn off {option} or install vLLM "
                              f">= the version docs/backends.md names")
    return kwargs


def engine_dtype(config: PolicyConfig) -> torch.dtype:
    return {"float32": torch.float32, "float16": torch.float16}.get(config.dtype, torch.bfloat16)


@register_engine("vllm")
class VLLMEngine(GenerationEngine):
    """vLLM multi-LoRA generation; see the module docstring."""

    def __init__(self, config: PolicyConfig, trainer, max_new_tokens: int | None = None) -> None:
        _import_vllm()  # fail early, before anything else is loaded
        if not torch.cuda.is_available():
            raise RuntimeError("policy.engine=vllm needs a CUDA GPU; use policy.engine=hf on CPU")
        self.config, self.trainer = config, trainer
        v = config.vllm
        root = Path(v.adapter_dir) if v.adapter_dir else Path(tempfile.mkdtemp(prefix="populora-lora-"))
        self.registry = LoraRegistry(root, base_model_name=config.model)
        self.max_model_len = v.max_model_len or config.max_prompt_tokens + (max_new_tokens or DEFAULT_NEW_TOKENS)
        self._llm = None  # created at the first generate, when the population size is known
        self._asleep = False

    @property
    def llm(self):
        """The engine; ``max_loras`` = ``policy.vllm.max_loras`` or the number of adapters at creation
        (a population keeps its size: evolution replaces members)."""
        if self._llm is None:
            vllm = _import_vllm()
            from vllm.engine.arg_utils import EngineArgs

            available = {f.name for f in dataclasses.fields(EngineArgs)}
            max_loras = self.config.vllm.max_loras or max(1, len(self.trainer.adapter_names()))
            kwargs = engine_kwargs(self.config, max_loras, self.max_model_len, available, vllm.__version__)
            self._check_free_memory(kwargs["gpu_memory_utilization"])
            self._llm = vllm.LLM(**kwargs)
        return self._llm

    @staticmethod
    def _check_free_memory(utilization: float) -> None:
        """vLLM refuses to start when less than ``utilization`` of the GPU is free; say so first, with
        the largest value that fits next to what this process (the trainer) already holds."""
        free, total = torch.cuda.mem_get_info()
        if free < utilization * total:
            raise VLLMEngineError(
                f"policy.vllm.gpu_memory_utilization={utilization} asks vLLM for {utilization * total / 2**30:.1f} GiB "
                f"but only {free / 2**30:.1f} GiB of {total / 2**30:.1f} GiB are free (the trainer is resident); "
                f"set it to at most {int(free / total * 100) / 100:.2f}, or shrink the trainer (see `populora plan`)")

    # -- adapters -----------------------------------------------------------------------------------
    def publish(self, name: str, weights: AdapterWeights) -> None:
        new, old = self.registry.publish(name, weights.to(engine_dtype(self.config)))
        if old is not None:
            self._unload(old)

    def retire(self, name: str) -> None:
        if name in self.registry:
            self._unload(self.registry.retire(name))

    def _unload(self, adapter: PublishedAdapter) -> None:
        """Drop a retired version from the engine's LoRA cache and delete its files."""
        if self._llm is not None:
            try:
                self._llm.llm_engine.remove_lora(adapter.lora_int_id)
            except (KeyError, ValueError, AttributeError):
                pass  # never loaded (no request used it) or already evicted by vLLM's LRU cache
        self.registry.delete_files(adapter)

    # -- generation ---------------------------------------------------------------------------------
    def sleep(self) -> None:
        """Free the engine's GPU memory for training (only with policy.vllm.sleep_between_phases)."""
        if self.config.vllm.sleep_between_phases and self._llm is not None and not self._asleep:
            self._llm.sleep(level=1)
            self._asleep = True

    def _wake(self) -> None:
        if self._asleep:
            torch.cuda.empty_cache()  # give back the trainer's cached blocks before vLLM re-allocates
            self._llm.wake_up()
            self._asleep = False

    def generate(self, requests: Sequence[GenerationRequest], sampling: SamplingParams) -> list[GenerationResult]:
        from vllm import SamplingParams as VSamplingParams
        from vllm.inputs import TokensPrompt
        from vllm.lora.request import LoRARequest

        if self.config.max_prompt_tokens + sampling.max_new_tokens > self.max_model_len:
            raise VLLMEngineError(
                f"max_new_tokens={sampling.max_new_tokens} + policy.max_prompt_tokens={self.config.max_prompt_tokens} "
                f"exceed the engine's max_model_len={self.max_model_len} (policy.vllm.max_model_len)")
        self._wake()
        prompts = [self.trainer.encode(r.prompt) for r in requests]
        indices = [i if r.index is None else r.index for i, r in enumerate(requests)]
        seeds = sampling_seeds(sampling.seed if self.config.vllm.seeded_sampling else None, indices)
        params = [VSamplingParams(n=sampling.n, temperature=sampling.temperature, top_p=sampling.top_p,
                                  max_tokens=sampling.max_new_tokens, stop=list(sampling.stop) or None, seed=s,
                                  logprobs=0)  # the sampled token's logprob only
                  for s in seeds]
        loras = [None if p is None else LoRARequest(p.lora_name, p.lora_int_id, str(p.path))
                 for p in self.registry.route([r.adapter for r in requests])]
        outputs = self.llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], sampling_params=params,
                                    lora_request=loras, use_tqdm=False)
        results = []
        for prompt, out in zip(prompts, outputs):
            comps = []
            for o in sorted(out.outputs, key=lambda o: o.index):
                lps = [step[tok].logprob for tok, step in zip(o.token_ids, o.logprobs or [])]
                comps.append(Completion(list(o.token_ids), o.text, lps, FINISH_REASONS.get(o.finish_reason, "abort")))
            results.append(GenerationResult(prompt_token_ids=list(prompt), completions=comps))
        return results

    def close(self) -> None:
        self._llm = None
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
