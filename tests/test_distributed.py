"""One run over several ranks (torch.distributed, gloo on CPU) equals the one-rank run.

The equality is exact here: every rank draws a request's samples from that request's own seed, the
records of a step are gathered in the same order on every rank, and a member trained by a group of
ranks sums the same per-sequence gradients (AdamW's normalised update then rounds the summation
order's last bits away in float32). docs/distributed.md says which parts are bit-identical and why.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from populora.checkpoint import list_checkpoints
from populora.distributed import placement as place
from populora.distributed.env import LauncherError, rank_env
from populora.policy.adapters import AdapterWeights

ROOT = Path(__file__).resolve().parents[1]
TINY = str(ROOT / "configs" / "tiny.yaml")
# Three sequences per adapter in the population, not tiny.yaml's six (a proposal per task type; a
# task, three rollouts): what these tests check (one rank equals several, a killed rank, the resumes)
# does not depend on the batch size, and every run costs half the steps' time. The baseline keeps six:
# it splits its sequences into proposals (3 task types) and attempts (3 rollouts).
POP = ["population.teachers=4", "population.students=4", "selfplay.steps=4", "run.tensorboard=false",
       "evolution.interval=3", "evolution.min_age=1",  # children born at step 3 train at step 4
       "selfplay.sequences_per_adapter=3"]
BASELINE = ["population.baseline=true", "population.teachers=1", "population.students=1", "selfplay.steps=2",
            "run.tensorboard=false"]


# -- placement: pure ------------------------------------------------------------------------------
def test_members_spread_over_ranks_and_groups_when_fewer_than_ranks():
    slots = ["t0", "t1", "t2", "t3", "s0", "s1", "s2", "s3"]
    p = place.place(slots, 2)
    assert [p[m] for m in slots] == [(0,), (1,)] * 4  # 2 teachers + 2 students per rank
    assert place.hosted(p, 1) == ["t1", "t3", "s1", "s3"]
    assert place.place(slots, 8) == {m: (k,) for k, m in enumerate(slots)}
    assert place.place(["a0"], 4) == {"a0": (0, 1, 2, 3)}  # the baseline: one member, a group of all ranks
    assert place.place(["t0", "s0"], 5) == {"t0": (0, 1, 2), "s0": (3, 4)}
    assert place.place(slots, 1) == {m: (0,) for m in slots}


def test_work_assignment_round_robin_and_leaders():
    p = {"t0": (0,), "a0": (1, 2)}
    assert place.mine(place.round_robin(5, 2), 1) == [1, 3]
    assert place.leader(p, "a0") == 1


def test_rank_environment_from_torchrun_and_slurm():
    assert rank_env({}) .world == 1
    e = rank_env({"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"})
    assert (e.rank, e.world, e.local_rank, e.launcher) == (1, 2, 1, "torchrun")
    s = rank_env({"SLURM_PROCID": "3", "SLURM_NTASKS": "4", "SLURM_LOCALID": "1", "SLURM_STEP_ID": "0",
                  "SLURM_STEP_NUM_NODES": "2"})
    assert (s.rank, s.world, s.local_rank, s.local_world, s.launcher) == (3, 4, 1, 2, "slurm")
    # the batch script itself (no srun step) is not a rank of a multi-task job
    assert rank_env({"SLURM_PROCID": "0", "SLURM_NTASKS": "4"}).world == 1
    with pytest.raises(LauncherError, match="RANK"):
        rank_env({"RANK": "x", "WORLD_SIZE": "2"})
    with pytest.raises(LauncherError, match="outside"):
        rank_env({"RANK": "2", "WORLD_SIZE": "2"})


# -- whole runs: W ranks vs one ----------------------------------------------------------------------
def _train(rd: Path, overrides: list[str], nproc: int = 1, resume: bool = False, timeout: int = 600):
    args = ["--resume", str(rd)] if resume else ["--config", TINY, "--run-dir", str(rd), *overrides]
    cmd = [sys.executable, "-m", "populora.cli", "train", "--quiet", *args]
    if nproc > 1:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
               "-m", "populora.cli", "train", "--quiet", *args]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, out.stderr[-3000:]
    return out


def _adapters(rd: Path) -> dict[str, AdapterWeights]:
    return {p.name: AdapterWeights.load_peft(p) for p in sorted((rd / "adapters").iterdir())}


def _metrics(rd: Path) -> list[dict]:
    return [{k: v for k, v in json.loads(line).items() if not k.startswith("time/")}
            for line in (rd / "metrics.jsonl").read_text().splitlines()]


def _assert_same_run(a: Path, b: Path, atol: float = 1e-5) -> None:
    for name in ("tasks.jsonl", "lineage.jsonl", "examples.jsonl", "members.json"):
        assert (a / name).read_text() == (b / name).read_text(), name
    # float metrics within 1e-5: a rollout's log-probabilities depend in their last bits on which rows
    # share its decode batch (BLAS blocking), which shows in train/*/ratio (1e-7)
    ma, mb = _metrics(a), _metrics(b)
    assert [sorted(r) for r in ma] == [sorted(r) for r in mb]
    for ra, rb in zip(ma, mb):
        for k, v in ra.items():
            assert rb[k] == (pytest.approx(v, rel=1e-5, abs=1e-6) if isinstance(v, float) else v), (ra["step"], k)
    wa, wb = _adapters(a), _adapters(b)
    assert wa.keys() == wb.keys()
    for k in wa:
        for mod, (x, y) in wa[k].tensors.items():
            x2, y2 = wb[k].tensors[mod]
            assert (x - x2).abs().max() <= atol and (y - y2).abs().max() <= atol, (k, mod)


@pytest.fixture(scope="module")
def one_rank(tmp_path_factory) -> Path:
    rd = tmp_path_factory.mktemp("w1") / "run"
    _train(rd, POP)
    return rd


@pytest.mark.slow
@pytest.mark.parametrize("world", [2, 4])
def test_population_on_several_ranks_equals_one_rank(one_rank: Path, tmp_path: Path, world: int):
    """Four ranks through torchrun; two through ``populora train --nproc 2`` (the launcher a user
    without torchrun runs: it starts the local ranks itself), one run for both properties."""
    rd = tmp_path / f"w{world}"
    if world == 2:
        out = subprocess.run([sys.executable, "-m", "populora.cli", "train", "--nproc", "2", "--quiet", "--config",
                              TINY, "--run-dir", str(rd), *POP], cwd=ROOT, capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, out.stderr[-3000:]
        assert out.stdout.count("files: metrics") == 1  # one summary, printed by rank 0
    else:
        _train(rd, POP, nproc=world)
    _assert_same_run(one_rank, rd)
    assert len(list((rd / "checkpoints").iterdir())) >= 1


@pytest.mark.slow
def test_baseline_on_a_group_of_two_ranks_equals_one_rank(tmp_path: Path):
    a, b = tmp_path / "b1", tmp_path / "b2"
    _train(a, BASELINE)
    _train(b, BASELINE, nproc=2)
    _assert_same_run(a, b)


def _worker_pids(launcher: int) -> dict[int, int]:
    """{rank: pid} of torchrun's workers."""
    from procutil import descendants

    out = {}
    for pid in descendants(launcher):
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        ranks = [e.split(b"=", 1)[1] for e in env if e.startswith(b"RANK=")]
        if ranks and b"populora.cli" in Path(f"/proc/{pid}/cmdline").read_bytes():
            out[int(ranks[0])] = pid
    return out


