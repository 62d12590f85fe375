"""The doctor's guarded stages, its time budget, its version table and its estimates (milliseconds,
except the last two tests, which run the doctor's stages in process on the CPU)."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from populora.doctor.budget import Rates, generation_s, training_flops, training_s
from populora.doctor.run import Doctor, Options, count_gpu_tests, default_configs, exit_status, gpu_test_files
from populora.doctor.stages import Stage, StageRunner, Unavailable, budget_check, needs_status, run_status
from populora.doctor.versions import check_versions

REPO = Path(__file__).resolve().parents[1]


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def runner(stages, budget=None, clock=None):
    seen = []
    r = StageRunner(stages, budget, lambda records: seen.append({x.name: x.status for x in records}),
                    start=0.0, clock=clock or Clock())
    return r, seen


def test_budget_check_names_both_figures():
    assert budget_check(10, 20, None) is None
    assert budget_check(10, 20, 30) is None
    assert budget_check(10, 21, 30) == "estimate 21 s, 20 s of --budget-s 30 left"


def test_every_stage_is_guarded_and_the_report_is_written_around_each():
    clock = Clock()

    def boom():
        raise RuntimeError("first line\nsecond line")

    def advance(s):
        clock.t += s
        return f"took {s}"

    stages = [Stage("a", lambda: advance(5)), Stage("b", boom), Stage("c", lambda: advance(1), needs=("b",)),
              Stage("d", lambda: advance(1), needs=("a",)), Stage("e", lambda: (_ for _ in ()).throw(Unavailable("no vLLM"))),
              Stage("f", lambda: None, needs=("e",))]
    r, seen = runner(stages, clock=clock)
    records = {x.name: x for x in r.run()}
    assert [records[n].status for n in "abcdef"] == ["done", "failed", "blocked", "done", "unavailable", "unavailable"]
    assert records["b"].detail == "RuntimeError: first line"
    assert records["c"].detail == "needs b (failed)"
    assert records["a"].seconds == 5 and records["a"].detail == "took 5"
    # before a stage runs, a report says it is running and lists the later ones as pending
    assert {"a": "running", "b": "pending", "c": "pending", "d": "pending", "e": "pending", "f": "pending"} in seen
    assert {"a": "done", "b": "running", "c": "pending", "d": "pending", "e": "pending", "f": "pending"} in seen
    assert run_status(records.values()) == "failed"


def test_budget_skips_what_would_overrun_and_later_cheap_stages_still_run():
    clock = Clock()

    def take(s):
        clock.t += s

    stages = [Stage("cheap", lambda: take(2), estimate=lambda: 2), Stage("big", lambda: take(100), estimate=lambda: 50),
              Stage("needs big", lambda: None, needs=("big",)), Stage("small", lambda: take(1), estimate=lambda: 5)]
    r, _ = runner(stages, budget=10, clock=clock)
    records = {x.name: x for x in r.run()}
    assert records["big"].status == "skipped" and records["big"].detail == "estimate 50 s, 8 s of --budget-s 10 left"
    assert records["needs big"].status == "skipped" and records["small"].status == "done"
    assert run_status(records.values()) == "incomplete"


def test_needs_status():
    assert needs_status(["skipped"]) == "skipped"
    assert needs_status(["unavailable", "skipped"]) == "unavailable"
    assert needs_status(["failed", "unavailable"]) == "blocked"


def test_sigterm_interrupts_the_running_stage_and_the_report_says_what_did_not_run():
    cleaned = []
    stages = [Stage("a", lambda: None), Stage("b", lambda: os.kill(os.getpid(), signal.SIGTERM) or "never",
                                              cleanup=lambda: cleaned.append("b")),
              Stage("c", lambda: None)]
    r, seen = runner(stages)
    records = {x.name: x for x in r.run()}
    assert records["b"].status == "interrupted" and "SIGTERM" in records["b"].detail
    assert records["c"].status == "pending" and "stopped by signal SIGTERM" in records["c"].detail
    assert cleaned == ["b"] and seen[-1] == {"a": "done", "b": "interrupted", "c": "pending"}
    assert signal.getsignal(signal.SIGTERM) is not None  # the previous handler is back


def test_known_bad_version_pairs():
    bad = check_versions({"torch": "2.11.0+cu130", "transformers": "5.17.0", "peft": "0.17.1"})
    assert len(bad.problems) == 1 and "transformers 5.17.0 with peft 0.17.1" in bad.problems[0]
    assert "install peft >= 0.18" in bad.problems[0] and not bad.ok
    assert check_versions({"torch": "2.11.0+cu130", "transformers": "5.17.0", "peft": "0.21.0"}).ok
    assert check_versions({"torch": "2.13.0", "transformers": "4.57.0", "peft": "0.17.0"}).ok  # the pair is fine on 4.x
    missing = check_versions({"torch": "2.11.0", "transformers": "5.17.0", "peft": None})
    assert missing.problems == ("peft is not installed",)
    old = check_versions({"torch": "2.2.0", "transformers": "4.50.0", "peft": "0.13.0"})
    assert len(old.problems) == 2


def test_estimates_grow_with_the_work_and_use_measured_rates():
    small = training_flops(7_600_000_000, 28, 3584, 1024, 4, True)
    long = training_flops(7_600_000_000, 28, 3584, 4096, 4, True)
    assert long > 4 * small  # attention grows with the square of the length
    assert training_flops(10, 1, 1, 1, 1, False) < training_flops(10, 1, 1, 1, 1, True)
    rates = Rates("cuda")
    before = training_s(1e15, 0, 8, rates)
    rates.measure("train_flops", 1.2e15)
    assert training_s(1e15, 0, 8, rates) < before and "train_flops" in rates.measured
    assert generation_s(128, 15e9, Rates("cuda")) > generation_s(32, 15e9, Rates("cuda"))


def test_only_the_files_holding_gpu_tests_run():
    files = gpu_test_files(REPO / "tests")
    names = {p.name for p in files}
    assert "test_doctor_run.py" in names and "test_doctor_stages.py" not in names
    assert all("mark.gpu" in p.read_text() for p in files)
    assert count_gpu_tests(files) >= len(files)


def test_default_presets_put_the_paper_figure_first():
    cuda = [Path(p).stem for p in default_configs("cuda", REPO)]
    assert cuda[:4] == ["4t4s-7b", "8t8s-7b", "1t1s-7b", "baseline-7b"]
    assert [Path(p).stem for p in default_configs("cpu", REPO)] == ["tiny"]


def test_gpu_gib_judges_another_card_size_from_the_plan(monkeypatch):
    """A 141 GiB card judged as an 80 (and a 40) GiB one, with a budget that stops before any weights
    load (the devices stage answers as an H200 would; nothing else touches CUDA): the verdict is the
    plan's for the size asked for, and the run says it is incomplete."""
    import populora.doctor.devices as devices
    from populora.doctor.records import GPU, DeviceReport

    h200 = DeviceReport("cuda", "node", "2.11.0+cu130", 16, "cpu", 139.8, (GPU(0, "NVIDIA H200", 139.8, "9.0"),))
    monkeypatch.setattr(devices, "probe_devices", lambda kind: h200)
    verdicts = {}
    for gib in (80.0, 40.0):
        opts = Options((str(REPO / "configs" / "8t8s-7b.yaml"),), "cuda", budget_s=12, gpu_gib=gib, step=False)
        written = []
        report = Doctor(opts, written.append).run()
        (preset,) = report.presets
        assert report.gpu_gib == gib and report.gpu_gib_source == f"--gpu-gib {gib:g}"
        assert preset.verdict.device_gib == gib and "from the plan" in preset.verdict.basis
        status = {r.name: r.status for r in report.stages}
        assert status["8t8s-7b: model"] == "skipped" and status["8t8s-7b: verdict"] == "done"
        assert status["all-reduce"] == "unavailable"  # one GPU: nothing to measure
        assert report.status == "incomplete" and exit_status(report) in (3, 4)
        assert len(written) > len(report.stages)  # rewritten after every stage
        verdicts[gib] = preset.verdict
    assert verdicts[80.0].fits and not verdicts[40.0].fits
    assert exit_status(report) == 3  # 40 GiB: does not fit, which outranks incomplete
    json.dumps(verdicts[80.0].phases_gib)
    with pytest.raises(AttributeError):
        verdicts[80.0].fits = False  # frozen records


