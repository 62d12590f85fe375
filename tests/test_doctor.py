"""``populora doctor``'s pure parts (milliseconds): bandwidth maths, item ratios and verdicts from
hand-made records, report rendering, exit statuses, the no-GPU line and the dry run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from populora.cli import main
from populora.doctor.allreduce import alg_bandwidth, bus_bandwidth, size_result
from populora.doctor.devices import cpu_model, meminfo_gib
from populora.doctor.generation import arm_ratios
from populora.doctor.records import (
    AllReduceResult,
    ArmTiming,
    DeviceReport,
    DoctorReport,
    GenerationResult,
    Measure,
    MemberUpdate,
    PresetReport,
    TrainingResult,
)
from populora.doctor.report import render_markdown, report_json, write_reports
from populora.doctor.run import exit_status
from populora.doctor.verdict import compare, planned_items, planned_training_step_gib, verdict
from populora.plan import PlanInputs, model_shape, plan
from populora.plan.memory import GIB
from populora.policy import PolicyConfig
from populora.policy.vllm_memory import VLLM_SLEEP_RESIDUE_GIB

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


def test_bus_bandwidth_is_nccl_tests_definition():
    assert alg_bandwidth(2_000_000_000, 0.5) == pytest.approx(4.0)  # GB/s of 1e9 bytes
    assert bus_bandwidth(10.0, 8) == pytest.approx(17.5)  # 10 x 2 x 7 / 8
    assert bus_bandwidth(10.0, 2) == pytest.approx(10.0)
    assert bus_bandwidth(10.0, 1) == 0.0  # one rank: nothing crosses a link
    r = size_result(1 << 30, 0.01, 4, True)
    assert r.algbw_gbs == pytest.approx((1 << 30) / 0.01 / 1e9) and r.busbw_gbs == pytest.approx(r.algbw_gbs * 1.5)
    with pytest.raises(ValueError, match="seconds"):
        alg_bandwidth(1, 0)
    with pytest.raises(ValueError, match="ranks"):
        bus_bandwidth(1.0, 0)


def test_proc_parsers():
    assert cpu_model("processor\t: 0\nmodel name\t: Intel Xeon X\nflags: a") == "Intel Xeon X"
    assert cpu_model("") == ""
    assert meminfo_gib("MemTotal:       2097152 kB\nMemFree: 1 kB") == pytest.approx(2.0)
    assert meminfo_gib("nothing") is None


def plan_7b(**settings):
    policy = PolicyConfig(engine="vllm", device="cuda", train_micro_batch=4, max_prompt_tokens=6144,
                          gradient_checkpointing=True, vllm={"sleep_between_phases": True})
    p = PlanInputs(shape=model_shape("qwen2.5-7b"), policy=policy, prompt_tokens=6144, new_tokens=8096, adapters=16)
    return plan(p.with_settings(settings), 80.0)


def test_planned_training_step_is_the_plans_training_phase_less_resident_and_engine():
    result = plan_7b()
    resident = sum(result.items[k] for k in ("base_weights", "adapters_optimizer", "cuda_context"))
    assert planned_training_step_gib(result) == pytest.approx(
        result.phases["training"] - resident - VLLM_SLEEP_RESIDUE_GIB)
    items = planned_items(result)
    assert items["engine_asleep"] == VLLM_SLEEP_RESIDUE_GIB
    assert "engine_asleep" not in planned_items(plan_7b(**{"policy.vllm.sleep_between_phases": False}))


def measured(**gib):
    return [Measure(k, v * GIB, f"hand-made {k}") for k, v in gib.items()]


def test_ratios_and_verdict_from_measurements():
    result = plan_7b()
    step = planned_training_step_gib(result)
    ms = measured(base_weights=result.items["base_weights"] * 1.0, adapters_optimizer=result.items["adapters_optimizer"] * 1.1,
                  training_step=step * 1.25, engine=result.items["engine"], engine_asleep=2.0, cuda_context=1.0)
    items = {c.item: c for c in compare(result, ms)}
    assert items["adapters_optimizer"].ratio == pytest.approx(1.1)
    assert items["training_step"].ratio == pytest.approx(1.25)
    assert items["engine_asleep"].ratio == pytest.approx(2.0 / VLLM_SLEEP_RESIDUE_GIB)
    assert items["activations"].measured_gib is None and "inside training_step" in items["activations"].method
    v = verdict("8t8s", result, tuple(items.values()))
    resident = result.items["base_weights"] + result.items["adapters_optimizer"] * 1.1 + 1.0
    assert v.phases_gib["training"] == pytest.approx(resident + 2.0 + step * 1.25)
    assert v.phases_gib["generation"] == pytest.approx(resident + result.items["engine"])
    assert v.from_plan == () and v.basis == "measured"
    assert v.fits == (max(v.phases_gib.values()) <= 72.0)


def test_verdict_takes_unmeasured_items_from_the_plan_and_fails_on_oom():
    result = plan_7b()
    items = compare(result, measured(base_weights=14.0, training_step=200.0))
    v = verdict("x", result, items)
    assert not v.fits and v.plan_fits  # measured 200 GiB of activations: the plan was wrong
    assert set(v.from_plan) == {"engine", "adapters_optimizer", "cuda_context", "engine_asleep",
                                "cuda_context of the engine's 1 process(es)"}
    assert "from the plan" in v.basis
    ok = compare(result, measured(training_step=1.0))
    assert verdict("x", result, ok).fits
    assert not verdict("x", result, ok, failed="OutOfMemoryError: CUDA out of memory").fits


def test_hf_engine_verdict_has_no_engine_during_training():
    p = PlanInputs(shape=model_shape("tiny"), policy=PolicyConfig(engine="hf", train_micro_batch=6),
                   device="cpu", dtype="float32", adapters=4, prompt_tokens=4096, new_tokens=24)
    result = plan(p, 16.0)
    v = verdict("tiny", result, compare(result, measured(training_step=0.5, base_weights=0.004, adapters_optimizer=0.001)))
    assert v.phases_gib["training"] == pytest.approx(0.505)
    assert v.from_plan == ("engine",)


def gen(engine="vllm", seconds=(2.0, 1.6, 1.0), error=None):
    arms = tuple(ArmTiming(a, s, 100) for a, s in zip(("mixed", "one_adapter", "base"), seconds))
    return GenerationResult(engine, "cpu", 4, 8, 32, () if error else arms, start_s=3.0, memory=(), error=error,
                            notes=("sleep/wake: not available on CPU",))


def test_arm_ratios_are_wall_clock_seconds_over_seconds():
    r = arm_ratios(gen())
    assert r == {"mixed/one_adapter": pytest.approx(1.25), "mixed/base": pytest.approx(2.0)}
    assert arm_ratios(gen(error="vLLM is not importable here")) == {"mixed/one_adapter": None, "mixed/base": None}


def report(fits_training_step=0.5, error=None, status="complete"):
    p = PlanInputs(shape=model_shape("tiny"), policy=PolicyConfig(engine="hf"), device="cpu",
                   dtype="float32", adapters=4)
    result = plan(p, 16.0)
    training = TrainingResult("tiny", 1_000_000, "float32", "cpu", 4096, 24, 6, False,
                              (MemberUpdate("t0", "teacher", 6, 24720, 2.0, 0.1, 0.3),),
                              tuple(measured(training_step=fits_training_step)), 3 * GIB, "ru_maxrss", error=error,
                              step_seconds=2.0)
    items = compare(result, list(training.memory))
    preset = PresetReport("tiny", "configs/tiny.yaml", training, (gen("hf"), gen(error="vLLM is not importable here")),
                          items, verdict("tiny", result, items), result.to_json())
    device = DeviceReport("cpu", "host", "2.13", 2, "cpu", 16.0)
    allreduce = AllReduceResult("gloo", 2, "", (size_result(1 << 20, 0.001, 2, True),), 3.0)
    return DoctorReport(device, allreduce, (preset,), None, 10.0, "populora doctor --device cpu", status=status)


def test_report_json_and_markdown(tmp_path):
    r = report()
    js = report_json(r)
    json.dumps(js)  # plain JSON values
    p = js["presets"][0]
    assert p["training"]["tokens_per_s"] == pytest.approx(12360.0)
    assert p["generation"][0]["ratios"]["mixed/one_adapter"] == pytest.approx(1.25)
    assert p["generation"][0]["arms"][0]["tokens_per_s"] == pytest.approx(50.0)
    assert p["verdict"]["fits"] is True and p["verdict"]["basis"].startswith("measured")
    assert js["allreduce"]["sizes"][0]["busbw_gbs"] > 0
    md = render_markdown(r)
    for text in ("## All-reduce: gloo over 2", "**Verdict: fits**", "| training_step |", "mixed/one_adapter",
                 "vLLM is not importable here", "12360 tokens/s", "not available on CPU"):
        assert text in md, text
    j, m = write_reports(r, tmp_path / "out")
    assert json.loads(j.read_text())["presets"][0]["preset"] == "tiny" and m.read_text() == md


def test_exit_status():
    assert exit_status(report()) == 0
    assert exit_status(report(fits_training_step=100.0)) == 3  # does not fit 16 GiB
    assert exit_status(report(error="RuntimeError: boom", status="failed")) == 1
    assert exit_status(report(status="incomplete")) == 4
    assert exit_status(report(fits_training_step=100.0, status="incomplete")) == 3  # a measured misfit says most


def test_no_gpu_exits_2_with_one_line(monkeypatch, capsys):
    import populora.commands.doctor as doctor

    monkeypatch.setattr(doctor, "has_cuda", lambda: False)
    assert main(["doctor", "--config", str(CONFIGS / "tiny.yaml")]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and len(captured.err.strip().splitlines()) == 1
    assert "no CUDA GPU" in captured.err and "--device cpu" in captured.err


def test_dry_run_of_the_8t8s_preset_needs_no_gpu(capsys):
    assert main(["doctor", "--dry-run", "--config", str(CONFIGS / "8t8s-7b.yaml")]) == 0
    out = capsys.readouterr().out
    for text in ("all-reduce: nccl", "hidden 3584", "vocab 152064", "16 member(s)", "4 sequences x (6144 + 8096) tokens",
                 "base_weights", "activations", "cuda_context", "sleep/wake timed"):
        assert text in out, text


def test_bad_config_is_one_line(capsys):
    assert main(["doctor", "--dry-run", "--config", str(CONFIGS / "tiny.yaml"), "policy.train_micro_batch=0"]) == 2
    err = capsys.readouterr().err
    assert "policy.train_micro_batch" in err and len(err.strip().splitlines()) == 1
