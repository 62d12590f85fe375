"""The policy update as the step loop runs it: the run's micro-batching, and the update itself.

The update code is in ``populora/rl`` (``rl/update.py``: one member's update; ``rl/strategies.py``: how a
rank updates all of its members, one at a time or in one fused pass, chosen by ``rl.update_strategy``).
This module adds what needs the run config: the memory plan's token budget for the passes
(``micro_batching``). The names the doctor and the tests import from here are those of ``rl/update.py``.
"""

from __future__ import annotations

from populora.plan.inputs import train_budget
from populora.rl.packing import MicroBatching
from populora.rl.update import MemberGroup, accumulate_gradients, advantages_of, train_member

__all__ = ["MemberGroup", "MicroBatching", "accumulate_gradients", "advantages_of", "micro_batching", "train_member"]


def micro_batching(cfg) -> MicroBatching:
    """The run's micro-batching: the memory plan's bound (``plan.inputs.train_budget``) and the policy's knobs."""
    return MicroBatching(train_budget(cfg), cfg.policy.train_micro_batch, cfg.policy.train_packing)
