"""The plan's items beside their measurements, and the verdict per preset. Pure arithmetic.

Items compared (GiB, measured / planned):

- the plan's own items (``plan/memory.py``: base_weights, engine, trainer, adapters_optimizer,
  activations, logits, cuda_context), each where one process can measure it alone;
- ``training_step``: what one micro-batch's update adds on top of the resident state at its peak.
  Its planned figure is the plan's ``trainer + activations + logits`` less the overlap the plan
  takes off (the log-prob tail's chunk and the layers' backward working set are never alive
  together); trainer, activations and logits are not measured one by one (they live in one update);
- ``engine_asleep``: the vLLM engine's residue while it sleeps (the plan's sleep-residue estimate),
  when the preset sleeps it (an engine that never sleeps keeps its whole share while training).

The verdict sums the phases as the plan does, from measured figures where there are any and the
plan's figures for the rest (named in ``from_plan``): generation = base weights + adapters and
AdamW + CUDA contexts + the engine awake; training = the same resident state + the engine asleep (or
awake, if it never sleeps; nothing for the HF engine) + the training step. It fits when the larger
phase leaves ``min_headroom`` of the device free, as ``populora plan`` asks; a stage that ran out of
memory does not fit.
"""

from __future__ import annotations

from populora.doctor.records import ItemComparison, Measure, Verdict
from populora.plan.memory import (
    GIB,
    VLLM_SLEEP_RESIDUE_GIB,
    backward_working_bytes,
    logits_transient_bytes,
)

UNSPLIT = ("trainer", "activations", "logits")  # measured together, as training_step
RESIDENT = ("base_weights", "adapters_optimizer", "cuda_context")


def planned_training_step_gib(plan) -> float:
    """The plan's training-phase figure less the resident state and the engine: its trainer,
    activations and logits items, less the overlap it takes off (``plan/memory.py: plan``)."""
    p = plan.inputs
    tokens = p.micro_batch * (p.prompt_tokens + p.new_tokens)
    overlap = min(logits_transient_bytes(p), backward_working_bytes(p, tokens)) / GIB
    return sum(plan.items[k] for k in UNSPLIT) - overlap


def planned_engine_asleep_gib(plan) -> float:
    """The engine's share during training, as the plan counts it."""
    p = plan.inputs
    if p.engine != "vllm":
        return 0.0
    return VLLM_SLEEP_RESIDUE_GIB if p.vllm_sleep else plan.items["engine"]


def planned_items(plan) -> dict[str, float]:
    """Every figure the doctor compares, planned, in GiB."""
    out = dict(plan.items)
    out["training_step"] = planned_training_step_gib(plan)
    if plan.inputs.engine == "vllm" and plan.inputs.vllm_sleep:
        out["engine_asleep"] = planned_engine_asleep_gib(plan)
    return out


def ratio(measured: float | None, planned: float) -> float | None:
    """measured / planned; None when not measured or nothing was planned."""
    if measured is None or planned <= 0:
        return None
    return measured / planned


def compare(plan, measures: list[Measure]) -> tuple[ItemComparison, ...]:
    """Each planned figure beside its measurement (the first measure of an item counts)."""
    found: dict[str, Measure] = {}
    for m in measures:
        found.setdefault(m.item, m)
    rows = []
    for item, planned in planned_items(plan).items():
        m = found.get(item)
        gib = None if m is None or m.bytes is None else m.bytes / GIB
        if m is not None:
            method = m.method
        elif item in UNSPLIT:
            method = "not measured alone: inside training_step"
        elif item == "engine" and plan.inputs.engine == "hf":
            method = ("not measured: the arms generate far fewer rows than the plan's max_batch_size "
                      "x the longest prompt")
        else:
            method = "not measured"
        rows.append(ItemComparison(item, planned, gib, ratio(gib, planned), method))
    return tuple(rows)


def verdict(preset: str, plan, items: tuple[ItemComparison, ...], failed: str | None = None) -> Verdict:
    """Fits / does not fit from the measured phases (module docstring). ``failed``: a stage ran out of
    memory (then it does not fit, whatever the sums say)."""
    by = {c.item: c for c in items}
    from_plan: list[str] = []

    def value(item: str) -> float:
        c = by.get(item)
        if c is None:
            return 0.0
        if c.measured_gib is None:
            if c.planned_gib > 0:
                from_plan.append(item)
            return c.planned_gib
        return c.measured_gib

    resident = sum(value(k) for k in RESIDENT)
    engine = value("engine")
    asleep = value("engine_asleep") if "engine_asleep" in by else (engine if plan.inputs.engine == "vllm" else 0.0)
    phases = {"generation": resident + engine, "training": resident + asleep + value("training_step")}
    limit = plan.gpu_gib * (1 - plan.min_headroom)
    fits = failed is None and max(phases.values()) <= limit
    return Verdict(preset, fits, plan.gpu_gib, plan.min_headroom, phases, dict(plan.phases),
                   tuple(dict.fromkeys(from_plan)), plan.fits)
