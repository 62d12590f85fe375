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

One GPU per rank, whatever the launcher: before anything initialises CUDA, a rank that sees several
GPUs narrows ``CUDA_VISIBLE_DEVICES`` to its own (``narrow_visible_devices``), so the trainer and
every process it starts (vLLM's engine) see exactly one GPU, ``cuda:0``.
"""

from __future__ import annotations

import datetime
import os
import random
import subprocess
from collections.abc import Mapping
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


def _entries(value: str) -> list[str]:
    return [e.strip() for e in value.split(",") if e.strip()]


def narrowed_visible_devices(env: RankEnv, environ: Mapping[str, str], device_count: int | None) -> str | None:
    """The value ``CUDA_VISIBLE_DEVICES`` should take for this rank, or ``None`` to leave it as it is.

    - one rank (world 1): ``None``, the process keeps whatever it sees;
    - ``CUDA_VISIBLE_DEVICES`` lists several entries (indices or ``GPU-...`` UUIDs; torchrun, ``--nproc``,
      plain ``srun``): entry ``local_rank``;
    - it lists one entry (``srun --gpus-per-task=1``, submitit's ``set_cuda_visible_devices``) or none
      (``""``: no GPU): ``None``;
    - unset and Slurm lists the step's or job's GPUs (``SLURM_STEP_GPUS``, else ``SLURM_JOB_GPUS``:
      node-level indices): when the machine shows exactly that many devices they are the job's own,
      renumbered from 0 by a device cgroup, so ``str(local_rank)`` (``None`` for one); otherwise
      (more shown, or the count unknown) Slurm's own entry ``local_rank`` (the only one, if one);
    - unset and ``device_count`` (GPUs on the machine, counted without CUDA: ``visible_device_count``)
      is more than one: ``str(local_rank)``.

    A local rank beyond the listed devices is a ``LauncherError`` naming the variables.
    """
    if env.world == 1:
        return None
    where = "CUDA_VISIBLE_DEVICES"
    listed = environ.get("CUDA_VISIBLE_DEVICES")
    if listed is None:
        key = next((k for k in ("SLURM_STEP_GPUS", "SLURM_JOB_GPUS") if _entries(environ.get(k, ""))), None)
        if key is not None:
            slurm = _entries(environ[key])
            if device_count == len(slurm):  # a device cgroup shows only these, renumbered from 0
                if len(slurm) == 1:
                    return None
                slurm = [str(i) for i in range(len(slurm))]
            where, entries = f"{key} (CUDA_VISIBLE_DEVICES unset)", slurm
            if len(entries) == 1:
                return entries[0]
        else:
            if not device_count or device_count < 2:
                return None
            where = f"the {device_count} GPUs of this machine (CUDA_VISIBLE_DEVICES unset)"
            entries = [str(i) for i in range(device_count)]
    else:
        entries = _entries(listed)
        if len(entries) <= 1:
            return None
    if env.local_rank >= len(entries):
        local = "SLURM_LOCALID" if env.launcher == "slurm" else "LOCAL_RANK"
        raise LauncherError(f"local rank {env.local_rank} ({local}) has no GPU of its own: {where} "
                            f"lists {len(entries)} device(s) ({','.join(entries)}); start at most one rank per GPU")
    return entries[env.local_rank]


def visible_device_count() -> int | None:
    """GPUs this machine shows, counted without initialising CUDA: ``nvidia-smi -L`` (which honours a
    device cgroup), else the entries of ``/proc/driver/nvidia/gpus``; ``None`` when neither answers."""
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
        if out.returncode == 0:
            return sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))
    except (OSError, subprocess.SubprocessError):
        pass
    try:
        return len(os.listdir("/proc/driver/nvidia/gpus"))
    except OSError:
        return None


def narrow_visible_devices(env: RankEnv) -> str | None:
    """Apply ``narrowed_visible_devices`` to this process (before CUDA is initialised); return the
    ``CUDA_VISIBLE_DEVICES`` the rank ends with (``None``: unset). Idempotent: a narrowed rank sees one."""
    if env.world > 1:
        count = None if "CUDA_VISIBLE_DEVICES" in os.environ else visible_device_count()
        value = narrowed_visible_devices(env, os.environ, count)
        if value is not None:
            os.environ["CUDA_VISIBLE_DEVICES"] = value
    return os.environ.get("CUDA_VISIBLE_DEVICES")


# PyTorch's expandable segments: memory the trainer frees (activations of a pass, the log-prob
# tail) is returned in whole pages instead of leaving fragments of cached blocks, so a sleeping vLLM
# engine can take it back at wake-up. vLLM 0.32 tolerates it: its sleep-mode pool turns the option
# off around its own allocations (vllm/device_allocator/cumem.py) and restores it.
EXPANDABLE_SEGMENTS = "expandable_segments:True"


def allocator_conf(environ: Mapping[str, str]) -> str | None:
    """The ``PYTORCH_CUDA_ALLOC_CONF`` to set, or ``None`` to leave the user's allocator settings alone
    (either variable set, even empty, is the user's choice)."""
    if "PYTORCH_CUDA_ALLOC_CONF" in environ or "PYTORCH_ALLOC_CONF" in environ:
        return None
    return EXPANDABLE_SEGMENTS


def before_cuda(env: RankEnv) -> str | None:
    """What a rank does before anything initialises CUDA: narrow ``CUDA_VISIBLE_DEVICES`` to its own
    GPU (``narrow_visible_devices``, returned) and give the trainer's allocator expandable segments
    (``allocator_conf``). Idempotent."""
    if (conf := allocator_conf(os.environ)) is not None:
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = conf
    return narrow_visible_devices(env)


def local_cuda_index(local_rank: int, device_count: int) -> int:
    """This rank's CUDA device: 0 when it sees one GPU (narrowed), else its local rank among those seen."""
    return 0 if device_count <= 1 else local_rank % device_count


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

        # one GPU per rank: narrow_visible_devices (or Slurm, or submitit) shows each rank its own GPU
        torch.cuda.set_device(local_cuda_index(env.local_rank, torch.cuda.device_count()))
        device = f"cuda:{torch.cuda.current_device()}"
        backend = "cpu:gloo,cuda:nccl"  # records go over gloo, gradients and weights over NCCL
    else:
        backend = "gloo"
    if not dist.is_initialized():
        dist.init_process_group(backend=backend, rank=env.rank, world_size=env.world,
                                timeout=datetime.timedelta(seconds=timeout_s))
    return TorchComm(device=device)
