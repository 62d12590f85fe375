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
