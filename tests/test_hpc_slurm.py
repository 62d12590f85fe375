"""The job machinery on a real Slurm cluster (slurm/testing/up.sh): submission, arrays, failure
propagation, dependencies, USR2 preemption + requeue of a TrainingJob, sacct states, and the
container interpreter override run for real with Charliecloud's ch-run.

The training function here is a small stand-in with the training runner's contract (per-step
atomic checkpoint, resume from the last one, summary when done) so the machinery is tested
independently of the model; tests/test_hpc_sweep_tiny.py runs the real training loop.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import cloudpickle
import pytest

from jobs.evaluate import EvalShard, EvalShardJob
from jobs.executors import make_executor, sbatch_script
from jobs.profiles import load_profile, profile_from_dict
from jobs.stages import Stage, submit_stages
from jobs.status import parse_sacct
from jobs.train import TrainingJob

pytestmark = pytest.mark.slurm
# Functions of this module run inside jobs, where this test module cannot be imported.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

REPO = Path(__file__).resolve().parent.parent


def result_within(job, seconds: float):
    """job.result() with a deadline (submitit's own result() can wait forever)."""
    deadline = time.monotonic() + seconds
    while not job.done():
        if time.monotonic() > deadline:
            job.cancel(check=False)
            pytest.fail(f"job {job.job_id} not done after {seconds} s (state {job.state})")
        time.sleep(1)
    return job.result()


def sacct_state(job_id: str, want: str, seconds: float = 60) -> str:
    """Poll sacct until the job reaches ``want`` (or any terminal state); return the state."""
    deadline = time.monotonic() + seconds
    state = ""
    while time.monotonic() < deadline:
        out = subprocess.run(["sacct", "-n", "-P", "-X", "-j", job_id.split("_")[0], "-o",
                              "JobID,State,ExitCode,Elapsed"], capture_output=True, text=True).stdout
        state = parse_sacct(out).get(job_id, {}).get("State", "")
        if state == want:
            return state
        time.sleep(1)
    return state


def counter_train(config_file, overrides, run_dir, resume, *, handle_signals=True):
    """Stand-in training loop: ``steps`` steps of ``sleep`` seconds, an atomic checkpoint after
    each, resume from the last; the final ``value`` depends on every step (like weights)."""
    rd, ck = Path(run_dir), Path(run_dir) / "checkpoints"
    if resume == "auto":  # the runner's rule: a run directory with a saved config is resumed
        resume = (rd / "config.json").exists()
    if not resume:
        rd.mkdir(parents=True, exist_ok=True)
        ck.mkdir(exist_ok=True)
        (rd / "config.json").write_text(json.dumps(dict(o.split("=", 1) for o in overrides)))
    cfg = json.loads((rd / "config.json").read_text())
    if (rd / "summary.json").exists():
        return json.loads((rd / "summary.json").read_text())
    latest = ck / "latest.json"
    state = json.loads(latest.read_text()) if latest.exists() else {"step": 0, "value": int(cfg.get("seed", 1)),
                                                                     "starts": []}
    state["starts"].append({"step": state["step"], "restart": os.environ.get("SLURM_RESTART_COUNT", "0"),
                            "gpus": os.environ.get("CUDA_VISIBLE_DEVICES", "")})
    while state["step"] < int(cfg.get("steps", 5)):
        time.sleep(float(cfg.get("sleep", 0)))
        state["step"] += 1
        state["value"] = (state["value"] * 31 + state["step"]) % 1_000_003
        (ck / "latest.tmp").write_text(json.dumps(state))
        os.replace(ck / "latest.tmp", latest)
    (rd / "summary.json").write_text(json.dumps(state))
    return state


def boom(message: str):
    raise ValueError(message)


def where_am_i():
    import platform

    return {"python": platform.python_version(), "executable": sys.executable,
            "debian": Path("/etc/debian_version").read_text().strip() if Path("/etc/debian_version").exists() else "",
            "gpus": os.environ.get("CUDA_VISIBLE_DEVICES"), "job": os.environ.get("SLURM_JOB_ID")}


@pytest.fixture
def ci():
    return load_profile("ci")


@pytest.mark.slow
def test_submit_array_and_script_matches_dry_run(tmp_path, ci):
    ex = make_executor(ci, tmp_path / "logs" / "%j", name="hpc-test")
    job = ex.submit(where_am_i)
    info = result_within(job, 120)
    assert info["gpus"] == "0,1,2,3,4,5,6,7" and info["job"] == job.job_id  # --gres=gpu:8 honoured
    submitted = (tmp_path / "logs" / job.job_id / f"{job.job_id}_submission.sh").read_text()
    assert submitted == sbatch_script(ci, tmp_path / "logs" / "%j", name="hpc-test")
    with ex.batch():
        jobs = [ex.submit(pow, k, 2) for k in range(4)]
    assert [result_within(j, 120) for j in jobs] == [0, 1, 4, 9]
    array_ids = {j.job_id.split("_")[0] for j in jobs}
    assert len(array_ids) == 1  # one array
    array_id = array_ids.pop()
    submitted = (tmp_path / "logs" / array_id / f"{array_id}_submission.sh").read_text()
    assert submitted == sbatch_script(ci, tmp_path / "logs" / "%j", name="hpc-test", array_size=4)
    assert sacct_state(jobs[3].job_id, "COMPLETED") == "COMPLETED"


def test_failure_propagates_and_dependents_are_cancelled(tmp_path, ci):
    import submitit

    stages = [
        Stage("bad", "hpc-bad", ci, tmp_path / "bad" / "%j", [lambda: boom("intentional failure")], ["bad"]),
        Stage("after", "hpc-after", ci, tmp_path / "after" / "%j", [lambda: 1], ["after"], after=[("bad", None)]),
    ]
    done = submit_stages(stages)
    with pytest.raises(submitit.core.utils.FailedJobError, match="intentional failure"):
        result_within(done["bad"].jobs[0], 120)
    assert done["after"].dependency == f"afterok:{done['bad'].job_id}"
    assert sacct_state(done["bad"].job_id, "FAILED") == "FAILED"
    assert sacct_state(done["after"].job_id, "CANCELLED", 90) == "CANCELLED"


def test_failed_eval_shard_is_retried_and_named(tmp_path, ci):
    shard = EvalShard("run-x", (str(tmp_path / "no-such-run"),), "gsm8k", 1, 3)
    ex = make_executor(ci, tmp_path / "logs" / "%j", name="hpc-shard")
    job = ex.submit(EvalShardJob(shard, max_retries=1, retry_wait_s=0))
    with pytest.raises(Exception) as err:
        result_within(job, 180)
    assert "evaluation shard run-x:shard1/3 failed 2 times" in str(err.value)


@pytest.mark.slow
def test_training_job_preempted_by_usr2_resumes_to_same_result(tmp_path, ci):
    overrides = ["steps=14", "sleep=1", "seed=7"]
    reference = counter_train(None, overrides, str(tmp_path / "reference"), False)
    ex = make_executor(ci, tmp_path / "logs" / "%j", name="hpc-preempt")
    run_dir = tmp_path / "run"
    job = ex.submit(TrainingJob(run_dir, None, overrides, entry=counter_train))
    latest = run_dir / "checkpoints" / "latest.json"
    deadline = time.monotonic() + 120
    while not (latest.exists() and json.loads(latest.read_text())["step"] >= 3):
        assert time.monotonic() < deadline, f"no progress: {job.state}"
        time.sleep(0.5)
    subprocess.run(["scancel", "--signal=USR2", job.job_id], check=True)
    summary = result_within(job, 240)
    assert summary["value"] == reference["value"] and summary["step"] == 14
    starts = summary["starts"]
    assert len(starts) == 2 and starts[0]["restart"] == "0" and starts[1]["restart"] == "1"
    assert 3 <= starts[1]["step"] < 14  # resumed from a checkpoint, not from scratch
    assert sacct_state(job.job_id, "COMPLETED") == "COMPLETED"
    again = TrainingJob(run_dir, None, overrides, entry=counter_train)()  # finished run: no-op
    assert again == summary


def test_container_wrapper_runs_the_job_in_the_image(tmp_path):
    image = Path(os.environ.get("POPULORA_TEST_IMAGE", "/var/cache/populora/ci-image.sqfs"))
    if not image.exists() or not subprocess.run(["which", "ch-run"], capture_output=True).returncode == 0:
        pytest.skip(f"no ch-run or no image {image}: run slurm/testing/image.sh")
    site = sysconfig.get_paths()["purelib"]
    if not Path(site).is_relative_to(REPO) or not tmp_path.is_relative_to("/tmp"):
        pytest.skip("the image binds only the repository and /tmp; the environment lives elsewhere")
    prof = profile_from_dict("ci-container", {
        "executor": "slurm", "partition": "debug", "gpus_per_node": 1, "mem_gb": 1, "time_min": 10,
        "env": {"PYTHONPATH": f"{REPO}:{site}"},
        "container": {"runtime": "charliecloud", "image": str(image), "binds": [str(REPO), "/tmp"],
                      "python": "python3"}})
    ex = make_executor(prof, tmp_path / "logs" / "%j", name="hpc-container")
    job = ex.submit(where_am_i)
    assert "ch-run" in (tmp_path / "logs").joinpath(job.job_id, f"{job.job_id}_submission.sh").read_text()
    info = result_within(job, 180)
    assert info["executable"] == "/usr/bin/python3"  # the image's interpreter, not this one
    assert info["debian"].startswith("12") and info["gpus"] == "0"
    assert info["python"].split(".")[:2] == sys.version.split(".")[:2]
