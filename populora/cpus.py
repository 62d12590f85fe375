"""The CPU cores this process may run on, and one rank's share of them (pure functions of ``os``).

Below both the policy layer (the trainer's torch threads, ``policy.cpu_threads: 0``) and the
distributed layer (sandbox workers per rank), so neither imports the other for it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping


def available_cpus() -> int:
    """The cores this process may run on (its affinity: Slurm's allocation, ``taskset``), not the machine's."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # no sched_getaffinity (macOS)
        return os.cpu_count() or 1


def rank_cpu_budget(cpus: int, local_world: int, environ: Mapping[str, str]) -> int:
    """Cores for one rank's CPU work (sandbox workers), out of the ``cpus`` this process may use.

    Ranks started by one launcher on a node (torchrun, ``--nproc``) share the process's cores: each
    gets ``cpus // local_world``. Ranks started as Slurm tasks (``srun``: ``SLURM_STEP_ID`` and
    several ``SLURM_NTASKS``) already hold their own cores: each gets ``cpus``, at most
    ``SLURM_CPUS_PER_TASK``.
    """
    try:
        tasks = int(environ.get("SLURM_NTASKS", "1"))
        per_task = int(environ.get("SLURM_CPUS_PER_TASK", "0"))
    except ValueError:
        tasks, per_task = 1, 0
    if "SLURM_STEP_ID" in environ and tasks > 1 and per_task > 0:
        return max(1, min(cpus, per_task))
    return max(1, cpus // max(1, local_world))


def cpu_share(environ: Mapping[str, str]) -> int:
    """This rank's cores (``rank_cpu_budget`` of the process's affinity), with the local world size
    from the launcher's ``LOCAL_WORLD_SIZE`` (1 when unset)."""
    try:
        local_world = int(environ.get("LOCAL_WORLD_SIZE", "1"))
    except ValueError:
        local_world = 1
    return rank_cpu_budget(available_cpus(), local_world, environ)
