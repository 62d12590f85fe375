"""The policy layer's configuration: ONE type, ``PolicyConfig``, which is the ``policy:`` section of a
run config, the argument of ``make_backend`` and what ``populora eval`` builds its engine from.

Plain dataclasses usable directly (``PolicyConfig(model="tiny")``) or as omegaconf structured configs
(``populora.config.Config`` embeds ``PolicyConfig``); ``__post_init__`` validates every field and names
the key (``policy.<field>``) and the value in ``PolicyConfigError``. ``PolicyConfig.from_mapping``
accepts a plain dict or an omegaconf node and names unknown keys.

Its keys are the common ones (``PolicyConfigBase``: engine, model, device, ..., ``lora``) and one
section per generation engine with settings of its own, ``policy.<name>:``: that engine's ``Config``
dataclass, declared in its module (``vllm_engine.py: VLLMConfig`` is ``policy.vllm.*``). The type is
built from the engine registry when this module is imported (``_policy_config_type``), so adding an
engine module adds its section; its own cross-key checks run as ``<engine class>.check_config``.

Optimizer settings are not here: they are RL hyper-parameters (``rl.lr``, ``rl.betas``, ...,
``populora.rl.config.RLConfig``); a backend receives them as ``torch.optim.AdamW`` keyword arguments.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields, make_dataclass
from typing import Any

from populora.policy.adapters import ALL_LINEAR
from populora.policy.engine import engine_class, engine_names, engines
from populora.policy.validation import PolicyConfigError, is_int, need

KV_CACHES = ("preallocated", "dynamic")  # policy.kv_cache (kv_cache.py)

__all__ = ["DTYPES", "LoraSpec", "PolicyConfig", "PolicyConfigBase", "PolicyConfigError", "engine_sections"]

DTYPES = ("auto", "float32", "bfloat16", "float16")


@dataclass
class LoraSpec:
    """Shape and initialisation of every adapter of a population (one uniform rank).

    ``init="zeros"`` is peft's default (B = 0: a new member equals the base model);
    ``init="random"`` draws B ~ N(0, b_std^2) so that members differ from step 0.
    """

    rank: int = 32
    alpha: float = 64.0
    target_modules: list[str] = field(default_factory=lambda: list(ALL_LINEAR))
    init: str = "random"
    b_std: float = 1e-3

    def __post_init__(self) -> None:
        self.target_modules = list(self.target_modules)
        need(is_int(self.rank) and self.rank >= 1, "policy.lora.rank", f"must be an integer >= 1, got {self.rank!r}")
        need(math.isfinite(self.alpha) and self.alpha > 0, "policy.lora.alpha", f"must be > 0, got {self.alpha!r}")
        need(self.init in ("zeros", "random"), "policy.lora.init", f"must be 'zeros' or 'random', got {self.init!r}")
        need(bool(self.target_modules), "policy.lora.target_modules", "is empty: name at least one module")
        need(math.isfinite(self.b_std) and self.b_std >= 0, "policy.lora.b_std", f"must be >= 0, got {self.b_std!r}")


@dataclass
class PolicyConfigBase:
    """The frozen base, its adapters and the engine that serves them: the keys every engine shares.

    ``PolicyConfig`` is this class plus one section per engine that has settings of its own
    (``policy.<name>:``, the engine's ``Config``; see ``engine_sections``).

    ``engine``: the generation engine, one of the modules ``populora/policy/<name>_engine.py``
    (``hf``: transformers + peft, generation and training, CPU or GPU; ``vllm``: vLLM multi-LoRA
    generation + an HF trainer on the same GPU; docs/backends.md has the table).
    ``model``: ``tiny``, ``smollm2-135m``, a local directory or a Hugging Face id.
    ``device``/``dtype``: ``auto`` = CUDA bf16 if a GPU is present, else CPU float32.
    ``max_batch_size``: rows (prompts x n) decoded together by the HF engine.
    ``train_micro_batch``: the trainer's memory bound per forward/backward pass, in sequences of the
    longest prompt plus the longest completion (gradients of the micro-batches of one update are
    accumulated: it bounds memory, not the batch).
    ``train_packing``: sort an update's sequences by length and pack each pass up to that bound in
    tokens (``rl/packing.py``: short sequences go many to a pass, long ones share a pass with
    similar lengths); off = ``train_micro_batch`` sequences at a time in batch order. Same gradients
    either way, within float rounding.
    ``gradient_checkpointing``: recompute layer activations in backward (needed at 7B scale).
    ``adapter_dtype``: the LoRA layers' compute dtype; ``auto`` = the base's dtype (bf16 on GPU), so
    a LoRA layer saves no float32 copy of its input for backward. Float32 master weights are kept
    for the optimizer whenever it is below float32 (updates are never rounded to bf16).
    ``logits_chunk``: completion tokens per chunk of the training log-prob tail (vocabulary
    projection, log-softmax, entropy; ``chunked_logprobs.py``): bounds that tail's memory to
    ``logits_chunk x vocab`` floats instead of ``[B, T, vocab]``.
    ``kv_cache``: the HF decode's KV cache: ``preallocated`` (each layer's keys and values written in
    place, ``kv_cache.py``) or ``dynamic`` (transformers' ``DynamicCache``, which grows by concatenation).
    ``cpu_threads``: torch's intra-op threads on CPU; 0 = this rank's share of the cores the process
    may run on (its affinity: Slurm's allocation, ``taskset``; not the machine's count). With several threads,
    OpenMP spin-waiting makes generation 20x slower as soon as anything else (the sandbox, another
    job) uses the cores (measured: 2 s with 1 thread vs 40-58 s with 2 on a loaded 2-core machine).
    """

    engine: str = "hf"
    model: str = "tiny"
    device: str = "auto"
    dtype: str = "auto"
    max_batch_size: int = 64
    # longest prompt a request may have; a longer one is refused (no completion, reason
    # prompt_too_long), never truncated and never failing the batch. Ours: a teacher prompt with six
    # reference programs stays well under it.
    max_prompt_tokens: int = 4096
    train_micro_batch: int = 8
    train_packing: bool = True
    gradient_checkpointing: bool = False
    adapter_dtype: str = "auto"
    # ours: 512 tokens x 152k vocab x 4 B = 0.3 GiB per chunk for Qwen2.5; the plan measures the rest
    logits_chunk: int = 512
    # ours: no O(T^2) copies of the cache over a completion (measured: docs/benchmarks/generate.md)
    kv_cache: str = "preallocated"
    cpu_threads: int = 1
    # after the publish of a step (backend.Policy.publish), every publish_check_every-th step (0 = never):
    # publish_check_sequences fixed sequences of publish_check_tokens tokens are scored, per member, by the
    # trainer and by the engine; a mean difference above the engine's tolerance stops the run. Ours: every
    # step (measured cost: docs/backends.md), 2 x 32 tokens per member
    publish_check_every: int = 1
    publish_check_sequences: int = 2
    publish_check_tokens: int = 32
    lora: LoraSpec = field(default_factory=LoraSpec)

    def __post_init__(self) -> None:
        known = engine_names()
        need(self.engine in known, "policy.engine", f"must be one of {known}, got {self.engine!r}")
        need(bool(self.model), "policy.model", "is empty: name a base model (tiny, smollm2-135m, a path or an HF id)")
        need(self.dtype in DTYPES, "policy.dtype", f"must be one of {list(DTYPES)}, got {self.dtype!r}")
        need(self.device == "auto" or self.device == "cpu" or self.device.startswith("cuda"),
             "policy.device", f"must be auto, cpu, cuda or cuda:N, got {self.device!r}")
        need(self.max_batch_size >= 1, "policy.max_batch_size", f"must be >= 1, got {self.max_batch_size}")
        need(self.max_prompt_tokens >= 1, "policy.max_prompt_tokens", f"must be >= 1, got {self.max_prompt_tokens}")
        need(self.train_micro_batch >= 1, "policy.train_micro_batch", f"must be >= 1, got {self.train_micro_batch}")
        need(self.adapter_dtype in DTYPES, "policy.adapter_dtype",
             f"must be one of {list(DTYPES)}, got {self.adapter_dtype!r}")
        need(is_int(self.logits_chunk) and self.logits_chunk >= 1, "policy.logits_chunk",
             f"must be an integer >= 1, got {self.logits_chunk!r}")
        for key in ("publish_check_every", "publish_check_sequences", "publish_check_tokens"):
            value, least = getattr(self, key), 0 if key == "publish_check_every" else 1
            need(is_int(value) and value >= least, f"policy.{key}", f"must be an integer >= {least}, got {value!r}")
        need(self.kv_cache in KV_CACHES, "policy.kv_cache", f"must be one of {list(KV_CACHES)}, got {self.kv_cache!r}")
        need(self.cpu_threads >= 0, "policy.cpu_threads", f"must be >= 0 (0 = this rank's share of its cores), got {self.cpu_threads}")
        if isinstance(self.lora, Mapping):
            self.lora = LoraSpec(**self.lora)
        for name, section in engine_sections().items():
            if isinstance(getattr(self, name), Mapping):
                setattr(self, name, section(**getattr(self, name)))
        engine_class(self.engine).check_config(self)

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any] | PolicyConfig) -> PolicyConfig:
        """From a dict or an omegaconf node; unknown keys are errors that name the key."""
        if isinstance(data, PolicyConfig):
            return data
        if hasattr(data, "_metadata"):  # omegaconf DictConfig
            from omegaconf import OmegaConf

            data = OmegaConf.to_container(data, resolve=True)
        data = dict(data)
        sections = {"lora": LoraSpec, **engine_sections()}
        for key, sub in (("", PolicyConfig), *sections.items()):
            section = data if not key else data.get(key)
            if not isinstance(section, Mapping):
                continue
            known = {f.name for f in fields(sub)}
            unknown = sorted(set(section) - known)
            if unknown:
                where = "policy" + (f".{key}" if key else "")
                raise PolicyConfigError(f"{where}: unknown key(s) {unknown}; known keys: {sorted(known)}")
        for key, sub in sections.items():
            if isinstance(data.get(key), Mapping):
                data[key] = sub(**data[key])
        return PolicyConfig(**data)

    def replace(self, **changes: Any) -> PolicyConfig:
        """A copy with top-level fields changed (validated again)."""
        return PolicyConfig.from_mapping({**self.to_dict(), **changes})

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def engine_sections() -> dict[str, type]:
    """``{engine name: its Config}`` for every engine with settings of its own, in name order: the
    ``policy.<name>:`` sections of ``PolicyConfig``."""
    return {name: cls.Config for name, cls in engines().items() if cls.Config is not None}


def _policy_config_type() -> type:
    """``PolicyConfig``: ``PolicyConfigBase`` + one field ``<name>: <engine>.Config`` per engine
    section, built when this module is imported (engine modules must not import this module at
    module level: they are imported from here). Named and placed as a class written here, so
    instances pickle and omegaconf reads it as a structured config."""
    common = {f.name for f in fields(PolicyConfigBase)}
    sections = engine_sections()
    for name in sections:
        if name in common:
            raise ValueError(f"engine {name!r}: its section policy.{name} would hide the key policy.{name}")
    cls = make_dataclass("PolicyConfig", [(name, sub, field(default_factory=sub)) for name, sub in sections.items()],
                         bases=(PolicyConfigBase,), namespace={"__doc__": PolicyConfigBase.__doc__})
    cls.__module__, cls.__qualname__ = __name__, "PolicyConfig"
    return cls


PolicyConfig = _policy_config_type()
