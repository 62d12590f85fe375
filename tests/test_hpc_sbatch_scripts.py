"""The plain sbatch scripts run as bash (no Slurm needed): account/QoS lines, absolute paths, the shard
count from the array itself, and a missing apptainer failing at once."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SCRIPTS = ("train.sbatch", "eval_array.sbatch", "sweep.sbatch")


def run(script: str, args: list[str], tmp_path: Path, **env) -> subprocess.CompletedProcess:
    base = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "SLURM_SUBMIT_DIR": str(tmp_path)}
    return subprocess.run(["bash", str(REPO / "slurm" / script), *args], capture_output=True, text=True,
                          env={**base, **env}, cwd=tmp_path, timeout=60)


@pytest.mark.parametrize("script", SCRIPTS)
def test_account_and_qos_lines_are_documented(script):
    text = (REPO / "slurm" / script).read_text()
    assert "##SBATCH --account=ACCOUNT" in text and "##SBATCH --qos=QOS" in text
    assert "--account=ACCOUNT --qos=QOS" in text  # the command-line way, in the comment


@pytest.mark.parametrize("script, args", [("train.sbatch", ["configs/tiny.yaml", "r"]),
                                          ("eval_array.sbatch", ["finish", "r", "code", "--", "lb"])])
def test_relative_image_is_resolved_from_the_submit_directory(script, args, tmp_path):
    proc = run(script, args, tmp_path)
    assert proc.returncode == 2
    assert f"container image {tmp_path / 'containers' / 'populora.sif'} not found" in proc.stderr


@pytest.mark.parametrize("script, args", [("train.sbatch", ["configs/tiny.yaml", "r"]),
                                          ("eval_array.sbatch", ["generate", "r", "code"])])
def test_missing_apptainer_fails_at_once_with_a_clear_message(script, args, tmp_path):
    image = tmp_path / "img.sif"
    image.write_text("")
    proc = run(script, args, tmp_path, POPULORA_IMAGE=str(image), SLURM_ARRAY_TASK_ID="0",
               SLURM_ARRAY_TASK_COUNT="2")
    assert proc.returncode == 2
    assert proc.stderr.count("apptainer: command not found") == 1 and "attempt" not in proc.stderr


def test_a_launcher_that_cannot_run_is_not_retried(tmp_path):
    proc = run("eval_array.sbatch", ["generate", "r", "code"], tmp_path, POPULORA_LAUNCH="no-such-launcher",
               SLURM_ARRAY_TASK_ID="1", SLURM_ARRAY_TASK_COUNT="3", POPULORA_RETRIES="2")
    assert proc.returncode == 127
    assert "shard 1/3: 'no-such-launcher' could not be run (exit 127); not retried" in proc.stderr
    assert "attempt" not in proc.stderr


def test_shard_count_comes_from_the_array(tmp_path):
    """generate passes i/SLURM_ARRAY_TASK_COUNT; finish passes no count (merge reads the plan)."""
    log = tmp_path / "argv"
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "populora").write_text(f'#!/bin/bash\necho "$@" >> {log}\n')
    (fake / "populora").chmod(0o755)
    env = {"PATH": f"{fake}:/usr/bin:/bin", "POPULORA_LAUNCH": ""}
    assert run("eval_array.sbatch", ["generate", "r", "code"], tmp_path, SLURM_ARRAY_TASK_ID="2",
               SLURM_ARRAY_TASK_COUNT="5", **env).returncode == 0
    assert run("eval_array.sbatch", ["finish", "r", "code", "--", "lb"], tmp_path, **env).returncode == 0
    lines = log.read_text().splitlines()
    assert f"--runs {tmp_path / 'r'} --benchmarks code --shard 2/5 --stage generate" in lines[0]
    assert "--shard" not in lines[1] and "--stage score" in lines[1]
    assert "POPULORA_SHARDS" not in (REPO / "slurm" / "eval_array.sbatch").read_text()
    assert os.path.isabs(lines[2].split()[1])  # leaderboard RUN_DIR absolute
