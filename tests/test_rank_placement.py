"""One GPU per rank for every launcher (``CUDA_VISIBLE_DEVICES`` narrowed before CUDA starts), each
rank's placement recorded in ``RUN_DIR/ranks.json``, and CPU budgets from the job's allocation."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from populora.cpus import cpu_share, rank_cpu_budget
from populora.distributed.env import (
    EXPANDABLE_SEGMENTS,
    LauncherError,
    RankEnv,
    allocator_conf,
    before_cuda,
    local_cuda_index,
    narrow_visible_devices,
    narrowed_visible_devices,
    rank_env,
)

ROOT = Path(__file__).resolve().parents[1]
UUIDS = "GPU-0a1b2c3d-0000-0000-0000-000000000000,GPU-0a1b2c3d-0000-0000-0000-000000000001"


def rank(local: int, local_world: int = 8, world: int = 8, launcher: str = "torchrun") -> RankEnv:
    return RankEnv(rank=local, world=world, local_rank=local, local_world=local_world, launcher=launcher)


def test_torchrun_with_eight_visible_picks_the_local_ranks_entry():
    env = rank_env({"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "3", "LOCAL_WORLD_SIZE": "8"})
    assert narrowed_visible_devices(env, {"CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7"}, 8) == "3"
    assert narrowed_visible_devices(rank(1, 2, 2), {"CUDA_VISIBLE_DEVICES": "4, 6"}, None) == "6"


def test_unset_on_a_multi_gpu_machine_uses_the_local_rank():
    assert narrowed_visible_devices(rank(5), {}, 8) == "5"
    assert narrowed_visible_devices(rank(1, 2, 2), {}, 1) is None  # one GPU (or a CPU machine): nothing to do
    assert narrowed_visible_devices(rank(1, 2, 2), {}, None) is None
    with pytest.raises(LauncherError, match="LOCAL_RANK"):
        narrowed_visible_devices(rank(3, 4, 4), {}, 2)


def test_one_rank_is_left_alone():
    assert narrowed_visible_devices(RankEnv(), {"CUDA_VISIBLE_DEVICES": "0,1,2,3"}, 4) is None
    assert narrowed_visible_devices(RankEnv(), {}, 8) is None


def slurm_env(local: int, tasks: int = 8, **extra: str) -> tuple[RankEnv, dict[str, str]]:
    environ = {"SLURM_PROCID": str(local), "SLURM_NTASKS": str(tasks), "SLURM_LOCALID": str(local),
               "SLURM_STEP_ID": "0", "SLURM_STEP_NUM_NODES": "1", **extra}
    return rank_env(environ), environ


def test_srun_without_per_task_gpus_every_task_sees_all_and_narrows():
    env, environ = slurm_env(2, CUDA_VISIBLE_DEVICES="0,1,2,3,4,5,6,7", SLURM_STEP_GPUS="0,1,2,3,4,5,6,7")
    assert env.launcher == "slurm" and narrowed_visible_devices(env, environ, 8) == "2"


def test_srun_with_per_task_gpus_is_already_narrowed():
    env, environ = slurm_env(5, CUDA_VISIBLE_DEVICES="0", SLURM_STEP_GPUS="5")  # --gpus-per-task=1
    assert narrowed_visible_devices(env, environ, 8) is None


def test_srun_with_slurm_gpus_but_no_cuda_variable():
    # the node shows more GPUs than the job holds: Slurm's node-level index of this task's GPU
    env, environ = slurm_env(1, tasks=2, SLURM_JOB_GPUS="4,5")
    assert narrowed_visible_devices(env, environ, 8) == "5"
    assert narrowed_visible_devices(env, environ, None) == "5"
    # a device cgroup shows only the job's GPUs, renumbered from 0
    assert narrowed_visible_devices(env, environ, 2) == "1"
    env, environ = slurm_env(1, tasks=2, SLURM_STEP_GPUS="6", SLURM_JOB_GPUS="4,5,6,7")
    assert narrowed_visible_devices(env, environ, 8) == "6"  # the step's own GPU wins over the job's list
    assert narrowed_visible_devices(env, environ, 1) is None  # ... and is the only one the cgroup shows


def test_submitit_with_one_visible_is_left_alone():
    # TorchDistributedEnvironment().export(set_cuda_visible_devices=True) exports env:// and one device
    env = rank_env({"RANK": "6", "WORLD_SIZE": "8", "LOCAL_RANK": "6", "LOCAL_WORLD_SIZE": "8"})
    assert narrowed_visible_devices(env, {"CUDA_VISIBLE_DEVICES": "6"}, 8) is None
    assert narrowed_visible_devices(env, {"CUDA_VISIBLE_DEVICES": ""}, 8) is None  # no GPU at all


def test_uuid_lists():
    assert narrowed_visible_devices(rank(1, 2, 2), {"CUDA_VISIBLE_DEVICES": UUIDS}, 2) == UUIDS.split(",")[1]
    assert narrowed_visible_devices(rank(1, 2, 2), {"CUDA_VISIBLE_DEVICES": UUIDS.split(",")[0]}, 2) is None


def test_local_rank_beyond_the_list_names_the_variables():
    with pytest.raises(LauncherError, match="LOCAL_RANK.*CUDA_VISIBLE_DEVICES lists 2"):
        narrowed_visible_devices(rank(2, 4, 4), {"CUDA_VISIBLE_DEVICES": "0,1"}, 2)
    env, environ = slurm_env(3, tasks=4, CUDA_VISIBLE_DEVICES="0,1")
    with pytest.raises(LauncherError, match="SLURM_LOCALID"):
        narrowed_visible_devices(env, environ, 2)


def test_narrowing_applies_once_and_is_idempotent(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")
    env = rank(2, 4, 4)
    assert narrow_visible_devices(env) == "2" and os.environ["CUDA_VISIBLE_DEVICES"] == "2"
    assert narrow_visible_devices(env) == "2"
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert narrow_visible_devices(RankEnv()) is None and "CUDA_VISIBLE_DEVICES" not in os.environ


def test_the_torch_device_is_the_only_visible_one():
    assert local_cuda_index(3, 1) == 0  # narrowed: cuda:0
    assert local_cuda_index(3, 8) == 3  # not narrowed: its local rank's
    assert local_cuda_index(0, 0) == 0


def test_cpu_budget_follows_the_allocation():
    assert rank_cpu_budget(16, 2, {}) == 8  # torchrun: the ranks share the process's cores
    assert rank_cpu_budget(3, 4, {}) == 1
    srun = {"SLURM_STEP_ID": "0", "SLURM_NTASKS": "8", "SLURM_CPUS_PER_TASK": "4"}
    assert rank_cpu_budget(4, 8, srun) == 4  # each task is bound to its own cores already
    assert rank_cpu_budget(64, 8, srun) == 4  # not bound: at most its --cpus-per-task
    # torchrun inside a one-task Slurm job: the task's cores are shared by its ranks
    assert rank_cpu_budget(8, 2, {"SLURM_STEP_ID": "0", "SLURM_NTASKS": "1", "SLURM_CPUS_PER_TASK": "8"}) == 4


def test_torch_threads_follow_the_process_affinity(monkeypatch):
    import torch

    from populora.policy import make_backend

    cores = len(os.sched_getaffinity(0))
    assert cpu_share({}) == cores and cpu_share({"LOCAL_WORLD_SIZE": "2"}) == max(1, cores // 2)
    assert cpu_share({"LOCAL_WORLD_SIZE": "junk"}) == cores
    threads = torch.get_num_threads()
    mine = os.sched_getaffinity(0)
    try:
        os.sched_setaffinity(0, {min(mine)})  # as taskset -c N or Slurm's binding would
        monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
        make_backend({"model": "tiny", "device": "cpu", "cpu_threads": 0}).close()
        assert torch.get_num_threads() == 1
    finally:
        os.sched_setaffinity(0, mine)
        torch.set_num_threads(threads)


def test_the_trainer_allocator_gets_expandable_segments_unless_the_user_chose(monkeypatch):
    assert allocator_conf({}) == EXPANDABLE_SEGMENTS == "expandable_segments:True"
    assert allocator_conf({"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:512"}) is None
    assert allocator_conf({"PYTORCH_ALLOC_CONF": ""}) is None  # torch 2.9+'s name, even empty, is a choice
    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF", raising=False)
    monkeypatch.delenv("PYTORCH_ALLOC_CONF", raising=False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    assert before_cuda(rank(1, local_world=2, world=2)) == "1"
    assert os.environ["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"


@pytest.mark.slow
def test_two_rank_run_records_one_device_per_rank(tmp_path):
    rd = tmp_path / "run"
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "0,1", "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-m", "populora.cli", "train", "--nproc", "2", "--config",
                          str(ROOT / "configs" / "tiny.yaml"), "selfplay.steps=1", "run.tensorboard=false",
                          "--quiet", "--run-dir", str(rd)],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    ranks = json.loads((rd / "ranks.json").read_text())
    assert [(r["rank"], r["local_rank"], r["visible_devices"], r["device"]) for r in ranks] == [
        (0, 0, "0", "cpu"), (1, 1, "1", "cpu")]
    assert all(r["host"] for r in ranks)
    status = subprocess.run([sys.executable, "-m", "populora.cli", "status", str(rd)], cwd=ROOT,
                            capture_output=True, text=True, timeout=300)
    assert status.returncode == 0, status.stderr
    assert "rank 1 (local 1)" in status.stdout and "CUDA_VISIBLE_DEVICES=1" in status.stdout
