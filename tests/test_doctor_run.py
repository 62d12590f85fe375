"""``populora doctor`` run end to end: on CPU at the tiny preset's shapes (CI), and on CUDA (gpu).

The CPU run is the same code a GPU node runs (all-reduce over 2 gloo ranks, one training micro-batch
per member through train_member, peak memory beside the plan, HF and vLLM arms) so that it cannot
rot before a GPU meets it. Its vLLM part is checked where vLLM is importable (or required).
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import signal
import subprocess
import sys
import time
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


def check_report(report: dict, device: str, with_vllm: bool, with_step: bool = True, prompt_tokens: int = 4096) -> None:
    assert report["device"]["kind"] == device and report["device"]["cpu_cores"] >= 1
    assert report["status"] == "complete", report["stages"]
    status = {s["name"]: s["status"] for s in report["stages"]}
    ar = report["allreduce"]
    if device == "cuda" and ar["ranks"] == 1:
        assert status["all-reduce"] == "unavailable" and ar["not_measured"].startswith("not measured: one GPU")
        assert ar["sizes"] == []
    else:
        assert ar["error"] is None and ar["ranks"] >= 1 and ar["backend"] == ("nccl" if device == "cuda" else "gloo")
        assert ar["sizes"]
    for s in ar["sizes"]:
        assert s["correct"] and s["seconds"] > 0 and s["algbw_gbs"] > 0
        assert s["busbw_gbs"] == pytest.approx(s["algbw_gbs"] * 2 * (ar["ranks"] - 1) / ar["ranks"])
    (preset,) = report["presets"]
    t = preset["training"]
    assert t["error"] is None and len(t["updates"]) == 4  # tiny: 2 teachers + 2 students
    assert t["prompt_tokens"] == prompt_tokens and t["completion_tokens"] == 24 and t["micro_batch"] == 6
    assert all(u["tokens"] == 6 * (prompt_tokens + 24) for u in t["updates"])
    assert t["step_seconds"] > 0 and t["tokens_per_s"] > 0 and t["peak_bytes"] > 0
    assert t["warmup"]["seconds"] > 0 and t["warmup"]["role"] == "warm-up"  # reported apart
    assert t["behaviour_logprob"] == pytest.approx(-math.log(4096))  # tiny's own vocabulary
    assert t["per_member_bytes"] > 0
    assert t["flops"] > 0 and t["flops_per_s"] == pytest.approx(t["flops"] / t["step_seconds"])
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
    assert set(report["ratio_labels"]) == {"mixed/one_adapter", "mixed/base"}
    assert any("multi-adapter LoRA product" in n for n in hf["notes"])
    assert hf["publish_s"] is not None and hf["publish_s"] >= 0
    if with_vllm:
        vl = engines["vllm"]
        assert vl["error"] is None, vl["error"]
        assert all(a["tokens"] > 0 for a in vl["arms"]) and vl["ratios"]["mixed/one_adapter"] > 0
        if device == "cpu":
            assert vl["sleep_s"] is None and any("not available on CPU" in n for n in vl["notes"])
    else:
        assert "vllm" not in engines and status["tiny: generation (vllm)"] == "unavailable"
    if not with_step:  # the CPU step is checked by tests/test_doctor_acceptance.py (call b)
        assert report["step"] is None and "self-play step" not in status
        return
    step = report["step"]
    assert [a["label"] for a in step["arms"]] == ["4T+4S", "baseline"] and step["arms"][0]["members"] == 8
    for arm in step["arms"]:
        assert arm["step_s"] > 0 and arm["warmup_s"] > 0 and arm["phases"]["train"] > 0 and arm["phases"]["generate"] > 0
    assert step["ratio"] == pytest.approx(step["arms"][0]["step_s"] / step["arms"][1]["step_s"])
    assert "selfplay.steps=2" in step["overrides"]
    assert all(0 <= arm["publish_share"] < 1 and "publish" in arm["phases"] for arm in step["arms"])


def vllm_expected() -> bool:
    return importlib.util.find_spec("vllm") is not None or os.environ.get("POPULORA_REQUIRE_VLLM") == "1"


@pytest.mark.slow
def test_doctor_on_cpu_at_tiny_shapes(tmp_path):
    """`populora doctor --device cpu --config configs/tiny.yaml --no-step policy.max_prompt_tokens=1024`
    (the step stage's CPU rehearsal is tests/test_doctor_acceptance.py's call b). Prompts of 1,024 tokens,
    not the default 4,096: the stages and the report do not depend on the length, and the training stage
    took 76 s of the test's 140 s at 4,096 (attention grows with its square on CPU)."""
    proc, report = doctor(tmp_path, "--device", "cpu", "--config", "configs/tiny.yaml", "--no-step",
                          "policy.max_prompt_tokens=1024")
    assert proc.returncode == 0, proc.stderr[-3000:]
    check_report(report, "cpu", vllm_expected(), with_step=False, prompt_tokens=1024)
    assert "**Verdict: fits**" in proc.stdout