def test_the_step_stage_takes_the_fewest_sequences_both_arms_accept():
    from populora.doctor.step import step_sequences

    assert step_sequences(3, 2, 0.5, 96) == 12  # 6 proposals (2 per type) and 6 attempts (3 groups of 2)
    assert step_sequences(3, 2, 0.5, 6) is None  # the baseline cannot split 6 into 3 x 1 and 3 x ... of 2
    assert step_sequences(3, 3, 0.5, 6) == 6
    n = step_sequences(3, 4, 0.5, 96)
    assert n == 24 and round(n * 0.5) % 3 == 0 and (n - round(n * 0.5)) % 4 == 0


def test_the_baseline_agent_trains_on_the_doctors_batch():
    """The single agent's batch alternates roles; its student attempts come in groups of one prompt, so
    the per-prompt student estimator has something to centre (the first GPU run found this failing)."""
    from populora.doctor.run import preset_config
    from populora.doctor.training import build_trainer, member_batch, run_training

    rows = member_batch("both", 4, 8, 4, 100, seed=0)
    students = [s for s in rows if s.role == "student"]
    assert [s.role for s in rows] == ["teacher", "student"] * 2
    assert students[0].prompt_ids == students[1].prompt_ids and {s.reward for s in students} == {0.0, 1.0}
    assert rows[0].prompt_ids != rows[2].prompt_ids  # each proposal has a prompt of its own
    cfg = preset_config(str(REPO / "configs" / "tiny.yaml"), ("population.baseline=true", "population.teachers=1",
                        "population.students=1", "policy.max_prompt_tokens=64", "policy.train_micro_batch=4"), "cpu")
    trainer = build_trainer(cfg, "cpu")
    try:
        result = run_training(trainer)
    finally:
        trainer.release()
    assert result.error is None and [u.role for u in result.updates] == ["both"]
    assert result.warmup.loss is None and result.updates[0].grad_norm > 0


