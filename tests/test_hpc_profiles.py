"""Cluster profiles and executors: validation errors, sbatch text, the container wrapper."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import pytest

from jobs.executors import (
    ContainerImageError,
    container_python,
    make_executor,
    sbatch_script,
    slurm_parameters,
)
from jobs.profiles import ProfileError, available_profiles, load_profile, profile_from_dict

REQUIRED_PROFILES = ("local", "debug", "ci", "ci-eval", "paper-8xh100", "paper-1xh100")


def test_shipped_profiles_load():
    names = available_profiles()
    for name in REQUIRED_PROFILES:
        assert name in names
        assert load_profile(name).name == name
    assert load_profile("local").executor == "local"
    assert load_profile("debug").executor == "debug"
    paper = load_profile("paper-8xh100")
    assert (paper.gpus_per_node, paper.tasks_per_node, paper.nodes, paper.exclusive) == (8, 8, 1, False)
    assert paper.container is not None and paper.container.runtime == "apptainer"


def test_misspelled_key_lists_valid_keys(tmp_path):
    f = tmp_path / "mine.yaml"
    f.write_text("executor: slurm\npartition: gpu\ngpu_per_node: 8\n")
    with pytest.raises(ProfileError) as err:
        load_profile(str(f))
    msg = str(err.value)
    assert "gpu_per_node" in msg and "did you mean 'gpus_per_node'" in msg
    assert str(f) in msg
    for key in ("partition", "account", "qos", "cpus_per_task", "mem_gb", "time_min", "container", "env", "setup"):
        assert key in msg


def test_misspelled_container_key(tmp_path):
    with pytest.raises(ProfileError, match=r"container: unknown key 'bind'.*did you mean 'binds'"):
        profile_from_dict("x", {"executor": "local", "container": {"image": "a.sif", "bind": ["/data"]}})


@pytest.mark.parametrize("data, fragment", [
    ({"executor": "kubernetes"}, "executor 'kubernetes' unknown"),
    ({"executor": "slurm"}, "needs 'partition'"),
    ({"executor": "local", "cpus_per_task": 0}, "'cpus_per_task' must be an integer >= 1"),
    ({"executor": "local", "time_min": "1h"}, "'time_min' must be an integer"),
    ({"executor": "local", "mem_gb": -1}, "'mem_gb' must be a positive number"),
    ({"executor": "local", "container": {"runtime": "docker", "image": "x"}}, "runtime 'docker' unknown"),
    ({"executor": "local", "container": {"binds": []}}, "container.image is required"),
    ({"executor": "local", "setup": "module load cuda"}, "'setup' must be a list of strings"),
])
def test_bad_values_name_the_key(data, fragment):
    with pytest.raises(ProfileError, match=fragment.replace("(", r"\(").replace(")", r"\)")):
        profile_from_dict("bad", data)


def test_unknown_profile_lists_available():
    with pytest.raises(ProfileError) as err:
        load_profile("no-such-cluster")
    assert "unknown profile 'no-such-cluster'" in str(err.value)
    assert "paper-8xh100" in str(err.value) and "ci" in str(err.value)


def test_profiles_dir_env(tmp_path, monkeypatch):
    (tmp_path / "mycluster.yaml").write_text("executor: slurm\npartition: a100\naccount: proj42\n")
    monkeypatch.setenv("POPULORA_PROFILES_DIR", str(tmp_path))
    prof = load_profile("mycluster")
    assert (prof.partition, prof.account) == ("a100", "proj42")
    assert "mycluster" in available_profiles()


def test_sbatch_text_from_profile(tmp_path):
    prof = profile_from_dict("p", {
        "executor": "slurm", "partition": "gpu", "account": "proj", "qos": "high", "gpus_per_node": 8,
        "cpus_per_task": 32, "mem_gb": 256, "time_min": 720, "signal_delay_s": 120, "exclusive": True,
        "env": {"HF_HOME": "$SCRATCH/hf", "QUOTE": 'a"b'}, "setup": ["module load cuda/12.4"],
        "array_parallelism": 4, "sbatch_extra": {"reservation": "res1"},
    })
    text = sbatch_script(prof, tmp_path / "%j", name="run", array_size=10, dependency="afterok:17_3")
    for line in ("#SBATCH --partition=gpu", "#SBATCH --account=proj", "#SBATCH --qos=high",
                 "#SBATCH --gres=gpu:8", "#SBATCH --cpus-per-task=32", "#SBATCH --mem=256GB",
                 "#SBATCH --time=720", "#SBATCH --signal=USR2@120", "#SBATCH --exclusive",
                 "#SBATCH --array=0-9%4", "#SBATCH --dependency=afterok:17_3", "#SBATCH --job-name=run",
                 "#SBATCH --reservation=res1", 'export HF_HOME="$SCRATCH/hf"', 'export QUOTE="a\\"b"',
                 "module load cuda/12.4"):
        assert line in text.splitlines(), line
    assert f"{shlex.quote(sys.executable)} -u -m submitit.core._submit {tmp_path}/%j" in text
    single = sbatch_script(prof, tmp_path / "%j", name="one")
    assert "--array" not in single and "--dependency" not in single


def test_slurm_parameters_are_valid_submitit_parameters():
    from submitit.slurm.slurm import _get_default_parameters

    params = slurm_parameters(load_profile("paper-8xh100"), "x", "afterok:1")
    assert set(params) <= set(_get_default_parameters())


def test_container_wrapper_apptainer(tmp_path):
    image = tmp_path / "populora.sif"
    image.write_bytes(b"SIF")
    prof = profile_from_dict("c", {"executor": "slurm", "partition": "gpu", "container": {
        "image": str(image), "binds": ["/scratch", "/data:/data:ro"], "python": "python3"}})
    assert container_python(prof) == f"apptainer exec --nv --bind /scratch,/data:/data:ro {image} python3"
    text = sbatch_script(prof, tmp_path / "%j")
    assert f"apptainer exec --nv --bind /scratch,/data:/data:ro {image} python3 -u -m submitit.core._submit" in text


def test_container_wrapper_charliecloud(tmp_path):
    image = tmp_path / "img.sqfs"
    image.write_bytes(b"hsqs")
    prof = profile_from_dict("c", {"executor": "local", "container": {
        "runtime": "charliecloud", "image": str(image), "binds": ["/tmp"], "python": "python3"}})
    assert container_python(prof) == f'env USER="${{USER:-$(id -un)}}" ch-run -b /tmp {image} -- python3'


def test_missing_image_fails_before_submission(tmp_path):
    prof = profile_from_dict("c", {"executor": "local", "container": {"image": str(tmp_path / "nope.sif")}})
    with pytest.raises(ContainerImageError, match="nope.sif does not exist"):
        make_executor(prof, tmp_path / "logs")
    # rendering the script (a dry run) only warns: nothing is submitted
    assert "nope.sif" in sbatch_script(prof.replace(executor="slurm", partition="gpu"), tmp_path / "logs")
    assert not (tmp_path / "logs").exists()


def test_debug_and_local_executors_run(tmp_path):
    debug = make_executor(load_profile("debug"), tmp_path / "d")
    assert debug.submit(pow, 2, 10).result() == 1024
    local = make_executor(load_profile("local"), tmp_path / "l" / "%j")
    job = local.submit(divmod, 17, 5)
    assert job.result() == (3, 2)


def test_slurm_profile_without_slurm_is_a_clear_error(tmp_path, monkeypatch):
    from jobs import executors

    monkeypatch.setattr(executors.shutil, "which", lambda name: None)
    with pytest.raises(executors.SlurmUnavailableError, match="--profile local"):
        make_executor(load_profile("ci"), tmp_path)


def test_committed_files_do_not_name_this_checkout():
    root = Path(__file__).resolve().parent.parent
    for sub in ("jobs", "slurm", "containers", "configs/sweeps"):
        for f in (root / sub).rglob("*"):
            if f.is_file() and f.suffix in (".py", ".yaml", ".sh", ".sbatch", ".def", ".conf", ".txt", ""):
                assert str(root) not in f.read_text(errors="ignore"), f
