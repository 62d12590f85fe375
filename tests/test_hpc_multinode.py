"""Two nodes of the test cluster: partition `multi` of slurm/testing/up.sh, nodes ci-node1 and
ci-node2, each a slurmd in its own network and UTS namespace with its own hostname and address on a
bridge. slurm/train.sbatch as the docs give it (POPULORA_LAUNCH= for the host's `populora`), one
rank per node (2 nodes x 1 task, gloo): srun starts the ranks, they meet at MASTER_ADDR, the job's
first host from the Slurm node list, over the bridge. Preempted with USR2 mid-run, requeued, resumed:
the final adapters must equal the unpreempted one-rank run's, with every step logged once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

# tests/ is on sys.path (as for conftest): the helpers and the one-rank reference of the tiny sweep
from test_hpc_sweep_tiny import (
    ONE_THREAD,
    REPO,
    ReferenceRun,
    assert_every_step_once,
    assert_same_adapters,
    run_overrides,
    sacct_attempts,
    wait_for_checkpoint,
)

pytestmark = [pytest.mark.slurm, pytest.mark.slow]
PARTITION = "multi"


def multi_nodes() -> list[str]:
    """The partition's nodes that can take a job; fewer than two is a skip, or a failure where the
    cluster is required (POPULORA_REQUIRE_SLURM=1, as in CI)."""
    out = subprocess.run(["sinfo", "-h", "-N", "-p", PARTITION, "-o", "%N %t"], capture_output=True, text=True)
    nodes = sorted({n for n, state in (line.split() for line in out.stdout.splitlines())
                    if state.rstrip("*") in ("idle", "mix", "alloc")})
    if len(nodes) < 2:
        why = (f"needs two usable nodes in partition {PARTITION!r} (slurm/testing/up.sh); "
               f"sinfo: {out.stdout.strip() or out.stderr.strip()!r}")
        if os.environ.get("POPULORA_REQUIRE_SLURM") == "1":
            pytest.fail(why)
        pytest.skip(why)
    return nodes


def job_nodes(job_id: str) -> list[str]:
    """The hosts of the job's last attempt, in Slurm's order (the first is MASTER_ADDR)."""
    nodelist = subprocess.run(["sacct", "-n", "-P", "-X", "-j", job_id, "-o", "NodeList"], capture_output=True,
                              text=True, check=True).stdout.split()[-1]
    return subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True,
                          check=True).stdout.split()


@pytest.fixture(scope="module")
def reference_1t1s(tmp_path_factory):
    """Run 1t1s-s0 of the tiny sweep on one rank, unpreempted, beside the cluster job."""
    ref = ReferenceRun(tmp_path_factory.mktemp("reference") / "1t1s-s0")
    yield ref
    if ref.proc.poll() is None:
        ref.proc.kill()


def test_multinode_train_sbatch_two_nodes_requeues_and_resumes(tmp_path, reference_1t1s):
    nodes = multi_nodes()
    overrides = run_overrides("1t1s-s0")
    run_dir = tmp_path / "run"
    env = {**os.environ, **ONE_THREAD, "POPULORA_LAUNCH": "",
           "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    for key in ("MASTER_ADDR", "MASTER_PORT"):  # the script must find them from the job itself
        env.pop(key, None)
    submit = subprocess.run(
        ["sbatch", "--parsable", f"--partition={PARTITION}", "--nodes=2", "--ntasks-per-node=1",
         "--gres=gpu:1", "--cpus-per-task=1", "--mem=2G", "--time=60",
         f"--output={tmp_path}/train-%j.out", str(REPO / "slurm" / "train.sbatch"),
         str(REPO / "configs" / "tiny.yaml"), str(run_dir), *overrides],
        capture_output=True, text=True, env=env, cwd=REPO, check=True)
    job_id = submit.stdout.strip().split(";")[0]
    started = time.monotonic()
    wait_for_checkpoint(run_dir)
    subprocess.run(["scancel", "--batch", "--signal=USR2", job_id], check=True)
    deadline = time.monotonic() + 900
    while sacct_attempts(job_id)[-1:] != ["COMPLETED"]:
        states = sacct_attempts(job_id)
        assert not set(states[-1:]) & {"FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL"}, (states, _log(tmp_path))
        assert time.monotonic() < deadline, (states, _log(tmp_path))
        time.sleep(2)
    print(f"job {job_id}: {time.monotonic() - started:.0f} s from the first checkpoint to COMPLETED")
    log = _log(tmp_path)
    assert "REQUEUED" in sacct_attempts(job_id), log
    assert "--resume" in log and "2 rank(s)" in log, log
    assert "USR2: stopping after the current step" in log, log

    # the job spanned both nodes, one rank on each, rank 0 on the first host (MASTER_ADDR)
    hosts = job_nodes(job_id)
    assert hosts == nodes[:2], (hosts, nodes)
    ranks = json.loads((run_dir / "ranks.json").read_text())
    assert sorted((r["rank"], r["host"]) for r in ranks) == [(0, hosts[0]), (1, hosts[1])], ranks
    # one GPU per rank: each node gave its task its own (first) fake GPU
    assert [r["visible_devices"] for r in sorted(ranks, key=lambda r: r["rank"])] == ["0", "0"], ranks

    assert_same_adapters(run_dir, reference_1t1s.path())
    assert_every_step_once(run_dir)


def _log(tmp_path: Path) -> str:
    return "\n".join(p.read_text() for p in tmp_path.glob("train-*.out"))
