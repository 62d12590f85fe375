"""Container definitions (linted, pins from one file) and the plain sbatch scripts (same resources
as the paper profile), plus the test cluster scripts' syntax."""

from __future__ import annotations

import importlib.util
import re
import subprocess
from pathlib import Path

import pytest

from jobs.executors import sbatch_script
from jobs.profiles import load_profile

REPO = Path(__file__).resolve().parent.parent
CONTAINERS = REPO / "containers"
PINS = CONTAINERS / "pins.txt"


def _linter():
    spec = importlib.util.spec_from_file_location("lint_def", CONTAINERS / "lint_def.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


lint = _linter()
REQUIRED = ("post", "environment", "runscript", "test")


def test_project_def_and_dockerfile_are_clean():
    text = (CONTAINERS / "populora.def").read_text()
    assert lint.lint_def(text, "populora.def", REPO, PINS, REQUIRED, lock=True) == []
    assert lint.lint_dockerfile_pins((CONTAINERS / "Dockerfile").read_text(), PINS, lock=True) == []
    assert lint.main([str(CONTAINERS / "populora.def"), "--context", str(REPO), "--pins", str(PINS),
                      "--dockerfile", str(CONTAINERS / "Dockerfile"), "--require", *REQUIRED, "--lock"]) == 0
    # what `make container` runs before it builds
    assert "--lock" in (REPO / "Makefile").read_text().split("container:", 1)[1].split("\n\n", 1)[0]


def test_def_contents_follow_the_issue():
    text = (CONTAINERS / "populora.def").read_text()
    runscript = text.split("%runscript", 1)[1].split("%", 1)[0]
    assert 'exec populora "$@"' in runscript
    test = text.split("%test", 1)[1]
    assert "import populora" in test and "populora --help" in test and "populora train --config" in test
    assert "vllm" in test and "ribs" in test and "wandb" in test
    assert "pip install --no-cache-dir --require-hashes -r /opt/populora/containers/image.lock" in text
    assert "POPULORA_COMMIT={{ COMMIT }}" in text and "mkdir -p /opt/populora/benchmarks /models /cache" in text


def _lock_module():
    spec = importlib.util.spec_from_file_location("image_lock", CONTAINERS / "lock.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_lock_covers_every_extra_the_cli_documents_and_every_pin():
    from populora.extras import EXTRAS

    lock = _lock_module()
    assert lock.check() == []
    assert set(EXTRAS) == set(lock.EXTRAS)  # every extra the CLI can ask for is in the image
    locked = lock.entries((CONTAINERS / "image.lock").read_text())
    for module_dist in ("vllm", "evalplus", "lm-eval", "math-verify", "matplotlib", "ribs", "submitit", "wandb",
                        "torch", "transformers", "peft", "setuptools"):
        assert module_dist in locked, module_dist
    assert all(locked[k] == v for k, v in lock.pins().items())
    # the driver floor follows the CUDA of the locked wheels (13.0 -> R580)
    assert locked["nvidia-cuda-runtime"].startswith("13.0") and "580.65.06" in PINS.read_text()


def test_a_pin_changed_without_regenerating_the_lock_is_named(tmp_path, monkeypatch):
    lock = _lock_module()
    pins = tmp_path / "pins.txt"
    pins.write_text(PINS.read_text().replace("peft==", "peft==9.9.9\n# was peft=="))
    monkeypatch.setattr(lock, "PINS", pins)
    problems = lock.check()
    assert any("out of date" in p and "lock.py generate" in p for p in problems)
    assert any("pins.txt has peft==9.9.9" in p for p in problems)
    unhashed = tmp_path / "image.lock"
    unhashed.write_text(f"{lock.HEADER}{lock.inputs_digest(False)}\nnumpy==2.0.0\n")
    monkeypatch.setattr(lock, "LOCK", unhashed)
    assert any("numpy==2.0.0 has no --hash" in p for p in lock.check_lock(unhashed, False))


def test_pins_are_exact_and_cover_the_stack():
    pins = {}
    for line in PINS.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, version = line.partition("==")
            assert version and re.fullmatch(r"[0-9][0-9A-Za-z.+]*", version), line
            pins[name.lower()] = version
    assert {"torch", "vllm", "transformers", "peft", "submitit"} <= set(pins)
    assert lint.read_base_image(PINS).startswith("docker.io/nvidia/cuda:")
    assert re.search(r"@sha256:[0-9a-f]{64}$", lint.read_base_image(PINS))  # by digest, not by a movable tag


@pytest.mark.parametrize("text, fragment", [
    ("From: ubuntu\n%post\n  true\n", "missing 'Bootstrap:'"),
    ("Bootstrap: docker\n%post\n  true\n", "needs a 'From:' header"),
    ("Bootstrap: dockerr\nFrom: x\n", "unknown bootstrap agent 'dockerr'"),
    ("From: x\nBootstrap: docker\n", "'Bootstrap:' must be the first header key"),
    ("Bootstrap: docker\nFrom: x\nFrm: y\n", "unknown header key Frm (did you mean From?)"),
    ("Bootstrap: docker\nFrom: x\n%postt\n  true\n", "unknown section %postt (did you mean %post?)"),
    ("Bootstrap: docker\nFrom: x\n%post\n  a\n%post\n  b\n", "section %post repeated (first at line 3)"),
    ("Bootstrap: docker\nFrom: x\n%apprun\n  a\n", "%apprun needs an app name"),
    ("Bootstrap: debootstrap\nOSVersion: bookworm\n", "needs a 'MirrorURL:' header"),
    ("Bootstrap: docker\nFrom: x\nstray words\n", "not a header 'Key: value' line"),
    ("Bootstrap: docker\nFrom: x\n%runscript\n", "required section %runscript is empty"),
])
def test_linter_catches_what_spython_lets_through(text, fragment):
    problems = lint.lint_def(text, "t.def", require=("runscript",))
    assert any(fragment in p for p in problems), problems


def test_linter_checks_files_and_pins(tmp_path):
    pins = tmp_path / "pins.txt"
    pins.write_text("# base-image: docker.io/library/debian:12\nnumpy==2.0.0\n")
    text = ("Bootstrap: docker\nFrom: docker.io/library/debian:11\n%files\n  missing.txt /opt/x\n"
            "%post\n  pip install numpy\n  pip install -c /opt/pins.txt numpy\n")
    problems = lint.lint_def(text, "t.def", tmp_path, pins)
    assert any("missing.txt not found in build context" in p for p in problems)
    assert any("differs from the pinned base image docker.io/library/debian:12" in p for p in problems)
    assert [p for p in problems if "unpinned" in p] == [
        "t.def:6: pip install without '-c .../pins.txt' or '--require-hashes -r .../*.lock' (unpinned)"]
    assert any("debian:12 is not pinned by digest" in p for p in problems)
    docker = "FROM docker.io/library/debian:12\nRUN apt-get update \\\n && pip install numpy\n"
    assert lint.lint_dockerfile_pins(docker, pins) == [
        "Dockerfile:2: pip install without '-c .../pins.txt' or '--require-hashes -r .../*.lock' (unpinned)"]
    locked = "FROM docker.io/library/debian:12\nRUN pip install --require-hashes -r /opt/image.lock\n"
    assert lint.lint_dockerfile_pins(locked, pins, lock=True) == []
    assert "does not install from the lock" in lint.lint_dockerfile_pins(docker, pins, lock=True)[-1]


def sbatch_directives(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        m = re.match(r"#SBATCH --([a-z-]+)(?:=(.*))?$", line)
        if m:
            out[m.group(1)] = m.group(2) if m.group(2) is not None else "true"
    return out


@pytest.mark.parametrize("script, profile", [("train.sbatch", "paper-8xh100"), ("sweep.sbatch", "paper-8xh100"),
                                             ("eval_array.sbatch", "paper-1xh100")])
def test_plain_sbatch_scripts_match_the_paper_profiles(script, profile, tmp_path):
    paper = load_profile(profile)
    generated = sbatch_directives(sbatch_script(paper.replace(container=None), tmp_path / "%j"))
    written = sbatch_directives((REPO / "slurm" / script).read_text())
    tasks = script != "eval_array.sbatch"  # training scripts start one rank per GPU
    generated = sbatch_directives(sbatch_script(paper.replace(container=None), tmp_path / "%j", tasks=tasks))
    for key in ("partition", "nodes", "ntasks-per-node", "gres", "cpus-per-task", "mem", "time", "exclusive"):
        assert written.get(key) == generated.get(key), (script, key)
    assert written["signal"].split(":")[-1] == generated["signal"]  # B:USR2@300 == USR2@300 but to the shell
    if script != "eval_array.sbatch":
        assert written["requeue"] == "true"


@pytest.mark.parametrize("script", ["slurm/train.sbatch", "slurm/eval_array.sbatch", "slurm/sweep.sbatch",
                                    "slurm/testing/up.sh", "slurm/testing/down.sh", "slurm/testing/image.sh"])
def test_shell_scripts_parse(script):
    assert subprocess.run(["bash", "-n", str(REPO / script)], capture_output=True).returncode == 0


def test_sbatch_scripts_refuse_a_missing_image(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "POPULORA_IMAGE": str(tmp_path / "none.sif")}
    proc = subprocess.run(["bash", str(REPO / "slurm" / "train.sbatch"), "configs/tiny.yaml", str(tmp_path / "r")],
                          capture_output=True, text=True, env=env)
    assert proc.returncode == 2 and "none.sif not found" in proc.stderr


def test_test_cluster_config_declares_eight_gpus():
    conf = (REPO / "slurm" / "testing" / "slurm.conf").read_text()
    assert "Gres=gpu:8" in conf and "AccountingStorageType=accounting_storage/slurmdbd" in conf
    assert "nvidia[0-7]" in (REPO / "slurm" / "testing" / "gres.conf").read_text()
    assert "ci" in load_profile("ci").name and load_profile("ci").gpus_per_node == 8