@pytest.mark.slow
def test_a_budget_too_small_leaves_a_report_naming_what_it_skipped(tmp_path):
    proc, report = doctor(tmp_path, "--device", "cpu", "--config", "configs/tiny.yaml", "--budget-s", "6", "--tests")
    assert proc.returncode == 4, proc.stderr[-3000:]
    assert report["status"] == "incomplete" and report["budget_s"] == 6
    status = {s["name"]: s["status"] for s in report["stages"]}
    assert status["versions"] == "done" and status["devices"] == "done"
    skipped = [s for s in report["stages"] if s["status"] == "skipped"]
    assert skipped and all("--budget-s 6" in s["detail"] or s["detail"].startswith("needs") for s in skipped)
    assert "Skipped for the time budget:" in (tmp_path / "report" / "doctor.md").read_text()
    assert "incomplete:" in proc.stderr and len(proc.stderr.strip().splitlines()[-1]) < 400


@pytest.mark.slow
def test_a_doctor_killed_mid_stage_leaves_a_report(tmp_path):
    out = tmp_path / "report"
    proc = subprocess.Popen([sys.executable, "-m", "populora.cli", "doctor", "--device", "cpu", "--config",
                             "configs/tiny.yaml", "--out", str(out)], cwd=REPO, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:  # wait until the report says the training stage is running
            try:
                running = [s["name"] for s in json.loads((out / "doctor.json").read_text())["stages"]
                           if s["status"] == "running"]
            except (OSError, ValueError):
                running = []
            if running == ["tiny: training"]:
                break
            time.sleep(0.2)
        else:
            pytest.fail("the training stage never showed as running")
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
    finally:
        proc.kill()
    report = json.loads((out / "doctor.json").read_text())
    status = {s["name"]: s for s in report["stages"]}
    assert proc.returncode == 4 and report["status"] == "incomplete"
    assert status["tiny: training"]["status"] == "interrupted" and "SIGTERM" in status["tiny: training"]["detail"]
    assert status["all-reduce"]["status"] == "pending" and "stopped by signal SIGTERM" in status["all-reduce"]["detail"]
    assert status["tiny: plan"]["status"] == "done"


@pytest.mark.gpu
def test_doctor_on_cuda_at_tiny_shapes(tmp_path):
    """In the model's training dtype (bf16): float32 with grouped-query attention sends SDPA to the math
    kernel on CUDA, whose T x T attention a real run never materialises."""
    proc, report = doctor(tmp_path, "--config", "configs/tiny.yaml", "policy.dtype=bfloat16", timeout=1800)
    assert proc.returncode == 0, proc.stderr[-3000:]
    check_report(report, "cuda", importlib.util.find_spec("vllm") is not None)
    assert report["device"]["gpus"] and report["device"]["cuda"] and report["device"]["nccl"]
    assert report["presets"][0]["training"]["dtype"] == "bfloat16"
    from populora.doctor.mfu import peak_flops

    if peak_flops(report["device"]["gpus"][0]["name"], "bfloat16") is not None:  # a card of the peak table
        assert 0 < report["presets"][0]["training"]["mfu"] < 1
    items = {c["item"]: c for c in report["presets"][0]["items"]}
    assert items["cuda_context"]["measured_gib"] > 0
    assert report["presets"][0]["training"]["peak_reserved_bytes"] >= report["presets"][0]["training"]["peak_bytes"]
