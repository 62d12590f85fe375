"""Stages of submitit jobs (single jobs or arrays) linked by ``afterok`` dependencies.

A sweep is three kinds of stage: one training array, one evaluation array per run (each after its
own training task) and one leaderboard job (after every evaluation array). :func:`submit_stages`
submits the stages in order on Slurm, turning each dependency into ``afterok:<id>`` (a whole array,
or one task ``<array>_<i>``), with ``--kill-on-invalid-dep=yes`` so a job whose dependency failed
is cancelled instead of pending forever. On the ``local`` and ``debug`` executors, which have no
scheduler, it runs the stages one after the other and waits for each stage's dependencies itself.
:func:`render_stages` prints the sbatch scripts that would be submitted (``--dry-run``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jobs.executors import make_executor, sbatch_script
from jobs.profiles import ClusterProfile


@dataclass
class Stage:
    """One submission: ``len(calls) == 1`` is a single job, more is a job array.

    ``labels`` name every task for humans (run name, evaluation shard); ``after`` lists
    ``(stage key, task index or None)``: the stage waits for that task, or the whole stage."""

    key: str
    name: str
    profile: ClusterProfile
    folder: Path
    calls: list[Callable[[], Any]]
    labels: list[str]
    after: list[tuple[str, int | None]] = field(default_factory=list)
    multi_task: bool = False  # training: the profile's tasks_per_node ranks per node; else one task

    def __post_init__(self) -> None:
        if not self.calls or len(self.calls) != len(self.labels):
            raise ValueError(f"stage {self.key}: {len(self.calls)} calls for {len(self.labels)} labels")


@dataclass
class SubmittedStage:
    stage: Stage
    jobs: list[Any]  # submitit Job objects, one per task
    dependency: str | None

    @property
    def job_id(self) -> str:
        """The Slurm job id of the stage (the array id for arrays)."""
        return str(self.jobs[0].job_id).split("_")[0]

    def task_id(self, index: int | None) -> str:
        if index is None or len(self.jobs) == 1:
            return self.job_id
        return str(self.jobs[index].job_id)


SLURM_DEPENDENCY_FLAGS = {"kill-on-invalid-dep": "yes"}


def dependency_string(stage: Stage, ids: Callable[[str, int | None], str]) -> str | None:
    """``afterok:a:b...`` for the stage's dependencies, with ``ids(key, index)`` giving job ids."""
    if not stage.after:
        return None
    return "afterok:" + ":".join(ids(key, index) for key, index in stage.after)


def _check_order(stages: Sequence[Stage]) -> None:
    seen: set[str] = set()
    for stage in stages:
        for key, _ in stage.after:
            if key not in seen:
                raise ValueError(f"stage {stage.key} depends on {key}, which is not an earlier stage")
        if stage.key in seen:
            raise ValueError(f"duplicate stage key {stage.key}")
        seen.add(stage.key)


def _with_dependency_flags(profile: ClusterProfile, has_dependency: bool) -> ClusterProfile:
    if not has_dependency:
        return profile
    return profile.replace(sbatch_extra={**SLURM_DEPENDENCY_FLAGS, **profile.sbatch_extra})


def render_stages(stages: Sequence[Stage]) -> str:
    """The sbatch scripts of every Slurm stage; the job ids of dependencies, unknown before
    submission, are shown as ``JOBID.<stage>`` (``:`` in stage keys written ``.``)."""
    _check_order(stages)
    sizes = {s.key: len(s.calls) for s in stages}

    def placeholder(key: str, index: int | None) -> str:
        name = "JOBID." + key.replace(":", ".")
        return name if index is None or sizes[key] == 1 else f"{name}_{index}"

    parts = []
    for stage in stages:
        dependency = dependency_string(stage, placeholder)
        profile = _with_dependency_flags(stage.profile, dependency is not None)
        tasks = ", ".join(stage.labels)
        parts.append(f"### stage {stage.key}: {len(stage.calls)} task(s): {tasks}\n")
        parts.append(sbatch_script(profile, stage.folder, stage.name, len(stage.calls), dependency,
                                   tasks=stage.multi_task))
    return "\n".join(parts)


def submit_stages(stages: Sequence[Stage], on_submit: Callable[[SubmittedStage], None] | None = None
                ) -> dict[str, SubmittedStage]:
    """Submit every stage in order; returns stage key -> SubmittedStage.

    ``on_submit`` is called after each stage is submitted (the sweep records job ids in its
    manifest as it goes, so a failure half-way still leaves the submitted ids on disk)."""
    _check_order(stages)
    done: dict[str, SubmittedStage] = {}
    for stage in stages:
        scheduler = stage.profile.executor == "slurm"
        if scheduler:
            dependency = dependency_string(stage, lambda key, index: done[key].task_id(index))
        else:  # no scheduler: wait here; a failed dependency raises and stops the plan
            for key, index in stage.after:
                jobs = done[key].jobs if index is None else [done[key].jobs[index]]
                for job in jobs:
                    job.result()
            dependency = None
        profile = _with_dependency_flags(stage.profile, dependency is not None)
        executor = make_executor(profile, stage.folder, stage.name, dependency, tasks=stage.multi_task)
        if len(stage.calls) == 1:
            jobs = [executor.submit(stage.calls[0])]
        else:
            with executor.batch():
                pending = [executor.submit(call) for call in stage.calls]
            jobs = list(pending)
        submitted = SubmittedStage(stage, jobs, dependency)
        done[stage.key] = submitted
        if on_submit is not None:
            on_submit(submitted)
    return done
