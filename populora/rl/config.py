"""RL hyper-parameters of one adapter update (the ``rl:`` section of a run config).

Plain dataclass, usable directly or as an omegaconf structured config; ``__post_init__`` validates
every field and names the key and value in its error. Defaults and why (see ``docs/rl.md``):

- ``teacher_estimator = "trr++"``: a teacher's proposals each have their own prompt (their K buffer
  references are sampled per proposal), so per-prompt centering would zero every advantage;
  whitening per ``(role, task type)`` compares a teacher's proposals of one type with each other.
- ``student_estimator = "rpp_baseline"``: a student answers each task with n rollouts; the task's
  mean reward is the baseline that removes task difficulty, then batch whitening fixes the scale.
- ``clip_eps = 0.2``: PPO clipping against the generator's log-probs (verl's value, kept by AZR);
  with one optimizer step per batch it mostly bounds generator/trainer numerical mismatch.
- ``kl_coef = 0``: AZR trains without a KL loss; ``entropy_coef = 0``: no entropy bonus by default.
- ``aggregation = "token_mean"``: verl's token-mean over the batch, as AZR trains.
- ``lr = 5e-5``: AZR's 1e-6 is for full fine-tuning. LoRA needs a far larger step: the LoRA RL
  literature (e.g. Thinking Machines' "LoRA Without Regret", 2025) finds the best LoRA learning rate
  about 10x the full fine-tuning one, and with ``B = 0`` at initialisation early LoRA updates are
  small. 5e-5 sits inside the 1e-5 .. 1e-4 range used for LoRA RL; presets may override it.
- ``weight_decay = 0``: decay on the LoRA factors pulls the adapter back towards the base model,
  a regulariser we do not want hidden inside the optimizer (AZR uses no KL either).
- ``max_grad_norm = 1.0``: global gradient-norm clipping per adapter (verl's ``grad_clip``).
- ``update_strategy = "fused"``: a rank's members share packed training passes (``strategies.py``);
  same gradients as one member at a time, faster where lengths vary (measured, see the field).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any

from populora.rl.advantages import ADVANTAGE_ESTIMATORS
from populora.rl.losses import AGGREGATIONS, KL_ESTIMATORS
from populora.rl.strategies import UPDATE_STRATEGIES

ROLES = ("teacher", "student")


def _real(key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"rl.{key} must be a finite number, got {value!r}")
    return float(value)


def _choice(key: str, value: Any, allowed: Any) -> None:
    if value not in allowed:
        raise ValueError(f"rl.{key} must be one of {sorted(allowed)}, got {value!r}")


@dataclass
class RLConfig:
    """Hyper-parameters of the advantage estimator, the loss and the per-adapter AdamW."""

    teacher_estimator: str = "trr++"
    student_estimator: str = "rpp_baseline"
    clip_eps: float | None = 0.2
    kl_coef: float = 0.0
    kl_estimator: str = "k3"
    entropy_coef: float = 0.0
    aggregation: str = "token_mean"
    max_grad_norm: float | None = 1.0
    lr: float = 5e-5
    betas: tuple[float, float] = (0.9, 0.999)
    weight_decay: float = 0.0
    adam_eps: float = 1e-8
    # how a rank's members are updated (rl/strategies.py): "fused" = all of them in shared packed passes,
    # each row under its own adapter; "sequential" = one after another. Same gradients either way.
    # Default (ours, measured by `populora bench train`, docs/benchmarks/train.md): fused, 1.24-1.43x
    # faster on CPU on the paper's length regime (0.95-1.09x on the tiny model's 24-token completions),
    # 1.2x on an H200 for a small Qwen2
    update_strategy: str = "fused"

    def __post_init__(self) -> None:
        _choice("update_strategy", self.update_strategy, UPDATE_STRATEGIES)
        _choice("teacher_estimator", self.teacher_estimator, ADVANTAGE_ESTIMATORS)
        _choice("student_estimator", self.student_estimator, ADVANTAGE_ESTIMATORS)
        _choice("aggregation", self.aggregation, AGGREGATIONS)
        _choice("kl_estimator", self.kl_estimator, KL_ESTIMATORS)
        if self.clip_eps is not None and not 0 < _real("clip_eps", self.clip_eps) < 1:
            raise ValueError(f"rl.clip_eps must be in (0, 1) or null (no clipping), got {self.clip_eps!r}")
        for key in ("kl_coef", "entropy_coef", "weight_decay"):
            if _real(key, getattr(self, key)) < 0:
                raise ValueError(f"rl.{key} must be >= 0, got {getattr(self, key)!r}")
        if self.max_grad_norm is not None and not _real("max_grad_norm", self.max_grad_norm) > 0:
            raise ValueError(
                f"rl.max_grad_norm must be > 0 or null (no clipping), got {self.max_grad_norm!r}"
            )
        if not 0 < _real("lr", self.lr) < 1:
            raise ValueError(f"rl.lr must be in (0, 1), got {self.lr!r}")
        if not _real("adam_eps", self.adam_eps) > 0:
            raise ValueError(f"rl.adam_eps must be > 0, got {self.adam_eps!r}")
        betas = tuple(self.betas) if isinstance(self.betas, list | tuple) else None
        if betas is None or len(betas) != 2 or not all(0 <= _real("betas", b) < 1 for b in betas):
            raise ValueError(f"rl.betas must be two numbers in [0, 1), got {self.betas!r}")
        self.betas = (float(betas[0]), float(betas[1]))

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> RLConfig:
        """Build from a plain mapping, rejecting unknown keys by name."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(
                f"unknown key(s) {', '.join('rl.' + k for k in unknown)}; known: {sorted(known)}"
            )
        return cls(**values)

    def estimator_for(self, role: str) -> str:
        """The advantage estimator name for ``role`` (``teacher`` or ``student``)."""
        _choice("role", role, ROLES)
        return self.teacher_estimator if role == "teacher" else self.student_estimator

    def loss_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of :func:`populora.rl.losses.policy_loss` taken from this config."""
        return {
            "clip_eps": self.clip_eps,
            "aggregation": self.aggregation,
            "entropy_coef": self.entropy_coef,
            "kl_coef": self.kl_coef,
            "kl_estimator": self.kl_estimator,
        }

    def adamw_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of ``torch.optim.AdamW`` for one adapter's optimizer."""
        return {"lr": self.lr, "betas": self.betas, "weight_decay": self.weight_decay, "eps": self.adam_eps}
