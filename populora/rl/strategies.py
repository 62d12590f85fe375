"""Update strategies: how a rank turns its members' batches into one optimizer step per member.

A strategy is a kind of thing: the interface :class:`UpdateStrategy`, a registry by name
(``@update_strategy("<name>")``), and ``rl.update_strategy`` picks one. Every strategy gives every
adapter the gradient of its own member's loss (its own advantages, its own denominator), then the
member's own clipping and AdamW step (``update.finish_update``), so compute matching stays per member;
they differ only in how the forward and backward passes are shared:

- ``sequential``: one member after another, each through its own packed micro-batches
  (``update.train_member``);
- ``fused``: all members of the rank in shared packed micro-batches, each row under its own member's
  adapter (``fused.py``; the backend needs ``fused_logprobs``).

The step loop only calls ``strategy.update(...)`` (through ``selfplay/ranks.py``); it does not know
which one runs. Members whose group spans several ranks sum statistics and gradients over the group
in the order of ``members`` on every strategy, so the ranks of a group meet in the same collectives.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from populora.rl.fused import MemberPart, fused_gradients
from populora.rl.packing import MicroBatching
from populora.rl.update import MemberGroup, advantages_of, finish_update, train_member


@dataclass(frozen=True)
class MemberBatch:
    """One member's part of a rank's update: its adapter, its whole batch of sequences (``Seq``
    records), and the ranks that share it (``None``: this rank alone)."""

    adapter: str
    batch: list
    group: MemberGroup | None = None


class UpdateStrategy(ABC):
    """How a rank's members get their update; see the module docstring."""

    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""

    @abstractmethod
    def update(self, backend: Any, members: Sequence[MemberBatch], rl, micro_batches: MicroBatching) -> list[dict]:
        """One update of every member (at most one optimizer step each); their statistics, in order."""


UPDATE_STRATEGIES: dict[str, type[UpdateStrategy]] = {}


def update_strategy(name: str):
    """Class decorator: ``@update_strategy("fused")`` makes ``rl.update_strategy: fused`` build that class."""

    def deco(cls):
        if name in UPDATE_STRATEGIES and UPDATE_STRATEGIES[name] is not cls:
            raise ValueError(f"update strategy {name!r} is registered twice")
        cls.name = name
        UPDATE_STRATEGIES[name] = cls
        return cls

    return deco


def strategy_for(name: str) -> UpdateStrategy:
    """The strategy ``rl.update_strategy`` names."""
    if name not in UPDATE_STRATEGIES:
        raise ValueError(f"rl.update_strategy must be one of {sorted(UPDATE_STRATEGIES)}, got {name!r}")
    return UPDATE_STRATEGIES[name]()


@update_strategy("sequential")
class Sequential(UpdateStrategy):
    summary = "one member after another, each through its own packed micro-batches"

    def update(self, backend, members, rl, micro_batches):
        return [train_member(backend, m.adapter, m.batch, rl, micro_batches, m.group) for m in members]


@update_strategy("fused")
class Fused(UpdateStrategy):
    summary = "all members of a rank in shared packed micro-batches, each row under its own adapter"

    def update(self, backend, members, rl, micro_batches):
        parts = [MemberPart(m.adapter, m.batch, advantages_of(m.batch, rl), m.group) for m in members]
        before = [backend.get_weights(m.adapter) for m in members]  # restored if its update is not finite
        fused_gradients(backend, parts, rl, micro_batches)
        return [finish_update(backend, p.adapter, p.batch, p.adv, p.totals, rl, w, p.group)
                for p, w in zip(parts, before)]
