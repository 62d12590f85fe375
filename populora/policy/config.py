"""The policy layer's configuration: ONE type, ``PolicyConfig``, which is the ``policy:`` section of a
run config, the argument of ``make_backend`` and what ``populora eval`` builds its engine from.

Plain dataclasses usable directly (``PolicyConfig(model="tiny")``) or as omegaconf structured configs
(``populora.config.Config`` embeds ``PolicyConfig``); ``__post_init__`` validates every field and names
the key (``policy.<field>``) and the value in ``PolicyConfigError``. ``PolicyConfig.from_mapping``
accepts a plain dict or an omegaconf node and names unknown keys.

Optimizer settings are not here: they are RL hyper-parameters (``rl.lr``, ``rl.betas``, ...,
``populora.rl.config.RLConfig``); a backend receives them as ``torch.optim.AdamW`` keyword arguments.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from populora.policy.adapters import ALL_LINEAR

DTYPES = ("auto", "float32", "bfloat16", "float16")


def known_engines() -> list[str]:
    """The generation engines: one module ``populora/policy/<name>_engine.py`` each (see engine.py)."""
    return sorted(p.name[: -len("_engine.py")] for p in Path(__file__).parent.glob("*_engine.py"))


def _engine_check(config: PolicyConfig) -> None:
    """The engine module's own checks of the config (``check_config``), if it has any."""
    module = importlib.import_module(f"populora.policy.{config.engine}_engine")
    check = getattr(module, "check_config", None)
    if check is not None:
        check(config)


class PolicyConfigError(ValueError):
    """A policy/backend setting is invalid; the message names the key and value."""


def _need(cond: bool, key: str, msg: str) -> None:
    if not cond:
        raise PolicyConfigError(f"{key} {msg}")


def _int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


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
        _need(_int(self.rank) and self.rank >= 1, "policy.lora.rank", f"must be an integer >= 1, got {self.rank!r}")
        _need(math.isfinite(self.alpha) and self.alpha > 0, "policy.lora.alpha", f"must be > 0, got {self.alpha!r}")
        _need(self.init in ("zeros", "random"), "policy.lora.init", f"must be 'zeros' or 'random', got {self.init!r}")
        _need(bool(self.target_modules), "policy.lora.target_modules", "is empty: name at least one module")
        _need(math.isfinite(self.b_std) and self.b_std >= 0, "policy.lora.b_std", f"must be >= 0, got {self.b_std!r}")


@dataclass
class VLLMConfig:
    """Settings read only by the vLLM engine (``policy.engine: vllm``); see docs/backends.md."""

    gpu_memory_utilization: float = 0.45  # vLLM's share of the GPU; the trainer uses the rest
    # prompt + completion tokens of one sequence; 0 = policy.max_prompt_tokens + the run's longest
    # max_new_tokens (what the KV cache must hold for one sequence, and no more)
    max_model_len: int = 0
    max_loras: int = 0  # LoRA slots on the GPU; 0 = number of adapters at the first generate
    max_cpu_loras: int = 0  # LoRA cache in host memory; 0 = 2 x max_loras
    sleep_between_phases: bool = False  # offload the engine (sleep level 1) while the trainer runs
    adapter_dir: str = ""  # where adapter versions are written; "" = a fresh directory under $TMPDIR
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
        _need(math.isfinite(u) and 0 < u < 1, "policy.vllm.gpu_memory_utilization", f"must be in (0, 1), got {u!r}")
        _need(self.max_model_len >= 0, "policy.vllm.max_model_len", f"must be >= 0 (0 = automatic), got {self.max_model_len}")
        _need(self.max_loras >= 0, "policy.vllm.max_loras", f"must be >= 0 (0 = automatic), got {self.max_loras}")
        _need(self.max_cpu_loras >= 0, "policy.vllm.max_cpu_loras", f"must be >= 0 (0 = automatic), got {self.max_cpu_loras}")
        _need(self.load_format in ("auto", "dummy"), "policy.vllm.load_format",
              f"must be auto or dummy, got {self.load_format!r}")
        g = self.cpu_kv_cache_gib
        _need(isinstance(g, (int, float)) and not isinstance(g, bool) and math.isfinite(g) and g > 0,
              "policy.vllm.cpu_kv_cache_gib", f"must be > 0 (GiB of host RAM), got {g!r}")


