"""The first GPU hour, rehearsed on this machine: a Python that has only what a GPU node typically has,
the project installed into it from a wheelhouse with no index, and the doctor run there with a budget.

The environment is a fresh virtual environment whose site-packages holds links to the distributions of
``NODE`` and their own dependencies (from this test's environment), and nothing else: no omegaconf,
trueskill, radon, cognitive-complexity, pyseccomp, gguf, math-verify, submitit, vLLM, evalplus, ...
``populora wheelhouse --python`` then writes what it lacks (from the package index: the one network
step, as on the machine that prepares a node), ``pip install --no-index --find-links wheelhouse/ .``
installs the project offline, and ``populora doctor --device cpu --config configs/tiny.yaml
--budget-s 60 --tests`` must leave a report with every stage accounted for and exit 0 or 4
(incomplete, the skipped stages named).
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# what a GPU node's Python typically has (issue 28), besides the interpreter
NODE = ("torch", "transformers", "peft", "accelerate", "numpy", "safetensors", "tokenizers", "pyyaml", "rich",
        "tqdm", "pytest")
ABSENT = ("omegaconf", "trueskill", "radon", "cognitive_complexity", "pyseccomp", "gguf", "math_verify", "submitit",
          "vllm", "evalplus", "lm_eval", "matplotlib", "ribs", "hypothesis", "populora")


def closure(names) -> list[importlib.metadata.Distribution]:
    """The installed distributions ``names`` and everything they require here (markers evaluated)."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    seen: dict[str, importlib.metadata.Distribution] = {}
    todo = list(names)
    while todo:
        name = canonicalize_name(todo.pop())
        if name in seen:
            continue
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue  # an optional dependency not installed here
        seen[name] = dist
        for line in dist.requires or []:
            req = Requirement(line)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return list(seen.values())


def bare_environment(path: Path) -> Path:
    """A venv at ``path`` with links to ``closure(NODE)`` only; returns its python."""
    subprocess.run([sys.executable, "-m", "venv", str(path)], check=True)
    python = path / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    source = Path(sysconfig.get_paths()["purelib"])
    for dist in closure(NODE):
        tops = {Path(str(f)).parts[0] for f in dist.files or ()}
        for top in sorted(tops - {"..", "__pycache__"}):
            if (source / top).exists() and not (site / top).exists():
                (site / top).symlink_to(source / top)
    return python


def checkout_copy(dest: Path) -> Path:
    """The project's files (tracked and new, not ignored) copied to ``dest``: the install writes there."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                            capture_output=True, text=True)
    if listed.returncode != 0:
        shutil.copytree(REPO, dest, ignore=shutil.ignore_patterns(".venv", ".git", "runs", "*.egg-info", "build"))
        return dest
    for rel in filter(None, listed.stdout.split("\0")):
        src = REPO / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    return dest


@pytest.mark.slow
def test_offline_install_into_a_bare_node_and_a_doctor_with_a_budget(tmp_path):
    python = bare_environment(tmp_path / "node")
    probe = ";".join(f"print('{m}', __import__('importlib.util').util.find_spec('{m}') is not None)" for m in ABSENT)
    present = subprocess.run([str(python), "-c", probe], capture_output=True, text=True, check=True,
                             cwd=tmp_path).stdout
    assert "True" not in present, present  # the node lacks every optional and core-only package
    assert subprocess.run([str(python), "-c", "import torch, transformers, peft, pytest"], cwd=tmp_path).returncode == 0

    project = checkout_copy(tmp_path / "project")
    wheels = tmp_path / "wheelhouse"
    made = subprocess.run([sys.executable, "-m", "populora.cli", "wheelhouse", "--python", str(python), "--project",
                           str(project), "--out", str(wheels)], capture_output=True, text=True, timeout=900)
    assert made.returncode == 0, made.stderr[-3000:]
    manifest = json.loads((wheels / "wheelhouse.json").read_text())
    names = {w["name"] for w in manifest["wheels"]}
    assert {"omegaconf", "trueskill", "cognitive-complexity", "pyseccomp", "setuptools"} <= names
    assert not names & {"torch", "transformers", "numpy"}  # the node has them
    assert {w["name"] for w in manifest["wheels"] if w["built"]} >= {"trueskill", "cognitive-complexity"}
    assert "MiB in" in made.stdout

    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "PYTHONPATH"))}
    env.update(PIP_NO_INDEX="1", HF_HUB_OFFLINE="1")
    install = subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-index", "--find-links", str(wheels), "."],
                             cwd=project, capture_output=True, text=True, env=env, timeout=900)
    assert install.returncode == 0, install.stderr[-3000:]

    out = tmp_path / "report"
    doctor = subprocess.run([str(python.parent / "populora"), "doctor", "--device", "cpu", "--config", "configs/tiny.yaml",
                             "--budget-s", "60", "--tests", "--out", str(out)], cwd=project, capture_output=True,
                            text=True, env=env, timeout=600)
    assert doctor.returncode in (0, 4), doctor.stderr[-3000:]
    report = json.loads((out / "doctor.json").read_text())
    stages = {s["name"]: s for s in report["stages"]}
    accounted = {"done", "skipped", "unavailable"}
    assert all(s["status"] in accounted for s in stages.values()), stages
    assert stages["versions"]["status"] == "done" and stages["devices"]["status"] == "done"
    assert stages["tiny: generation (vllm)"]["status"] in ("unavailable", "skipped")
    if stages["tests"]["status"] == "done":  # only the files holding gpu tests, collected without any extra
        assert report["tests"]["exit_status"] in (0, 5) and "test_doctor_run.py" in report["tests"]["files"]
    skipped = [n for n, s in stages.items() if s["status"] == "skipped"]
    assert (doctor.returncode == 4) == bool(skipped) and report["status"] == ("incomplete" if skipped else "complete")
    md = (out / "doctor.md").read_text()
    assert all(n in md for n in skipped)
    assert report["wall_s"] < 90  # the budget held (60 s, and no stage started that would overrun it)
