"""The plan's items beside their measurements, and the verdict per preset. Pure arithmetic.

Items compared (GiB, measured / planned):

- the plan's own items (``plan/memory.py``: base_weights, engine, trainer, adapters_optimizer,
  activations, logits, cuda_context), each where one process can measure it alone;
- ``training_step``: what one micro-batch's update adds on top of the resident state at its peak.
  Its planned figure is the plan's ``trainer + activations + logits`` less the overlap the plan
  takes off (the log-prob tail's chunk and the layers' backward working set are never alive
  together); trainer, activations and logits are not measured one by one (they live in one update);
- ``engine_asleep``: what the engine keeps while it sleeps (the vLLM engine's sleep-residue
  estimate), when the preset's engine sleeps between phases (the plan's ``EngineMemory.sleeps``;
  an engine that never sleeps keeps its whole share while training);
- ``cuda_context`` per process: the plan counts one context per process on the GPU (the trainer's and
  each of the engine's own, ``cuda_contexts``); the doctor measures the trainer's process only, so the
  row compares one process with the plan's figure for one. In the verdict the trainer's context is the
  measured one; an engine process's context is inside the ``engine`` item when the engine was measured
  (its memory is read from the device as a whole), else the plan's per-process figure (named in
  ``from_plan``): a context is counted once per process that exists, never doubled from one reading.

The verdict sums the phases as the plan does, from measured figures where there are any and the
plan's figures for the rest (named in ``from_plan``): generation = base weights + adapters and
AdamW + CUDA contexts + the engine awake; training = the same resident state + what the engine keeps
meanwhile, as its class tells the plan (asleep: ``engine_asleep``; all it holds awake: the ``engine``
item; else its planned figure, nothing for the HF engine) + the training step. It fits when the larger
phase leaves ``min_headroom`` of the device free, as ``populora plan`` asks; a stage that ran out of
memory does not fit. Where the allocator's reserved peak was measured (CUDA), the training phase also
counts what the allocator kept cached above the allocated peak (``reserved_slack_gib``): that is what
runs out first, and the plan has no item for it.
"""

from __future__ import annotations

from populora.doctor.records import FitVerdict, ItemComparison, Measure
from populora.plan.memory import GIB, backward_working_bytes, logits_transient_bytes

UNSPLIT = ("trainer", "activations", "logits")  # measured together, as training_step
RESIDENT = ("base_weights", "adapters_optimizer", "cuda_context")


def planned_training_step_gib(plan) -> float:
    """The plan's training-phase figure less the resident state and the engine: its trainer,
    activations and logits items, less the overlap it takes off (``plan/memory.py: plan``)."""
    p = plan.inputs
    tokens = p.policy.train_micro_batch * (p.prompt_tokens + p.new_tokens)
    overlap = min(logits_transient_bytes(p), backward_working_bytes(p, tokens)) / GIB
    return sum(plan.items[k] for k in UNSPLIT) - overlap


def planned_engine_asleep_gib(plan) -> float:
    """What the engine keeps during training, as the plan counts it (its class's figure)."""
    return plan.engine.training / GIB


def contexts(plan) -> int:
    """CUDA contexts the plan counts on the GPU (the trainer's + the engine's processes)."""
    from populora.plan.memory import cuda_contexts

    return cuda_contexts(plan.inputs.engine_class)


def planned_items(plan) -> dict[str, float]:
    """Every figure the doctor compares, planned, in GiB (``cuda_context``: one process's)."""
    out = dict(plan.items)
    if out.get("cuda_context"):
        out["cuda_context"] = out["cuda_context"] / contexts(plan)
    out["training_step"] = planned_training_step_gib(plan)
    if plan.engine.sleeps:
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
        elif item == "engine" and plan.inputs.engine_class.shares_trainer_weights:  # the HF engine
            # it generates on the trainer's model: the doctor's arms on that trainer are its measure
            method = ("not measured: the arms generate far fewer rows than the plan's max_batch_size "
                      "x the longest prompt")
        else:
            method = "not measured"
        rows.append(ItemComparison(item, planned, gib, ratio(gib, planned), method))
    return tuple(rows)


def engine_while_training(plan, engine: float, value) -> float:
    """What the engine keeps while the trainer runs: asleep, the ``engine_asleep`` item; when its
    class says it keeps all it holds awake, the ``engine`` item (measured where measured); else its
    planned figure (0 for an engine whose memory exists only while it generates)."""
    own = plan.engine
    if own.sleeps:
        return value("engine_asleep")
    if own.training == own.awake:
        return engine
    return own.training / GIB


def verdict(preset: str, plan, items: tuple[ItemComparison, ...], failed: str | None = None,
            reserved_slack_gib: float = 0.0) -> FitVerdict:
    """Fits / does not fit from the measured phases (module docstring). ``failed``: a stage ran out of
    memory (then it does not fit, whatever the sums say); ``reserved_slack_gib``: the allocator's
    reserved peak above its allocated peak during the training step, where measured."""
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

    resident = sum(value(k) for k in RESIDENT)  # cuda_context: the trainer's process
    engine = value("engine")
    others = contexts(plan) - 1
    ctx = by.get("cuda_context")
    if others and ctx is not None and (by.get("engine") is None or by["engine"].measured_gib is None):
        resident += others * ctx.planned_gib  # the engine's processes, not measured: the plan's per-process figure
        from_plan.append(f"cuda_context of the engine's {others} process(es)")
    phases = {"generation": resident + engine,
              "training": resident + engine_while_training(plan, engine, value) + value("training_step")
              + max(0.0, reserved_slack_gib)}
    limit = plan.gpu_gib * (1 - plan.min_headroom)
    fits = failed is None and max(phases.values()) <= limit
    return FitVerdict(preset, fits, plan.gpu_gib, plan.min_headroom, phases, dict(plan.phases),
                      tuple(dict.fromkeys(from_plan)), plan.fits, max(0.0, reserved_slack_gib))
