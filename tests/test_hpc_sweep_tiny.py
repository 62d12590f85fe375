"""The real thing on the test cluster: `populora sweep` of the `tiny` preset: the baseline as a job
asking --gres=gpu:8 like the paper profile, 1T1S as a 2-rank job (2 tasks, --gres=gpu:2) preempted
mid-way with `scancel --signal=USR2`, evaluation arrays, the leaderboard job; and slurm/train.sbatch
with 2 ranks (srun) preempted the same way. Preempted runs must end with the same final adapters as
an unpreempted one-rank run, with every step logged once, and sacct must show every job COMPLETED."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jobs.status import format_table, status_of

pytestmark = [pytest.mark.slurm, pytest.mark.slow]
REPO = Path(__file__).resolve().parent.parent
SWEEP_FILE = REPO / "configs" / "sweeps" / "tiny-ci.yaml"


def populora(*args: str, timeout: float = 1500) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "populora.cli", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=REPO)


def has_checkpoint(run_dir: Path) -> bool:
    ck = run_dir / "checkpoints"
    return ck.is_dir() and any(ck.iterdir())


def wait_for_checkpoint(run_dir: Path, seconds: float = 600) -> None:
    deadline = time.monotonic() + seconds
    while not has_checkpoint(run_dir):
        assert time.monotonic() < deadline, f"no checkpoint in {run_dir} after {seconds} s"
        time.sleep(0.5)
    assert not (run_dir / "summary.json").exists(), "the run finished before it could be preempted"


def sacct_attempts(job_id: str) -> list[str]:
    out = subprocess.run(["sacct", "-n", "-P", "-X", "-D", "-j", job_id.split("_")[0], "-o", "JobID,State"],
                         capture_output=True, text=True, check=True).stdout
    return [line.split("|")[1].split()[0] for line in out.splitlines() if line.split("|")[0] == job_id]


def adapters_of(run_dir: Path) -> dict[str, dict]:
    from safetensors.torch import load_file

    members = json.loads((run_dir / "members.json").read_text())
    rows = members if isinstance(members, list) else members.get("members", [])
    out = {}
    for m in rows:
        adapter_dir = Path(m["adapter_dir"])
        adapter_dir = adapter_dir if adapter_dir.is_absolute() else run_dir / adapter_dir
        out[m["id"]] = load_file(str(adapter_dir / "adapter_model.safetensors"))
    assert out, f"no adapters in {run_dir}"
    return out


def assert_same_adapters(a: Path, b: Path) -> None:
    wa, wb = adapters_of(a), adapters_of(b)
    assert sorted(wa) == sorted(wb)
    for member in wa:
        assert sorted(wa[member]) == sorted(wb[member])
        for key in wa[member]:
            assert (wa[member][key] == wb[member][key]).all(), f"{member} {key} differs"


def run_overrides(name: str) -> list[str]:
    """The overrides `populora sweep` gives run ``name`` of the tiny-ci sweep (without submitting)."""
    from jobs import sweep

    runs = sweep.expand_runs(sweep.load_spec(SWEEP_FILE))
    return list(next(r.overrides for r in runs if r.name == name))


# One thread everywhere (the ci profile exports it too): float reductions then run in the same
# order in every process, so "the same final adapters" can be checked bit for bit.
ONE_THREAD = {"OMP_NUM_THREADS": "1"}


class ReferenceRun:
    """Run 1t1s-s0 of the sweep, never preempted, in a background process (it overlaps with the
    cluster jobs, one thread each); ``path()`` waits for it. Both preempted runs must match it."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "populora.cli", "train", "--config", str(REPO / "configs" / "tiny.yaml"),
             "--run-dir", str(run_dir), "--quiet", *run_overrides("1t1s-s0")],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO,
            env={**os.environ, **ONE_THREAD})

    def path(self) -> Path:
        out, _ = self.proc.communicate(timeout=1500)
        assert self.proc.returncode == 0, out[-3000:]
        return self.run_dir


@pytest.fixture(scope="module")
def reference_1t1s(tmp_path_factory):
    ref = ReferenceRun(tmp_path_factory.mktemp("reference") / "1t1s-s0")
    yield ref
    if ref.proc.poll() is None:
        ref.proc.kill()


