"""What a plan asks the cluster for: GPUs and GPU-hours of every stage and in total.

GPU-hours are counted at each job's time limit (``time_min``), the most a stage can hold its GPUs
before a requeue; a training job that is preempted or hits its limit is requeued (up to the profile's
``max_num_timeout`` times) and holds them again, so the numbers are those of one pass.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from jobs.stages import Stage


@dataclass(frozen=True)
class StageResources:
    key: str
    tasks: int
    gpus_per_task: int
    time_min: int

    @property
    def gpus(self) -> int:
        """GPUs the stage holds when all its tasks run at once."""
        return self.tasks * self.gpus_per_task

    @property
    def gpu_hours(self) -> float:
        """GPU-hours of the stage at its time limit."""
        return self.gpus * self.time_min / 60


def stage_resources(stage: Stage) -> StageResources:
    return StageResources(stage.key, len(stage.calls), stage.profile.gpus, stage.profile.time_min)


def resources_table(stages: Sequence[Stage]) -> str:
    """One line per stage and a total line: tasks, GPUs per task, GPUs, time limit and GPU-hours."""
    rows = [stage_resources(s) for s in stages]
    width = max([len("total"), *(len(r.key) for r in rows)])
    lines = [f"{'stage':<{width}}  tasks  GPUs/task  GPUs  time limit  GPU-hours (at the limit)"]
    for r in rows:
        lines.append(f"{r.key:<{width}}  {r.tasks:>5}  {r.gpus_per_task:>9}  {r.gpus:>4}  {r.time_min / 60:>8.1f} h  "
                     f"{r.gpu_hours:>9.1f}")
    total_gpus = sum(r.gpus for r in rows)
    total_hours = sum(r.gpu_hours for r in rows)
    lines.append(f"{'total':<{width}}  {sum(r.tasks for r in rows):>5}  {'':>9}  {total_gpus:>4}  {'':>10}  "
                 f"{total_hours:>9.1f}")
    return "\n".join(lines)


def population_table(plan) -> str:
    """GPU-hours per population size of a sweep plan (``jobs.sweep.SweepPlan``): its runs, GPUs per run,
    training at the time limit (one pass) and as the step cost model estimates it, evaluation, total.

    The estimate is ``populora.distributed.cost``'s step (generation and training of a 7B base at assumed
    throughputs, nothing measured) times the run's steps on its GPUs; a run whose estimate is past its
    time limit is requeued (and counts more than one pass)."""
    from populora.distributed.cost import step_cost

    stages = {s.key: stage_resources(s) for s in plan.stages}
    train_of = {label: s.key for s in plan.stages if s.key.startswith("train") for label in s.labels}
    groups: dict[str, list] = {}
    for r in plan.runs:
        groups.setdefault(r.population or r.name, []).append(r)
    head = (f"{'population':<12} {'runs':>4} {'GPUs/run':>8} {'est. s/step':>11} {'steps':>5} {'est. train GPU-h':>16} "
            f"{'train GPU-h (limit)':>19} {'eval GPU-h':>10} {'total GPU-h (limit)':>19}")
    lines = ["GPU-hours per population size (training at its time limit, one pass; est.: the step cost model of "
             "populora.distributed.cost, assumed throughputs, not measured)", head]
    marked = False
    for pop, runs in groups.items():
        train = stages[train_of[runs[0].name]]
        gpus = train.gpus_per_task
        cfg = plan.configs.get(runs[0].name)
        step_s = step_cost(cfg, gpus)["step_s"] if cfg is not None else None
        est = sum(step_s * plan.configs[r.name].selfplay.steps * gpus / 3600 for r in runs) if cfg is not None else None
        at_limit = len(runs) * gpus * train.time_min / 60
        evals = sum(stages[f"eval:{r.name}"].gpu_hours for r in runs if f"eval:{r.name}" in stages)
        steps = cfg.selfplay.steps if cfg is not None else None
        over = est is not None and est / len(runs) / gpus > train.time_min / 60
        lines.append(f"{pop:<12} {len(runs):>4} {gpus:>8} {'-' if step_s is None else f'{step_s:.0f}':>11} "
                     f"{'-' if steps is None else steps:>5} {'-' if est is None else f'{est:.1f}':>16}{'*' if over else ' '}"
                     f"{at_limit:>18.1f} {evals:>10.1f} {at_limit + evals:>19.1f}")
        marked = marked or over
    if marked:
        lines.append("* the estimate is past the training time limit: such a run is requeued and holds its GPUs again")
    return "\n".join(lines)
