"""Compute matching: how many sequences each adapter generates and trains on per step.

The comparison in PopuLoRA is per adapter: every member of the population, and the single-agent
baseline, trains on the same number of sequences with the same number of optimizer steps per step,
the same maximum lengths and the same sampling settings (``selfplay.sequences_per_adapter``, N).

- a teacher makes N proposals (N / #types per task type);
- a student trains on N attempts: N / n whole groups of n rollouts. Every fresh valid task of its
  matched teacher(s) is attempted (the teacher's reward needs its solve rate); when there are more
  groups than N / n, a seeded random subset of whole groups is trained on, and when there are fewer,
  tasks from the buffers are added before generation so that exactly N / n groups exist;
- the baseline agent (one adapter in both roles) makes ``round(N * f)`` proposals and trains on the
  remaining N - round(N * f) attempts (f = ``selfplay.baseline_proposer_fraction``).

Tokens are logged per adapter, not matched: they depend on what each adapter writes.
"""

from __future__ import annotations

from dataclasses import dataclass

from populora.config import Config, baseline_split


@dataclass(frozen=True)
class Budget:
    proposals: int  # proposals this adapter makes per step (0 for a pure student)
    attempts: int  # attempt sequences this adapter trains on per step (0 for a pure teacher)

    @property
    def sequences(self) -> int:
        return self.proposals + self.attempts


def budget_for(cfg: Config, role: str) -> Budget:
    """Per-step budget of an adapter with ``role`` in ``teacher|student|agent`` (agent = baseline)."""
    n = cfg.selfplay.sequences_per_adapter
    if role == "teacher":
        return Budget(n, 0)
    if role == "student":
        return Budget(0, n)
    if role == "agent":
        props, atts = baseline_split(cfg)
        return Budget(props, atts)
    raise ValueError(f"unknown role {role!r}")


def per_type(total: int, types: list[str]) -> dict[str, int]:
    """Split ``total`` evenly over task types (config validation guarantees divisibility)."""
    return {t: total // len(types) for t in types}


@dataclass
class Usage:
    """What one adapter used in one step (logged as ``adapter/<id>/<counter>``)."""

    sequences: int = 0
    proposals: int = 0
    attempts: int = 0
    rollouts: int = 0  # attempts generated (trained on or only used for a teacher's reward)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    optimizer_steps: int = 0

    def as_metrics(self, member_id: str) -> dict[str, float]:
        keys = ("sequences", "proposals", "attempts", "rollouts", "prompt_tokens", "completion_tokens", "optimizer_steps")
        return {f"adapter/{member_id}/{k}": getattr(self, k) for k in keys}