def test_only_picks_the_kinds_of_stage_and_puts_the_step_first():
    tiny, baseline = str(REPO / "configs" / "tiny.yaml"), str(REPO / "configs" / "baseline-7b.yaml")
    names = lambda opts: [s.name for s in Doctor(opts, lambda r: None).stages()]  # noqa: E731
    assert names(Options((baseline, tiny), "cpu", only=("step",))) == ["versions", "devices", "self-play step"]
    assert names(Options((tiny,), "cpu", only=("training", "step"), tests=True)) == [
        "versions", "devices", "self-play step", "tiny: plan", "tiny: model", "tiny: training", "tiny: verdict"]
    full = names(Options((tiny,), "cpu", tests=True))
    assert full.index("tiny: generation (hf)") < full.index("tests") < full.index("self-play step") < full.index("all-reduce")
    assert "self-play step" not in names(Options((tiny,), "cpu", step=False, only=("step",)))


def test_model_flops_of_a_lora_step_written_out():
    """The count of doctor/mfu.py on a toy shape, term by term, and the peak table's lookups."""
    from populora.doctor.mfu import lora_training_flops, mfu, peak_flops
    from populora.plan.shapes import ModelShape

    shape = ModelShape(vocab=10, hidden=4, intermediate=8, layers=2, heads=2, kv_heads=1, head_dim=2,
                       tied_embeddings=False, qkv_bias=False)
    n_lin = 4 * 4 + 4 * 2 + 4 * 2 + 4 * 4 + 3 * 4 * 8  # q, k, v, o, gate, up, down
    lora = 3 * ((4 + 4) + (8 + 4))  # rank 3 on q_proj and down_proj
    t, c = 5 + 2, 2
    want = 4 * t * 2 * n_lin + 6 * t * 2 * lora + 6 * 2 * 4 * t * t + 4 * c * 4 * 10
    assert lora_training_flops(shape, 3, ("q_proj", "down_proj"), [(5, 2)] * 3) == 3 * want
    assert peak_flops("NVIDIA H200", "bfloat16") == peak_flops("NVIDIA H100 80GB HBM3", "bfloat16") == 989.4e12
    assert peak_flops("NVIDIA H100 PCIe", "bfloat16") == 756.5e12
    assert peak_flops("NVIDIA H200", "float32") is None and peak_flops("Some CPU", "bfloat16") is None
    assert mfu(989.4e12, 2.0, 989.4e12) == 0.5 and mfu(1.0, 1.0, None) is None