@pytest.mark.slow
def test_a_killed_rank_fails_the_job_fast_and_resume_at_two_or_one_rank_finishes_the_same(one_rank: Path,
                                                                                          tmp_path: Path):
    rd = tmp_path / "killed"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", "-m", "populora.cli",
           "train", "--quiet", "--config", TINY, "--run-dir", str(rd), *POP, "run.collective_timeout_s=30"]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 300
    while time.time() < deadline and not any(s >= 2 for s, _ in list_checkpoints(rd / "checkpoints")):
        time.sleep(0.05)
        assert proc.poll() is None, "the run ended before it could be killed"
    victim = _worker_pids(proc.pid)[1]
    t0 = time.time()
    os.kill(victim, signal.SIGKILL)
    proc.wait(timeout=120)
    assert proc.returncode != 0 and time.time() - t0 < 60
    copy = tmp_path / "killed-copy"
    shutil.copytree(rd, copy)
    _train(rd, [], nproc=2, resume=True)
    _assert_same_run(one_rank, rd)
    _train(copy, [], nproc=1, resume=True)
    _assert_same_run(one_rank, copy)


# -- the cost model (pure arithmetic) ----------------------------------------------------------------
def test_cost_model_counts_what_a_step_exchanges():
    from populora.config import load_config
    from populora.distributed.cost import QWEN25_7B, lora_params, step_cost

    assert lora_params(QWEN25_7B, 32) == 80_740_352  # rank 32 x 90,112 x 28 layers
    cfg = load_config(ROOT / "configs" / "4t4s-7b.yaml")
    one, eight = step_cost(cfg, 1), step_cost(cfg, 8)
    assert one["records_gathered_per_rank"] == one["weights_broadcast_per_rank"] == 0  # nothing to exchange
    assert eight["weights_broadcast_per_rank"] == 8 * 4 * 80_740_352  # every updated adapter, fp32, to every rank
    assert eight["gradients_allreduced_per_rank"] == 0  # one member per GPU: no groups
    assert eight["training_s"] == pytest.approx(one["training_s"] / 8)
    assert eight["generation_s"] >= eight["generation_floor_s"]  # a phase waits for its longest sequence
    assert 1 < one["step_s"] / eight["step_s"] < 8
    base = step_cost(load_config(ROOT / "configs" / "baseline-7b.yaml"), 8)
    assert base["gradients_allreduced_per_rank"] == pytest.approx(2 * 7 / 8 * 4 * 80_740_352)  # a group of 8
