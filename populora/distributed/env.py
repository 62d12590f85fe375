"""Which rank am I: the launcher's environment, and the process group.

Three standard launchers, one convention (torch's ``env://``: ``RANK``, ``WORLD_SIZE``,
``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``):

- ``torchrun`` (and ``populora train --nproc W``, which calls torch's own launcher) sets them;
- submitit sets them through ``submitit.helpers.TorchDistributedEnvironment().export()``
  (``jobs/train.py``);
- plain Slurm ``srun`` sets ``SLURM_PROCID`` / ``SLURM_NTASKS`` / ``SLURM_LOCALID``; we read those as
  submitit's ``TorchDistributedEnvironment`` does (``slurm/train.sbatch`` exports ``MASTER_ADDR`` as
  the first host of the job and ``MASTER_PORT`` from the job id).

No variables (or a world of one) is the single-process run: the same code with ``LocalComm``.
"""

from __future__ import annotations

import datetime
import os
import random
from dataclasses import dataclass

from populora.distributed.comm import Comm, LocalComm, TorchComm


@dataclass(frozen=True)
class RankEnv:
    """Where this process sits in the run."""

    rank: int = 0
    world: int = 1
    local_rank: int = 0
    local_world: int = 1
    launcher: str = "single"  # single | torchrun | slurm


class LauncherError(RuntimeError):
    """The launcher's environment is inconsistent; the message names the variable."""


def _int(env: dict[str, str], key: str) -> int:
    try:
        return int(env[key])
    except (KeyError, ValueError):
        raise LauncherError(f"environment variable {key}={env.get(key)!r} must be an integer") from None


def rank_env(env: dict[str, str] | None = None) -> RankEnv:
    """This process's rank and world, from torchrun's or Slurm's variables (see the module docstring)."""
    env = dict(os.environ if env is None else env)
    if "RANK" in env and "WORLD_SIZE" in env:
        rank, world = _int(env, "RANK"), _int(env, "WORLD_SIZE")
        local = _int(env, "LOCAL_RANK") if "LOCAL_RANK" in env else rank
        local_world = _int(env, "LOCAL_WORLD_SIZE") if "LOCAL_WORLD_SIZE" in env else world
        launcher = "torchrun"
    elif "SLURM_PROCID" in env and "SLURM_NTASKS" in env and "SLURM_STEP_ID" in env:
        rank, world = _int(env, "SLURM_PROCID"), _int(env, "SLURM_NTASKS")
        local = _int(env, "SLURM_LOCALID") if "SLURM_LOCALID" in env else 0
        nodes = _int(env, "SLURM_STEP_NUM_NODES") if "SLURM_STEP_NUM_NODES" in env else 1
        local_world = max(1, world // max(1, nodes))
        launcher = "slurm"
    else:
        return RankEnv()
    if not 0 <= rank < world:
        raise LauncherError(f"rank {rank} is outside a world of {world}")
    if not 0 <= local < local_world:
        raise LauncherError(f"local rank {local} is outside {local_world} local ranks")
    return RankEnv(rank, world, local, local_world, launcher)


def export_slurm_rendezvous(env: RankEnv) -> None:
    """For ``srun``: the ``env://`` variables torch needs, as submitit's TorchDistributedEnvironment
    sets them (master = the job's first host; port derived from the job id unless given)."""
    os.environ.setdefault("RANK", str(env.rank))
    os.environ.setdefault("WORLD_SIZE", str(env.world))
    os.environ.setdefault("LOCAL_RANK", str(env.local_rank))
    os.environ.setdefault("LOCAL_WORLD_SIZE", str(env.local_world))
    if "MASTER_ADDR" not in os.environ:
        raise LauncherError("MASTER_ADDR is not set: export it in the sbatch script "
                            "(the first host of $SLURM_JOB_NODELIST, see slurm/train.sbatch)")
    os.environ.setdefault("MASTER_PORT", str(random.Random(os.environ.get("SLURM_JOB_ID", "0")).randint(20000, 60000)))


def init_comm(device: str = "cpu", timeout_s: float = 1800.0, env: RankEnv | None = None) -> Comm:
    """The communicator of this process: ``LocalComm`` for one rank, else the torch process group
    (gloo on CPU, NCCL on CUDA) with ``timeout_s`` for every collective."""
    env = env or rank_env()
    if env.world == 1:
        return LocalComm()
    import torch.distributed as dist

    if env.launcher == "slurm":
        export_slurm_rendezvous(env)
    if str(device).startswith("cuda"):
        import torch

        # one GPU per rank: Slurm may already show each task only its own GPU
        torch.cuda.set_device(env.local_rank % torch.cuda.device_count())
        device = f"cuda:{torch.cuda.current_device()}"
        backend = "cpu:gloo,cuda:nccl"  # records go over gloo, gradients and weights over NCCL
    else:
        backend = "gloo"
    if not dist.is_initialized():
        dist.init_process_group(backend=backend, rank=env.rank, world_size=env.world,
                                timeout=datetime.timedelta(seconds=timeout_s))
    return TorchComm(device=device)
