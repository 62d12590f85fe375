"""LoRA adapter weights as plain tensors, and their PEFT directory format.

A LoRA adapter adds ``delta W = (alpha / r) * B @ A`` to each targeted linear layer of the frozen
base, with ``A [r, in]`` and ``B [out, r]``. ``AdapterWeights`` holds exactly that, keyed by the
module's path inside the base model (``model.layers.0.self_attn.q_proj``). It is the currency of
the project: backends export and import it, evolution operators map parents to children, and
checkpoints store it.

On disk an adapter is a PEFT directory (``adapter_config.json`` + ``adapter_model.safetensors``
with keys ``base_model.model.<module>.lora_A.weight`` / ``lora_B.weight``): what peft's
``PeftModel.from_pretrained`` and vLLM's ``LoRARequest`` both load. The round trip is lossless
(same dtype, same bits).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import torch

CONFIG_NAME = "adapter_config.json"
WEIGHTS_NAME = "adapter_model.safetensors"
_PREFIX = "base_model.model."
_A_SUFFIX = ".lora_A.weight"
_B_SUFFIX = ".lora_B.weight"

# The seven linear projections of a Llama/Qwen2 decoder layer.
ALL_LINEAR = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


class AdapterFormatError(ValueError):
    """An adapter directory or tensor set is malformed; the message names the file and key."""


class AdapterMismatchError(ValueError):
    """Two adapters cannot be combined (rank, modules or shapes differ)."""


@dataclass
class AdapterWeights:
    """LoRA weights of one adapter: ``tensors[module] = (A [r, in], B [out, r])``."""

    rank: int
    alpha: float
    target_modules: tuple[str, ...]
    tensors: dict[str, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.target_modules = tuple(self.target_modules)
        if self.rank <= 0:
            raise AdapterFormatError(f"rank must be positive, got {self.rank}")
        for name, (a, b) in self.tensors.items():
            if a.ndim != 2 or b.ndim != 2:
                raise AdapterFormatError(f"module {name}: A and B must be 2-D, got {tuple(a.shape)}, {tuple(b.shape)}")
            if a.shape[0] != self.rank or b.shape[1] != self.rank:
                raise AdapterFormatError(
                    f"module {name}: expected A [{self.rank}, in] and B [out, {self.rank}], "
                    f"got A {tuple(a.shape)} and B {tuple(b.shape)}"
                )
            if a.dtype != b.dtype:
                raise AdapterFormatError(f"module {name}: A is {a.dtype} but B is {b.dtype}")

    # -- basic properties -------------------------------------------------------------------
    @property
    def scaling(self) -> float:
        """PEFT's scale of the delta: alpha / r (no rsLoRA)."""
        return self.alpha / self.rank

    @property
    def modules(self) -> list[str]:
        return sorted(self.tensors)

    @property
    def dtype(self) -> torch.dtype:
        return next(iter(self.tensors.values()))[0].dtype

    def num_parameters(self) -> int:
        return sum(a.numel() + b.numel() for a, b in self.tensors.values())

    def shapes(self) -> dict[str, tuple[tuple[int, int], tuple[int, int]]]:
        return {m: (tuple(a.shape), tuple(b.shape)) for m, (a, b) in self.tensors.items()}

    def delta(self, module: str) -> torch.Tensor:
        """Dense ``scaling * B @ A`` of one module. For tests and small shapes only."""
        a, b = self.tensors[module]
        return self.scaling * (b.float() @ a.float())

    def clone(self) -> AdapterWeights:
        return AdapterWeights(
            self.rank,
            self.alpha,
            self.target_modules,
            {m: (a.detach().clone(), b.detach().clone()) for m, (a, b) in self.tensors.items()},
        )

    def to(self, dtype: torch.dtype | None = None, device: str | torch.device | None = None) -> AdapterWeights:
        return AdapterWeights(
            self.rank,
            self.alpha,
            self.target_modules,
            {m: (a.to(device=device, dtype=dtype), b.to(device=device, dtype=dtype)) for m, (a, b) in self.tensors.items()},
        )

    def map(self, fn) -> AdapterWeights:
        """A new adapter with ``(A, B) = fn(module, A, B)`` for every module (same rank/alpha)."""
        return AdapterWeights(
            self.rank, self.alpha, self.target_modules, {m: fn(m, a, b) for m, (a, b) in self.tensors.items()}
        )

    def is_finite(self) -> bool:
        return all(bool(torch.isfinite(a).all() and torch.isfinite(b).all()) for a, b in self.tensors.values())

    def equal(self, other: AdapterWeights) -> bool:
        """Bit-for-bit equality (same modules, same dtypes, same values)."""
        if (self.rank, self.alpha, self.target_modules) != (other.rank, other.alpha, other.target_modules):
            return False
        if self.tensors.keys() != other.tensors.keys():
            return False
        return all(
            a.dtype == oa.dtype and b.dtype == ob.dtype and torch.equal(a, oa) and torch.equal(b, ob)
            for (a, b), (oa, ob) in ((self.tensors[m], other.tensors[m]) for m in self.tensors)
        )

    def check_compatible(self, other: AdapterWeights, what: str = "adapters") -> None:
        """Raise AdapterMismatchError unless both have the same rank, modules and shapes."""
        if self.rank != other.rank:
            raise AdapterMismatchError(
                f"{what}: ranks differ ({self.rank} vs {other.rank}); a population uses one uniform rank"
            )
        if self.tensors.keys() != other.tensors.keys():
            only_a = sorted(set(self.tensors) - set(other.tensors))[:3]
            only_b = sorted(set(other.tensors) - set(self.tensors))[:3]
            raise AdapterMismatchError(f"{what}: target modules differ (only in first: {only_a}, only in second: {only_b})")
        mine, theirs = self.shapes(), other.shapes()
        for m in self.tensors:
            if mine[m] != theirs[m]:
                raise AdapterMismatchError(f"{what}: module {m} has shapes {mine[m]} vs {theirs[m]}")

    # -- construction -----------------------------------------------------------------------
    @classmethod
    def init(
        cls,
        module_shapes: Mapping[str, tuple[int, int]],
        rank: int,
        alpha: float,
        *,
        b_init: str = "zeros",
        b_std: float = 1e-3,
        seed: int = 0,
        dtype: torch.dtype = torch.float32,
    ) -> AdapterWeights:
        """New adapter for modules ``{path: (in_features, out_features)}``.

        ``b_init="zeros"`` is peft's default (A Kaiming-uniform, B = 0: the adapter equals the
        base). ``b_init="random"`` draws B ~ N(0, b_std^2) so that members differ from step 0.
        Seeded: the same arguments give the same bits.
        """
        if b_init not in ("zeros", "random"):
            raise AdapterFormatError(f"b_init must be 'zeros' or 'random', got {b_init!r}")
        gen = torch.Generator().manual_seed(seed)
        tensors = {}
        for name in sorted(module_shapes):
            fan_in, fan_out = module_shapes[name]
            # peft: nn.init.kaiming_uniform_(A, a=sqrt(5)) -> bound = 1/sqrt(fan_in)
            bound = 1.0 / math.sqrt(fan_in)
            a = (torch.rand(rank, fan_in, generator=gen) * 2 - 1) * bound
            if b_init == "zeros":
                b = torch.zeros(fan_out, rank)
            else:
                b = torch.randn(fan_out, rank, generator=gen) * b_std
            tensors[name] = (a.to(dtype), b.to(dtype))
        targets = tuple(sorted({n.rsplit(".", 1)[-1] for n in module_shapes}))
        return cls(rank, float(alpha), targets, tensors)

    # -- PEFT directory format ----------------------------------------------------------------
    def save_peft(self, path: str | os.PathLike, base_model_name_or_path: str | None = None) -> Path:
        """Write a PEFT adapter directory atomically (temporary directory, then rename)."""
        from safetensors.torch import save_file

        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
        try:
            state = {}
            for m, (a, b) in self.tensors.items():
                state[_PREFIX + m + _A_SUFFIX] = a.detach().contiguous().cpu()
                state[_PREFIX + m + _B_SUFFIX] = b.detach().contiguous().cpu()
            save_file(state, str(tmp / WEIGHTS_NAME), metadata={"format": "pt"})
            config = {
                "peft_type": "LORA",
                "task_type": "CAUSAL_LM",
                "r": self.rank,
                "lora_alpha": self.alpha,
                "target_modules": list(self.target_modules),
                "lora_dropout": 0.0,
                "bias": "none",
                "fan_in_fan_out": False,
                "use_rslora": False,
                "use_dora": False,
                "inference_mode": True,
                "modules_to_save": None,
                "base_model_name_or_path": base_model_name_or_path,
            }
            (tmp / CONFIG_NAME).write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
            if path.exists():
                old = path.with_name(f".{path.name}.old")
                shutil.rmtree(old, ignore_errors=True)
                os.replace(path, old)
                os.replace(tmp, path)
                shutil.rmtree(old, ignore_errors=True)
            else:
                os.replace(tmp, path)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return path

    @classmethod
    def load_peft(cls, path: str | os.PathLike) -> AdapterWeights:
        """Read a PEFT adapter directory; errors name the file and the offending key."""
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        path = Path(path)
        cfg_file, w_file = path / CONFIG_NAME, path / WEIGHTS_NAME
        if not cfg_file.is_file():
            raise AdapterFormatError(f"{cfg_file}: missing (not a PEFT adapter directory)")
        if not w_file.is_file():
            raise AdapterFormatError(f"{w_file}: missing (only safetensors adapters are supported)")
        try:
            cfg = json.loads(cfg_file.read_text())
        except json.JSONDecodeError as e:
            raise AdapterFormatError(f"{cfg_file}: invalid JSON ({e})") from e
        for key in ("r", "lora_alpha", "target_modules"):
            if key not in cfg:
                raise AdapterFormatError(f"{cfg_file}: key {key!r} missing")
        if cfg.get("peft_type", "LORA") != "LORA":
            raise AdapterFormatError(f"{cfg_file}: peft_type {cfg.get('peft_type')!r} is not LORA")
        if cfg.get("use_dora") or cfg.get("use_rslora"):
            raise AdapterFormatError(f"{cfg_file}: DoRA / rsLoRA adapters are not supported")
        try:
            state = load_file(str(w_file))
        except (SafetensorError, OSError) as e:
            raise AdapterFormatError(f"{w_file}: unreadable safetensors file ({e})") from e
        a_parts, b_parts = {}, {}
        for key, t in state.items():
            if not key.startswith(_PREFIX):
                raise AdapterFormatError(f"{w_file}: unexpected key {key!r} (expected prefix {_PREFIX!r})")
            body = key[len(_PREFIX) :]
            if body.endswith(_A_SUFFIX):
                a_parts[body[: -len(_A_SUFFIX)]] = t
            elif body.endswith(_B_SUFFIX):
                b_parts[body[: -len(_B_SUFFIX)]] = t
            else:
                raise AdapterFormatError(f"{w_file}: unexpected key {key!r} (not a lora_A/lora_B weight)")
        if a_parts.keys() != b_parts.keys():
            missing = sorted(a_parts.keys() ^ b_parts.keys())[:3]
            raise AdapterFormatError(f"{w_file}: modules without both lora_A and lora_B: {missing}")
        if not a_parts:
            raise AdapterFormatError(f"{w_file}: no LoRA tensors")
        target = cfg["target_modules"]
        target = (target,) if isinstance(target, str) else tuple(target)
        tensors = {m: (a_parts[m], b_parts[m]) for m in sorted(a_parts)}
        try:
            return cls(int(cfg["r"]), float(cfg["lora_alpha"]), target, tensors)
        except AdapterFormatError as e:
            raise AdapterFormatError(f"{path}: {e}") from e


def check_uniform_rank(adapters: Mapping[str, AdapterWeights]) -> int:
    """The one rank shared by all adapters of a population; a mismatch names the offender."""
    ranks = {name: w.rank for name, w in adapters.items()}
    if not ranks:
        raise AdapterMismatchError("no adapters")
    first_name, first_rank = next(iter(ranks.items()))
    for name, r in ranks.items():
        if r != first_rank:
            raise AdapterMismatchError(
                f"adapter {name!r} has rank {r} but {first_name!r} has rank {first_rank}; "
                "a population uses one uniform rank"
            )
    return first_rank
