"""``populora doctor`` run end to end: on CPU at the tiny preset's shapes (CI), and on CUDA (gpu).

The CPU run is the same code a GPU node runs (all-reduce over 2 gloo ranks, one training micro-batch
per member through train_member, peak memory beside the plan, HF and vLLM arms) so that it cannot
rot before a GPU meets it. Its vLLM part is checked where vLLM is importable (or required).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def doctor(tmp_path: Path, *args: str, timeout: int = 600) -> tuple[subprocess.CompletedProcess, dict]:
    out = tmp_path / "report"
    proc = subprocess.run([sys.executable, "-m", "populora.cli", "doctor", *args, "--out", str(out)], cwd=REPO,
                          capture_output=True, text=True, timeout=timeout)
    assert (out / "doctor.json").is_file(), proc.stderr[-3000:]
    assert (out / "doctor.md").read_text().strip() in proc.stdout
    return proc, json.loads((out / "doctor.json").read_text())


def check_report(report: dict, device: str, with_vllm: bool) -> None:
    assert report["device"]["kind"] == device and report["device"]["cpu_cores"] >= 1
    ar = report["allreduce"]
    assert ar["error"] is None and ar["ranks"] >= 1 and ar["backend"] == ("nccl" if device == "cuda" else "gloo")
    for s in ar["sizes"]:
        assert s["correct"] and s["seconds"] > 0 and s["algbw_gbs"] > 0
        assert s["busbw_gbs"] == pytest.approx(s["algbw_gbs"] * 2 * (ar["ranks"] - 1) / ar["ranks"])
    (preset,) = report["presets"]
    t = preset["training"]
    assert t["error"] is None and len(t["updates"]) == 4  # tiny: 2 teachers + 2 students
    assert t["prompt_tokens"] == 4096 and t["completion_tokens"] == 24 and t["micro_batch"] == 6
    assert all(u["tokens"] == 6 * (4096 + 24) and u["seconds"] > 0 and u["tokens_per_s"] > 0 for u in t["updates"])
    assert t["tokens_per_s"] > 0 and t["peak_bytes"] > 0
    items = {c["item"]: c for c in preset["items"]}
    for name in ("base_weights", "adapters_optimizer", "training_step"):
        c = items[name]
        assert c["measured_gib"] > 0 and c["planned_gib"] > 0 and c["ratio"] == pytest.approx(c["measured_gib"] / c["planned_gib"])
        assert c["method"]
    assert 0.5 < items["training_step"]["ratio"] < 2  # the plan's formulas hold at tiny's shapes
    assert items["base_weights"]["ratio"] == pytest.approx(1.0, rel=0.05)
    v = preset["verdict"]
    assert isinstance(v["fits"], bool) and v["basis"] and v["phases_gib"]["training"] > 0 and v["device_gib"] > 0
    engines = {g["engine"]: g for g in preset["generation"]}
    hf = engines["hf"]
    assert hf["error"] is None and hf["adapters"] == 4
    assert {a["arm"] for a in hf["arms"]} == {"mixed", "one_adapter", "base"}
    assert all(a["tokens"] > 0 and a["tokens_per_s"] > 0 for a in hf["arms"])
    assert hf["ratios"]["mixed/one_adapter"] > 0 and hf["ratios"]["mixed/base"] > 0
    if with_vllm:
        vl = engines["vllm"]
        assert vl["error"] is None, vl["error"]
        assert all(a["tokens"] > 0 for a in vl["arms"]) and vl["ratios"]["mixed/one_adapter"] > 0
        if device == "cpu":
            assert vl["sleep_s"] is None and any("not available on CPU" in n for n in vl["notes"])
    else:
        assert "not importable" in engines["vllm"]["error"]


def vllm_expected() -> bool:
    return importlib.util.find_spec("vllm") is not None or os.environ.get("POPULORA_REQUIRE_VLLM") == "1"


@pytest.mark.slow
def test_doctor_on_cpu_at_tiny_shapes(tmp_path):
    """`populora doctor --device cpu --config configs/tiny.yaml` (about a minute on 2 cores)."""
    proc, report = doctor(tmp_path, "--device", "cpu", "--config", "configs/tiny.yaml")
    assert proc.returncode == 0, proc.stderr[-3000:]
    check_report(report, "cpu", vllm_expected())
    assert "**Verdict: fits**" in proc.stdout


@pytest.mark.gpu
def test_doctor_on_cuda_at_tiny_shapes(tmp_path):
    proc, report = doctor(tmp_path, "--config", "configs/tiny.yaml", timeout=1800)
    assert proc.returncode == 0, proc.stderr[-3000:]
    check_report(report, "cuda", importlib.util.find_spec("vllm") is not None)
    assert report["device"]["gpus"] and report["device"]["cuda"] and report["device"]["nccl"]
    items = {c["item"]: c for c in report["presets"][0]["items"]}
    assert items["cuda_context"]["measured_gib"] > 0