@dataclass
class PolicyConfig:
    """The frozen base, its adapters and the engines that serve them.

    ``engine``: ``hf`` (transformers + peft: generation and training, CPU or GPU) or ``vllm`` (vLLM
    multi-LoRA generation + an HF trainer on the same GPU).
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
    cpu_threads: int = 1
    lora: LoraSpec = field(default_factory=LoraSpec)
    vllm: VLLMConfig = field(default_factory=VLLMConfig)

    def __post_init__(self) -> None:
        _need(self.engine in known_engines(), "policy.engine", f"must be one of {known_engines()}, got {self.engine!r}")
        _need(bool(self.model), "policy.model", "is empty: name a base model (tiny, smollm2-135m, a path or an HF id)")
        _need(self.dtype in DTYPES, "policy.dtype", f"must be one of {list(DTYPES)}, got {self.dtype!r}")
        _need(self.device == "auto" or self.device == "cpu" or self.device.startswith("cuda"),
              "policy.device", f"must be auto, cpu, cuda or cuda:N, got {self.device!r}")
        _need(self.max_batch_size >= 1, "policy.max_batch_size", f"must be >= 1, got {self.max_batch_size}")
        _need(self.max_prompt_tokens >= 1, "policy.max_prompt_tokens", f"must be >= 1, got {self.max_prompt_tokens}")
        _need(self.train_micro_batch >= 1, "policy.train_micro_batch", f"must be >= 1, got {self.train_micro_batch}")
        _need(self.adapter_dtype in DTYPES, "policy.adapter_dtype",
              f"must be one of {list(DTYPES)}, got {self.adapter_dtype!r}")
        _need(_int(self.logits_chunk) and self.logits_chunk >= 1, "policy.logits_chunk",
              f"must be an integer >= 1, got {self.logits_chunk!r}")
        _need(self.cpu_threads >= 0, "policy.cpu_threads", f"must be >= 0 (0 = this rank's share of its cores), got {self.cpu_threads}")
        if isinstance(self.lora, Mapping):
            self.lora = LoraSpec(**self.lora)
        if isinstance(self.vllm, Mapping):
            self.vllm = VLLMConfig(**self.vllm)
        _engine_check(self)

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any] | PolicyConfig) -> PolicyConfig:
        """From a dict or an omegaconf node; unknown keys are errors that name the key."""
        if isinstance(data, PolicyConfig):
            return data
        if hasattr(data, "_metadata"):  # omegaconf DictConfig
            from omegaconf import OmegaConf

            data = OmegaConf.to_container(data, resolve=True)
        data = dict(data)
        for key, sub in (("", cls), ("lora", LoraSpec), ("vllm", VLLMConfig)):
            section = data if not key else data.get(key)
            if not isinstance(section, Mapping):
                continue
            known = {f.name for f in fields(sub)}
            unknown = sorted(set(section) - known)
            if unknown:
                where = "policy" + (f".{key}" if key else "")
                raise PolicyConfigError(f"{where}: unknown key(s) {unknown}; known keys: {sorted(known)}")
        for key, sub in (("lora", LoraSpec), ("vllm", VLLMConfig)):
            if isinstance(data.get(key), Mapping):
                data[key] = sub(**data[key])
        return cls(**data)

    def replace(self, **changes: Any) -> PolicyConfig:
        """A copy with top-level fields changed (validated again)."""
        return PolicyConfig.from_mapping({**self.to_dict(), **changes})

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
