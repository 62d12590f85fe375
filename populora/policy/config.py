"""Configuration records of the policy layer: LoRA shape/init, optimizer, backend choice.

``BackendConfig.from_mapping`` accepts a plain dict or an omegaconf node (the ``policy:`` section
of an experiment preset) and names the offending key on any error.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from populora.policy.adapters import ALL_LINEAR


class PolicyConfigError(ValueError):
    """A policy/backend setting is invalid; the message names the key and value."""


@dataclass(frozen=True)
class LoraSpec:
    """Shape and initialisation of every adapter of a population (one uniform rank).

    ``init="zeros"`` is peft's default (B = 0: a new member equals the base model);
    ``init="random"`` draws B ~ N(0, b_std^2) so that members differ from step 0.
    """

    rank: int = 32
    alpha: float = 64.0
    target_modules: tuple[str, ...] = ALL_LINEAR
    init: str = "random"
    b_std: float = 1e-3
    seed: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "target_modules", tuple(self.target_modules))
        if self.rank < 1:
            raise PolicyConfigError(f"lora.rank must be >= 1, got {self.rank}")
        if self.init not in ("zeros", "random"):
            raise PolicyConfigError(f"lora.init must be 'zeros' or 'random', got {self.init!r}")
        if not self.target_modules:
            raise PolicyConfigError("lora.target_modules is empty")


@dataclass(frozen=True)
class OptimConfig:
    """AdamW settings, one optimizer per adapter."""

    lr: float = 5e-5
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    weight_decay: float = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "betas", tuple(self.betas))
        if self.lr <= 0:
            raise PolicyConfigError(f"optim.lr must be > 0, got {self.lr}")
        if len(self.betas) != 2 or not all(0 <= b < 1 for b in self.betas):
            raise PolicyConfigError(f"optim.betas must be two numbers in [0, 1), got {self.betas}")


@dataclass(frozen=True)
class BackendConfig:
    """Which backend, on which base model, device and dtype.

    ``kind``: ``hf`` (transformers + peft, CPU or GPU) or ``vllm`` (vLLM generation + HF training).
    ``model``: ``tiny``, ``smollm2-135m``, a local directory or a Hugging Face id.
    ``device``/``dtype``: ``auto`` = CUDA bf16 if a GPU is present, else CPU float32.
    ``max_batch_size``: rows (prompts x n) decoded together by the HF backend.
    ``train_micro_batch``: sequences per forward in ``completion_logprobs`` without gradients.
    ``cpu_threads``: set torch's intra-op thread count on CPU (1 is fastest for small models on
    a busy machine: spinning OpenMP threads fight over shared cores).
    The ``vllm_*`` keys are read only by the vLLM backend (see docs/backends.md).
    """

    kind: str = "hf"
    model: str = "tiny"
    device: str = "auto"
    dtype: str = "auto"
    max_batch_size: int = 64
    train_micro_batch: int = 16
    cpu_threads: int = 0  # torch intra-op threads on CPU; 0 = torch's default
    gradient_checkpointing: bool = False  # recompute layer activations in backward (7B, long prompts)
    lora: LoraSpec = field(default_factory=LoraSpec)
    optim: OptimConfig = field(default_factory=OptimConfig)
    vllm_gpu_memory_utilization: float = 0.45
    vllm_max_model_len: int = 8192
    vllm_max_loras: int = 0  # 0 = number of adapters at the first generate (at least 1)
    vllm_max_cpu_loras: int = 0  # 0 = 2 x max_loras
    vllm_sleep_between_phases: bool = False
    vllm_adapter_dir: str = ""  # "" = a fresh directory under $TMPDIR (fast local disk)
    vllm_enforce_eager: bool = False

    def __post_init__(self) -> None:
        if self.kind not in ("hf", "vllm"):
            raise PolicyConfigError(f"policy.kind must be 'hf' or 'vllm', got {self.kind!r}")
        if self.max_batch_size < 1:
            raise PolicyConfigError(f"policy.max_batch_size must be >= 1, got {self.max_batch_size}")
        if self.train_micro_batch < 1:
            raise PolicyConfigError(f"policy.train_micro_batch must be >= 1, got {self.train_micro_batch}")
        if not 0 < self.vllm_gpu_memory_utilization < 1:
            raise PolicyConfigError(
                f"policy.vllm_gpu_memory_utilization must be in (0, 1), got {self.vllm_gpu_memory_utilization}"
            )

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any] | BackendConfig) -> BackendConfig:
        """From a dict / omegaconf node; unknown keys are errors that name the key."""
        if isinstance(data, BackendConfig):
            return data
        if hasattr(data, "_metadata"):  # omegaconf DictConfig
            from omegaconf import OmegaConf

            data = OmegaConf.to_container(data, resolve=True)
        data = dict(data)
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise PolicyConfigError(f"policy: unknown key(s) {unknown}; known keys: {sorted(known)}")
        for key, sub in (("lora", LoraSpec), ("optim", OptimConfig)):
            if key in data and not isinstance(data[key], sub):
                value = dict(data[key] or {})
                sub_known = {f.name for f in fields(sub)}
                bad = sorted(set(value) - sub_known)
                if bad:
                    raise PolicyConfigError(f"policy.{key}: unknown key(s) {bad}; known keys: {sorted(sub_known)}")
                data[key] = sub(**value)
        return cls(**data)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
