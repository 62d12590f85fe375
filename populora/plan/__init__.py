"""Memory plan of a run, computed from its config and the model's shape before anything loads.

- ``shapes.py``: the base's shape from ``config.json`` or a table of known bases (no weights);
- ``memory.py``: :class:`PlanInputs` and the pure arithmetic of the plan (items, phases, fixes); the
  engine's own part comes from its class (``GenerationEngine.plan_memory`` / ``plan_knobs``);
- ``inputs.py``: the one reader of run-config keys (``plan_inputs``, ``check_plan``);
- ``table.py``: the plan as a table (``format_plan``).
"""

from populora.plan.inputs import check_plan, fix_overrides, plan_inputs
from populora.plan.memory import ITEMS, Plan, PlanInputs, plan, suggest_fixes
from populora.plan.shapes import ModelShape, UnknownModelShape, model_shape
from populora.plan.table import format_plan

__all__ = [
    "ITEMS", "ModelShape", "Plan", "PlanInputs", "UnknownModelShape",
    "check_plan", "fix_overrides", "format_plan", "model_shape", "plan", "plan_inputs", "suggest_fixes",
]
