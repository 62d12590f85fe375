"""What a generation engine tells the memory plan (``populora plan``): its memory and its knobs.

An engine class answers ``plan_memory(inputs, gpu_gib)`` with an :class:`EngineMemory` and
``plan_knobs(inputs)`` with the :class:`Knob` s the plan's fix search may turn (see
``engine.GenerationEngine``); the plan (``populora/plan/memory.py``) adds the trainer's items, sums
the phases and searches the fixes. ``inputs`` is the plan's ``PlanInputs``: the run's ``policy:``
section (``inputs.policy``, the engine's own section included) and the figures derived from the
run (model shape, resolved dtypes, adapters, prompt and completion tokens) with the sizes the plan
computes from them (``base_weight_bytes``, ``adapter_params``, ``kv_bytes_per_token``). Plain
records: nothing here imports the plan, so engine modules stay below it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

NOT_MODELLED = "not modelled: the engine declares no memory of its own (GenerationEngine.plan_memory)"


@dataclass
class EngineMemory:
    """One engine's part of the plan, in bytes.

    ``awake``: what it holds during the generation phase. ``training``: what it keeps while the
    trainer runs (its whole ``awake`` figure if it never lets go; 0 if its memory exists only while
    it generates). ``sleeps``: it frees memory for training, and ``training`` is what it keeps asleep
    (``populora doctor`` measures that as its own item). ``details``: sub-figures, first in the plan's ``details``. ``problems``: why it cannot run
    whatever the headroom (the plan does not fit then). ``what``: its line in the plan's table.

    The default (an engine that says nothing) holds no memory of its own and reads "not modelled".
    """

    awake: float = 0.0
    training: float = 0.0
    sleeps: bool = False
    details: dict[str, float] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    what: str = NOT_MODELLED


@dataclass(frozen=True)
class Knob:
    """A setting the plan's fix search may turn.

    ``key``: the run-config key (``policy.vllm.gpu_memory_utilization``), which is how a fix is
    applied and printed. ``values(inputs)``: its values other than the current one, least change
    first (empty: nothing to try). ``switch``: an on/off setting (tried alone, in pairs with every
    later knob, then all switches together); otherwise a graded one (a smaller micro-batch, a
    nearer share).
    """

    key: str
    values: Callable[[Any], list]
    switch: bool = False
