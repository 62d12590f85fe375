"""The core imports no optional extra; a command that needs one says which, in one line.

Each check runs in a fresh interpreter whose import system refuses every optional package
(``populora.extras.EXTRAS``, and the test-only ``hypothesis``) as if it were not installed: that is a
GPU node with the core alone (issue: the first GPU hour). Milliseconds of logic, seconds of imports.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from populora.extras import EXTRAS, MissingExtra, require

REPO = Path(__file__).resolve().parents[1]
BLOCKED = sorted({m for mods in EXTRAS.values() for m in mods} | {"hypothesis"})

# modules that belong to an extra by nature (they draw figures), and the sandbox's fork-server files,
# which the server imports as top-level modules of its own (never as populora.sandbox.*)
OPTIONAL = {"populora.diagnostics.plots", "populora.diagnostics.report"}
SERVER_SIDE = {f"populora.sandbox.{m}" for m in ("channels", "child", "isolation", "protocol", "runner", "scratch", "server", "template")}

BLOCKER = f"""
import sys
BLOCKED = {BLOCKED!r}
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
sys.meta_path.insert(0, Block())
"""


def run_blocked(code: str, *args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", BLOCKER + code, *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout)


def test_extras_table_matches_pyproject():
    import tomllib

    optional = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for extra, modules in EXTRAS.items():
        assert extra in optional, extra
        assert modules  # each names what it provides


def test_require_names_the_extra_and_passes_installed_modules():
    assert require("json", "eval").dumps([1]) == "[1]"
    with pytest.raises(MissingExtra) as e:
        require("no_such_module_xyz", "hpc", "populora sweep")
    assert str(e.value) == ("populora sweep: needs the 'hpc' extra (module no_such_module_xyz is not installed): "
                            "pip install 'populora[hpc]'")
    assert isinstance(e.value, ImportError)
    with pytest.raises(ValueError, match="unknown extra"):
        require("json", "nonsense")


@pytest.mark.slow
def test_every_core_module_imports_without_the_extras():
    code = """
import importlib, json, pkgutil, populora
bad = {}
for m in pkgutil.walk_packages(populora.__path__, "populora."):
    if m.name in set(sys.argv[1].split(",")):
        continue
    try:
        importlib.import_module(m.name)
    except Exception as e:
        bad[m.name] = repr(e)
print(json.dumps(bad))
"""
    proc = run_blocked(code, ",".join(sorted(OPTIONAL | SERVER_SIDE)))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {}


@pytest.mark.slow
def test_core_commands_run_and_an_optional_one_says_its_extra():
    code = """
from populora.cli import main
sys.exit(main(sys.argv[1:]))
"""
    assert run_blocked(code, "--help").returncode == 0
    plan = run_blocked(code, "plan", "--config", "configs/4t4s-7b.yaml")
    assert plan.returncode == 0 and "fits" in plan.stdout, plan.stderr[-2000:]
    dry = run_blocked(code, "doctor", "--dry-run", "--config", "configs/tiny.yaml", "--device", "cpu")
    assert dry.returncode == 0, dry.stderr[-2000:]
    report = run_blocked(code, "report", "runs/none", "--out", "nowhere.html")
    assert report.returncode == 2
    assert report.stderr.strip() == ("populora report: needs the 'diagnostics' extra (module "
                                     "matplotlib is not installed): pip install 'populora[diagnostics]'")
    sweep = run_blocked(code, "sweep", "configs/sweeps/populations-7b.yaml", "--dry-run")
    assert sweep.returncode == 2 and sweep.stderr.strip() == (
        "populora sweep: needs the 'hpc' extra (module submitit is not installed): pip install 'populora[hpc]'")
    train = run_blocked(code, "train", "--config", "configs/tiny.yaml", "policy.engine=vllm", "policy.lora.rank=8",
                        "--run-dir", "nowhere-run")
    assert train.returncode == 2 and len(train.stderr.strip().splitlines()) == 1 and "'vllm' extra" in train.stderr
