"""The two calls of the GPU acceptance plan (slurm/acceptance-plan.sh, docs/doctor.md), rehearsed on CPU:
the same script and doctor arguments, with `--device cpu`, no install (wheelhouse `-`), tiny-shaped presets
in place of the 7B ones, short sequences and a small budget. Call (b) is also where CI checks the self-play
step stage (the full CPU doctor of test_doctor_run.py leaves it out)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]


def rehearse(part: str, out: Path, presets: list[Path], budget: int, *extra: str) -> tuple[subprocess.CompletedProcess, dict]:
    env = {**os.environ, "PYTHON": sys.executable, "BUDGET_S": str(budget), "PRESETS": " ".join(map(str, presets)),
           "PYTHONPATH": str(REPO)}
    proc = subprocess.run(["bash", "slurm/acceptance-plan.sh", part, "-", str(out), "--device", "cpu", *extra],
                          cwd=REPO, capture_output=True, text=True, env=env, timeout=budget + 120)
    log = (out / "acceptance.log").read_text()
    assert "a rehearsal" in log and f"doctor exit {proc.returncode}" in log, log[-3000:]
    return proc, json.loads((out / "doctor" / "doctor.json").read_text())


def tiny_preset(tmp_path: Path, name: str, population: dict) -> Path:
    cfg = yaml.safe_load((REPO / "configs" / "tiny.yaml").read_text())
    cfg.update(name=name, population=population)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def accounted(report: dict) -> dict[str, dict]:
    """Every stage done, unavailable, or skipped for the budget (with both figures): none failed."""
    stages = {s["name"]: s for s in report["stages"]}
    for s in stages.values():
        assert s["status"] in ("done", "unavailable", "skipped"), s
        assert s["status"] != "skipped" or "--budget-s" in s["detail"], s
    assert stages["versions"]["status"] == "done" and stages["devices"]["status"] == "done"
    return stages


@pytest.mark.slow
def test_call_a_runs_the_stages_the_first_gpu_run_skipped(tmp_path):
    """8T+8S (here tiny-shaped) training with its FLOPs, the baseline's, the GPU tests' files; no step."""
    presets = [tiny_preset(tmp_path, "tiny-baseline", {"teachers": 1, "students": 1, "baseline": True}),
               tiny_preset(tmp_path, "tiny-8t8s", {"teachers": 8, "students": 8})]
    proc, report = rehearse("a", tmp_path / "a", presets, 150, "policy.max_prompt_tokens=64",
                            "policy.train_micro_batch=2")
    assert proc.returncode in (0, 4), proc.stdout[-3000:]
    stages = accounted(report)
    assert "self-play step" not in stages and "tests" in stages and report["step"] is None
    assert report["command"].count("--config") == 2 and "--gpu-gib 80" in report["command"]
    assert report["gpu_gib"] == 80
    assert [p["preset"] for p in report["presets"]] == ["tiny-baseline", "tiny-8t8s"]
    assert stages["tiny-baseline: training"]["status"] == "done"
    for p in report["presets"]:
        t = p["training"]
        if t is not None and t["error"] is None:
            assert t["flops"] > 0 and t["flops_per_s"] > 0 and t["mfu"] is None  # no peak known on a CPU
            assert "4 T L N_lin" in t["flops_formula"]


@pytest.mark.slow
def test_call_b_runs_the_step_alone_and_the_strategies(tmp_path):
    proc, report = rehearse("b", tmp_path / "b", [REPO / "configs" / "tiny.yaml"], 240, "--step-new-tokens", "8",
                            "policy.max_prompt_tokens=1024")
    assert proc.returncode in (0, 4), proc.stdout[-3000:]
    stages = accounted(report)
    assert list(stages)[:3] == ["versions", "devices", "self-play step"]  # the step first
    assert not any("generation" in n or n in ("tests", "all-reduce") for n in stages)
    step = report["step"]
    assert stages["self-play step"]["status"] == "done" and step is not None
    assert [a["label"] for a in step["arms"]] == ["4T+4S", "baseline"] and step["arms"][0]["members"] == 8
    for arm in step["arms"]:
        assert arm["step_s"] > 0 and arm["warmup_s"] > 0 and arm["phases"]["train"] > 0
        groups = arm["groups"]
        assert set(groups) == {"generation", "verification", "training", "publishing", "other"}
        assert groups["generation"] == pytest.approx(arm["phases"]["generate"] + arm["phases"]["solve"])
        assert 0 <= arm["publish_share"] < 1
    assert step["ratio"] == pytest.approx(step["arms"][0]["step_s"] / step["arms"][1]["step_s"])
    assert "selfplay.teacher_sampling.max_new_tokens=8" in step["overrides"]  # the lengths stated
    assert any("vLLM" in n and "1.31x" in n for n in step["notes"])  # what the paper's run had
    assert f"population/baseline step ratio: {step['ratio']:.2f}x" in proc.stdout
    if stages["tiny: training"]["status"] == "done":
        t = report["presets"][0]["training"]
        assert {s["strategy"] for s in t["strategies"]} == {"fused", "sequential"}
        assert all(s["seconds"] > 0 and s["tokens"] == t["strategies"][0]["tokens"] for s in t["strategies"])
        assert t["micro_batch"] == 2
