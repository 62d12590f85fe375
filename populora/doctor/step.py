"""The self-play step stage: one step of a 4T+4S population and one of its compute-matched baseline
at a preset's shapes, every phase timed, and their ratio (the paper reports 1.31x with vLLM).

Each arm is the loop ``populora train`` runs (``SelfPlay.step``) on random weights of the preset's
architecture: a warm-up step (seeding, first-call costs: timed and reported apart), then one timed
step whose phases come from the loop's own stopwatch (``time/<phase>_s``: generate, validate, solve,
check, train, evolve, and publish where the engine publishes). Evolution runs in the timed step of the
population (``evolution.interval=1``, ``min_age=0``), as in ``populora bench step``.

What differs from the preset, so that a step fits a doctor's budget, is listed in the record
(``overrides``): shorter completions, fewer sequences per member, the hand-written seed tasks (a
random model writes no valid seed programs), and the HF engine where vLLM cannot run (vLLM is not
importable, or the base is random weights built in memory, which vLLM cannot load). Random weights
write no valid tasks, so validation and checking cost what rejecting every proposal costs; the
generation and training phases, the bulk of a step, have the preset's model and adapter shapes.
"""

from __future__ import annotations

import importlib.util
import math
import tempfile
import time
from pathlib import Path

from populora.doctor.records import StepArm, StepComparison
from populora.doctor.stages import Unavailable

STEP_NEW_TOKENS = {"cuda": 128, "cpu": 32}  # ours: completions of the step, short enough for a budget (--step-new-tokens)
STEP_SEQUENCES = 8  # ours: sequences per member, rounded up to whole groups (the preset's if smaller)
STEP_ROLLOUTS = 2  # ours: student attempts per task (the preset's if smaller): a group, at the least cost
TEACHERS = STUDENTS = 4  # the paper's 4T+4S systems figure


def step_model(name: str) -> tuple[str, str]:
    """``(policy.model for the step, how)``: the embedded models and local directories as they are;
    a base known only by its shape as the random-weights model of that shape built in memory."""
    from populora.doctor.model import is_tiny
    from populora.plan.shapes import model_shape
    from populora.policy.models.shapes import SHAPES, shape_config

    if is_tiny(name) or name in SHAPES or name == "smollm2-135m":
        return name, "as the preset names it"
    if (Path(name).expanduser() / "config.json").is_file() and any(Path(name).expanduser().glob("*.safetensors")):
        return name, "the preset's local weights"
    shape = model_shape(name)
    for shaped in SHAPES:
        if model_shape(shaped).n_params() == shape.n_params() and shape_config(shaped).hidden_size == shape.hidden:
            return shaped, f"random weights of {name}'s shape ({shaped}, built in memory)"
    raise Unavailable(f"no random-weights model of {name}'s shape to run a step on (known: {', '.join(SHAPES)}); "
                      "give a local model directory as policy.model")


