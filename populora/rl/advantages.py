"""Advantage estimators: sequence-level rewards -> one advantage per sequence.

Every estimator is a pure function of a 1-D batch of rewards (a torch tensor, a numpy array or a
list of floats) and a group label per sample; it returns a float32 torch tensor of the same length.
The group labels are any hashable values (task ids, ``(role, task_type)`` tuples, ...); samples with
equal labels form one group. There is no critic anywhere.

Estimators (formulas in ``docs/rl.md``):

- ``rpp_baseline``: REINFORCE++ with a per-prompt baseline: subtract the mean reward of the samples
  of the same prompt, then whiten over the whole batch (mean 0, std 1).
- ``trr++``: AZR's Task-Relative REINFORCE++: whiten separately inside each ``(role, task type)``
  group, ``(r - mean_g) / std_g``.
- ``grpo``: GRPO's group normalisation ``(r - mean_g) / (std_g + eps)`` per prompt group.

Conventions shared by all estimators, chosen so that no edge case can blow up:

- standard deviations are population standard deviations (divide by n), except ``grpo`` which
  follows DeepSeekMath/TRL and uses the sample standard deviation (divide by n - 1);
- a group (or batch) whose rewards are all equal carries no learning signal: its advantages are
  exactly 0 (no division by a zero or round-off-sized standard deviation);
- hence a singleton group gets advantage 0 under every per-group estimator (per-prompt centering
  zeroes a prompt that has a single sample; that is why teachers, whose proposals each have their
  own prompt, default to ``trr++`` and not to ``rpp_baseline``, see ``docs/rl.md``);
- NaN or infinite rewards raise ``ValueError`` naming the first offending index;
- an empty batch gives an empty tensor.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import NamedTuple

import numpy as np
import torch

RewardsLike = torch.Tensor | np.ndarray | Sequence[float]
Labels = Sequence[Hashable] | torch.Tensor | np.ndarray

# Below this, a standard deviation is treated as zero (rewards in this project are O(1) values such
# as -1, -0.5, 0, 1; any real spread between them is far above this).
ZERO_STD = 1e-8


# -- input checking ------------------------------------------------------------------------------


def as_rewards(rewards: RewardsLike) -> torch.Tensor:
    """Rewards as a 1-D float64 tensor; rejects other shapes and NaN/inf values by index."""
    if torch.is_tensor(rewards):
        r = rewards.detach().to(device="cpu", dtype=torch.float64)
    else:
        r = torch.as_tensor(np.asarray(rewards, dtype=np.float64))
    if r.ndim != 1:
        raise ValueError(f"rewards must be 1-D (one reward per sequence), got shape {tuple(r.shape)}")
    bad = (~torch.isfinite(r)).nonzero()
    if len(bad):
        i = int(bad[0])
        raise ValueError(f"rewards[{i}] is {float(r[i])}; rewards must be finite ({len(bad)} bad value(s))")
    return r


def group_index(labels: Labels, n: int, what: str = "group labels") -> tuple[torch.Tensor, int]:
    """Map labels to dense group ids in order of first appearance: ``(ids [n] int64, n_groups)``."""
    if torch.is_tensor(labels) or isinstance(labels, np.ndarray):
        labels = labels.tolist()
    labels = list(labels)
    if len(labels) != n:
        raise ValueError(f"{what} must have one entry per reward: got {len(labels)} labels for {n} rewards")
    ids: dict[Hashable, int] = {}
    try:
        dense = [ids.setdefault(label, len(ids)) for label in labels]
    except TypeError as e:
        raise ValueError(f"{what} must be hashable (str, int, tuple...): {e}") from None
    return torch.tensor(dense, dtype=torch.int64), len(ids)


# -- group statistics -----------------------------------------------------------------------------


def _group_sum(x: torch.Tensor, gid: torch.Tensor, n_groups: int) -> torch.Tensor:
    return torch.zeros(n_groups, dtype=x.dtype).index_add_(0, gid, x)


def _constant_groups(r: torch.Tensor, gid: torch.Tensor, n_groups: int) -> torch.Tensor:
    """Per group: True when all its rewards are equal (exact comparison, no tolerance)."""
    hi = torch.full((n_groups,), -torch.inf, dtype=r.dtype).scatter_reduce(0, gid, r, "amax")
    lo = torch.full((n_groups,), torch.inf, dtype=r.dtype).scatter_reduce(0, gid, r, "amin")
    return hi == lo


def group_center(r: torch.Tensor, gid: torch.Tensor, n_groups: int) -> torch.Tensor:
    """``r - mean of r's group``, exactly 0 for groups whose values are all equal."""
    count = _group_sum(torch.ones_like(r), gid, n_groups)
    mean = _group_sum(r, gid, n_groups) / count
    centered = r - mean[gid]
    return torch.where(_constant_groups(r, gid, n_groups)[gid], torch.zeros_like(r), centered)


def group_whiten(
    r: torch.Tensor, gid: torch.Tensor, n_groups: int, *, ddof: int = 0, eps: float = 0.0
) -> torch.Tensor:
    """``(r - mean_g) / (std_g + eps)`` per group; 0 for constant groups and groups of size <= ddof."""
    count = _group_sum(torch.ones_like(r), gid, n_groups)
    centered = group_center(r, gid, n_groups)
    var = _group_sum(centered**2, gid, n_groups) / (count - ddof).clamp(min=1)
    std = var.sqrt()
    dead = _constant_groups(r, gid, n_groups) | (count <= ddof) | (std < ZERO_STD)
    out = centered / (std + eps).where(~dead, torch.ones_like(std))[gid]
    return torch.where(dead[gid], torch.zeros_like(r), out)