def test_tiny_sweep_with_preemption_produces_a_leaderboard(tmp_path, reference_1t1s):
    sw = tmp_path / "sw"
    proc = populora("sweep", str(SWEEP_FILE), "--profile", "ci", "--out", str(sw), timeout=300)
    assert proc.returncode == 0, proc.stderr
    print(proc.stdout)
    manifest = json.loads((sw / "manifest.json").read_text())
    train = next(st for st in manifest["stages"] if st["key"] == "train:2gpu")
    task = next(t for t in train["tasks"] if t["label"] == "1t1s-s0")
    run_dir = sw / "runs" / "1t1s-s0"

    wait_for_checkpoint(run_dir)
    subprocess.run(["scancel", "--signal=USR2", task["job_id"]], check=True)

    status = populora("sweep", "status", str(sw), "--wait", "1500", timeout=1600)
    print(status.stdout)
    assert status.returncode == 0, status.stderr
    rows = status_of(sw)
    assert all(r["state"] == "COMPLETED" for r in rows), format_table(rows) + failed_logs(sw, rows)
    assert {r["stage"] for r in rows} == {"train", "train:2gpu", "eval:1t1s-s0", "eval:baseline-s0", "leaderboard"}
    assert "REQUEUED" in sacct_attempts(task["job_id"])  # it really was preempted and requeued
    assert any((sw / "leaderboard").iterdir()), "leaderboard job wrote nothing"

    assert_same_adapters(run_dir, reference_1t1s.path())
    assert_every_step_once(run_dir)


def assert_every_step_once(run_dir: Path) -> None:
    """No step lost or repeated: the resumed attempt went on from the last checkpoint."""
    steps = [json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert steps == list(range(1, len(steps) + 1)) and steps, steps


def test_plain_train_sbatch_requeues_and_resumes(tmp_path, reference_1t1s):
    overrides = run_overrides("1t1s-s0")
    run_dir = tmp_path / "run"
    env = {**os.environ, **ONE_THREAD, "POPULORA_LAUNCH": "",
           "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    submit = subprocess.run(
        ["sbatch", "--parsable", "--partition=debug", "--ntasks-per-node=2", "--gres=gpu:2",
         "--cpus-per-task=1", "--mem=4G", "--time=60",
         f"--output={tmp_path}/train-%j.out", str(REPO / "slurm" / "train.sbatch"),
         str(REPO / "configs" / "tiny.yaml"), str(run_dir), *overrides],
        capture_output=True, text=True, env=env, cwd=REPO, check=True)
    job_id = submit.stdout.strip().split(";")[0]
    wait_for_checkpoint(run_dir)
    subprocess.run(["scancel", "--batch", "--signal=USR2", job_id], check=True)
    deadline = time.monotonic() + 900
    while sacct_attempts(job_id)[-1:] != ["COMPLETED"]:
        states = sacct_attempts(job_id)
        assert not set(states[-1:]) & {"FAILED", "CANCELLED", "TIMEOUT"}, (states, _log(tmp_path))
        assert time.monotonic() < deadline, (states, _log(tmp_path))
        time.sleep(2)
    assert "REQUEUED" in sacct_attempts(job_id), _log(tmp_path)
    assert "--resume" in _log(tmp_path) and "2 rank(s)" in _log(tmp_path)
    assert "--gpus-per-task=1" in _log(tmp_path)
    # one GPU per rank: srun gave each task its own of the job's two (the cluster's fake GPUs)
    ranks = json.loads((run_dir / "ranks.json").read_text())
    assert sorted((r["rank"], r["visible_devices"]) for r in ranks) == [(0, "0"), (1, "1")], ranks
    assert_same_adapters(run_dir, reference_1t1s.path())
    assert_every_step_once(run_dir)


def failed_logs(sw: Path, rows: list[dict]) -> str:
    """The end of the error log of every failed task (submitit folders under SWEEP/logs)."""
    parts = []
    for r in rows:
        if r["state"] == "FAILED":
            for f in sw.glob(f"logs/**/{r['job_id']}_0_log.err"):
                lines = [ln for ln in f.read_text(errors="replace").splitlines() if "Warning" not in ln]
                parts.append(f"\n--- {r['task']} ({f.name}):\n" + "\n".join(lines[-15:]))
    return "".join(parts)


def _log(tmp_path: Path) -> str:
    return "\n".join(p.read_text() for p in tmp_path.glob("train-*.out"))