def step_sequences(types: int, rollouts: int, proposer_fraction: float, preset: int,
                   target: int = STEP_SEQUENCES) -> int | None:
    """The fewest sequences per member, from ``target`` up to the preset's, that the run config accepts
    for both arms: whole proposals per task type, whole groups of ``rollouts``, and the baseline's split
    of them (``config.baseline_split``) likewise; None where no count does (pure)."""
    whole = math.lcm(types, rollouts)
    for n in range(whole * max(1, -(-min(target, preset) // whole)), preset + 1, whole):
        props = round(n * proposer_fraction)
        if 0 < props < n and props % types == 0 and (n - props) % rollouts == 0:
            return n
    return None


def step_sizes(cfg, device: str, new_tokens: int | None = None) -> tuple[int, int, int, int]:
    """``(sequences per member, rollouts, teacher and student new tokens)`` of the step stage: fewer
    rollouts and sequences than the preset's where the config accepts them, else the preset's own;
    ``new_tokens`` (``--step-new-tokens``, default ``STEP_NEW_TOKENS[device]``) caps the completions."""
    sp = cfg.selfplay
    types, fraction = len(cfg.tasks.types), sp.baseline_proposer_fraction
    rollouts = min(STEP_ROLLOUTS, sp.rollouts)
    sequences = step_sequences(types, rollouts, fraction, sp.sequences_per_adapter)
    if sequences is None:
        rollouts, sequences = sp.rollouts, step_sequences(types, sp.rollouts, fraction, sp.sequences_per_adapter)
    new = new_tokens or STEP_NEW_TOKENS[device]
    return (sequences or sp.sequences_per_adapter, rollouts, min(new, sp.teacher_sampling.max_new_tokens),
            min(new, sp.student_sampling.max_new_tokens))


def step_overrides(cfg, device: str, dtype: str, new_tokens: int | None = None) -> tuple[list[str], str, str]:
    """``(overrides, model, engine)`` of the step stage for preset ``cfg`` (module docstring)."""
    model, how = step_model(str(cfg.policy.model))
    random_in_memory = "built in memory" in how
    engine = cfg.policy.engine
    if engine != "hf" and (random_in_memory or importlib.util.find_spec("vllm") is None):
        engine = "hf"
    sequences, rollouts, teacher_new, student_new = step_sizes(cfg, device, new_tokens)
    over = [f"policy.model={model}", f"policy.device={device}", f"policy.dtype={dtype}", f"policy.engine={engine}",
            f"selfplay.teacher_sampling.max_new_tokens={teacher_new}",
            f"selfplay.student_sampling.max_new_tokens={student_new}",
            f"selfplay.sequences_per_adapter={sequences}", f"selfplay.rollouts={rollouts}",
            "tasks.seeds.source=handwritten",
            "selfplay.steps=2", "evolution.interval=1", "evolution.min_age=0"]
    return over, f"{model} ({how})", engine


def time_arm(config_path: str, overrides: list[str], label: str) -> StepArm:
    """One arm: a warm-up step, then one timed step, in a throw-away run directory."""
    from populora.config import load_config
    from populora.selfplay.loop import SelfPlay

    cfg = load_config(config_path, overrides)
    with tempfile.TemporaryDirectory(prefix="populora-doctor-step-") as tmp:
        sp = SelfPlay(cfg, tmp)
        try:
            t0 = time.perf_counter()
            sp.step(1)
            warm = time.perf_counter() - t0
            t0 = time.perf_counter()
            row = sp.step(2)
            seconds = time.perf_counter() - t0
        finally:
            sp.close()
    phases = {k[len("time/"):-len("_s")]: float(v) for k, v in row.items()
              if k.startswith("time/") and k.endswith("_s") and isinstance(v, int | float)}
    return StepArm(label, len(sp.members), warm, seconds, phases)


# what the paper's step had that the doctor's does not (its 1.31x is not this figure's twin)
PAPER_HAD = ("the paper's 1.31x (4T+4S over one agent) was measured with vLLM's multi-LoRA engine generating for "
             "every member, on its own real tasks and completions of up to 8096 tokens")


def phase_groups(phases: dict[str, float]) -> dict[str, float]:
    """The loop's phases as the four the paper's cost splits into: generation (propose + solve: the two
    generate calls), verification (validate + check: the sandbox), training (train), publishing (publish +
    check_served: the new weights to the engine, and the check that it serves them); the rest as other."""
    groups = {"generation": ("generate", "solve"), "verification": ("validate", "check"), "training": ("train",),
              "publishing": ("publish", "check_served")}
    out = {g: sum(phases.get(p, 0.0) for p in ps) for g, ps in groups.items()}
    grouped = {p for ps in groups.values() for p in ps} | {"collectives"}
    out["other"] = sum(v for k, v in phases.items() if k not in grouped)
    return out


def run_step(config_path: str, cfg, device: str, dtype: str, base_overrides: tuple[str, ...],
             new_tokens: int | None = None) -> StepComparison:
    over, model, engine = step_overrides(cfg, device, dtype, new_tokens)
    notes = []
    if engine != cfg.policy.engine:
        notes.append(f"engine {engine} instead of the preset's {cfg.policy.engine}: "
                     + ("vLLM cannot load random weights built in memory" if "memory" in model else "vLLM is not importable"))
    if engine != "vllm":
        notes.append(f"not the paper's setting: {PAPER_HAD}; this step generates with the {engine} engine "
                     "(policy/multi_lora.py) on random weights, with the completion lengths listed above")
    notes.append("random weights write no valid tasks: validate and check reject every proposal; solve runs on "
                 "the hand-written seed tasks")
    population = [*base_overrides, *over, f"population.teachers={TEACHERS}", f"population.students={STUDENTS}",
                  "population.baseline=false"]
    baseline = [*base_overrides, *over, "population.baseline=true", "population.teachers=1", "population.students=1"]
    arms = (time_arm(config_path, population, f"{TEACHERS}T+{STUDENTS}S"), time_arm(config_path, baseline, "baseline"))
    return StepComparison(cfg.name, model, engine, tuple(over), arms, tuple(notes))