def batch_whiten(x: torch.Tensor) -> torch.Tensor:
    """Batch whitening: mean 0, population std 1; all zeros when the batch has no spread."""
    if x.numel() == 0:
        return x.clone()
    return group_whiten(x, torch.zeros(len(x), dtype=torch.int64), 1)


# -- the estimators -------------------------------------------------------------------------------


def rpp_baseline(rewards: RewardsLike, prompt_ids: Labels, whiten: bool = True) -> torch.Tensor:
    """REINFORCE++ with a per-prompt baseline.

    ``A_i = r_i - mean{r_j : prompt_j == prompt_i}``, then (``whiten=True``) the centred values are
    whitened over the whole batch: ``A <- (A - mean(A)) / std(A)`` (population std). A prompt with a
    single sample, or whose samples all got the same reward, gets ``A = 0``; those zeros still count
    in the batch statistics of the whitening.
    """
    r = as_rewards(rewards)
    gid, n_groups = group_index(prompt_ids, len(r), "prompt_ids")
    if len(r) == 0:
        return r.float()
    centered = group_center(r, gid, n_groups)
    return (batch_whiten(centered) if whiten else centered).float()


def trr_pp(rewards: RewardsLike, role_type_keys: Labels) -> torch.Tensor:
    """AZR's Task-Relative REINFORCE++: whitening separately per ``(role, task type)`` group.

    ``A_i = (r_i - mean_g) / std_g`` where ``g`` is the group of sample ``i`` (population std). A
    group of one sample, or whose rewards are all equal, gets ``A = 0``.
    """
    r = as_rewards(rewards)
    gid, n_groups = group_index(role_type_keys, len(r), "role_type_keys")
    return group_whiten(r, gid, n_groups).float()


def grpo(rewards: RewardsLike, prompt_ids: Labels, eps: float = 1e-6) -> torch.Tensor:
    """GRPO group normalisation: ``A_i = (r_i - mean_g) / (std_g + eps)`` per prompt group.

    ``std_g`` is the sample standard deviation (n - 1), as in DeepSeekMath and TRL. A singleton
    group gets ``A = 0`` (a relative advantage needs at least two samples; verl instead passes the
    raw reward through, which would mix scales), and so does a group whose rewards are all equal.
    """
    if eps < 0:
        raise ValueError(f"grpo eps must be >= 0, got {eps}")
    r = as_rewards(rewards)
    gid, n_groups = group_index(prompt_ids, len(r), "prompt_ids")
    return group_whiten(r, gid, n_groups, ddof=1, eps=eps).float()


# -- registry and dispatch ------------------------------------------------------------------------


class Estimator(NamedTuple):
    """A registered estimator and which labels it groups by: ``"prompt_ids"`` or ``"group_keys"``."""

    fn: Callable[..., torch.Tensor]
    groups_by: str


ADVANTAGE_ESTIMATORS: dict[str, Estimator] = {
    "rpp_baseline": Estimator(rpp_baseline, "prompt_ids"),
    "trr++": Estimator(trr_pp, "group_keys"),
    "grpo": Estimator(grpo, "prompt_ids"),
}


def compute_advantages(
    name: str,
    rewards: RewardsLike,
    prompt_ids: Labels | None = None,
    group_keys: Labels | None = None,
) -> torch.Tensor:
    """Run the estimator registered as ``name`` with the labels it needs.

    ``prompt_ids`` (one per sample: which prompt it answers) feed ``rpp_baseline`` and ``grpo``;
    ``group_keys`` (one per sample, e.g. ``(role, task_type)``) feed ``trr++``.
    """
    if name not in ADVANTAGE_ESTIMATORS:
        raise ValueError(f"unknown advantage estimator {name!r}; known: {sorted(ADVANTAGE_ESTIMATORS)}")
    est = ADVANTAGE_ESTIMATORS[name]
    labels = prompt_ids if est.groups_by == "prompt_ids" else group_keys
    if labels is None:
        raise ValueError(
            f"advantage estimator {name!r} groups samples by {est.groups_by}, which was not given"
        )
    return est.fn(rewards, labels)


def role_advantages(
    name: str,
    role: str,
    rewards: RewardsLike,
    prompt_ids: Labels,
    task_types: Sequence[str],
) -> torch.Tensor:
    """Advantages of one member's sequences in one role, grouped the way ``name`` needs.

    ``trr++`` groups by ``(role, task_type)``; the per-prompt estimators group by ``prompt_ids``.
    If a per-prompt estimator would see only singleton prompts (a teacher's proposals, or students
    with one rollout per task) every advantage would be 0 and the adapter would silently never
    learn: that is a configuration error, raised here with the fix.
    """
    r = as_rewards(rewards)
    keys = [(role, t) for t in task_types]
    if len(keys) != len(r):
        raise ValueError(f"task_types must have one entry per reward: got {len(keys)} for {len(r)} rewards")
    est = ADVANTAGE_ESTIMATORS.get(name)
    if est is not None and est.groups_by == "prompt_ids" and len(r) > 1:
        _, n_groups = group_index(prompt_ids, len(r), "prompt_ids")
        if n_groups == len(r):
            raise ValueError(
                f"advantage estimator {name!r} for role {role!r} centres per prompt, but all {len(r)} "
                f"sequences have distinct prompts, so every advantage would be 0; use 'trr++' for this "
                f"role or sample several completions per prompt"
            )
    return compute_advantages(name, r, prompt_ids=prompt_ids, group_keys=keys)
