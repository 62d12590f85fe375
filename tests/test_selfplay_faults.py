"""Failures inside a step: sandbox errors and NaN losses are recorded and contained; an engine failure
stops the run (the last checkpoint is the one to resume from)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from populora.config import load_config
from populora.rl import update as update_mod
from populora.selfplay import stages
from populora.selfplay.loop import SelfPlay

TINY = Path(__file__).resolve().parents[1] / "configs" / "tiny.yaml"

pytestmark = pytest.mark.slow


@pytest.fixture()
def sp(tmp_path):
    s = SelfPlay(load_config(TINY, ["selfplay.steps=3"]), tmp_path)
    yield s
    s.close()


def _weights(sp):
    return {mid: sp.backend.get_weights(m.adapter) for mid, m in sp.members.items()}


def test_an_engine_failure_stops_the_step_before_anything_is_trained(sp, monkeypatch):
    """A generation error is the engine's, not a request's: retrying fails again and going on trains
    on nothing (it used to be recorded as a metric and the run went on). The step raises
    EngineFailure naming the engine, the rank and the cause; no adapter has changed."""
    from populora.policy.engine import EngineFailure

    def failing(requests, sampling):
        raise RuntimeError("CUDA error: device-side assert (injected)")

    monkeypatch.setattr(sp.backend, "generate", failing)
    before = _weights(sp)
    with pytest.raises(EngineFailure, match=r"generation engine 'hf' failed on rank 0 \(teacher requests\): "
                                            r"RuntimeError: CUDA error: device-side assert \(injected\)"):
        sp.step(1)
    after = _weights(sp)
    assert all(after[mid].equal(before[mid]) for mid in sp.members)
    assert sp.step_done == 0


def test_calls_with_every_request_refused_stop_the_run_after_the_cap(sp, monkeypatch):
    """A request refused on its own (prompt over policy.max_prompt_tokens) is dropped and counted;
    selfplay.max_refused_calls calls in a row that refuse everything stop the run."""
    from populora.policy.engine import EngineFailure

    monkeypatch.setattr(sp.backend.config, "max_prompt_tokens", 1)  # every prompt is now too long
    row = sp.step(1)  # the teachers' and the students' calls: 2 refused calls, under the cap of 3
    assert row["teacher/refused"] == row["teacher/proposals"] == 12 and sp.ranks.refused_calls == 2
    with pytest.raises(EngineFailure, match=r"3 generate calls in a row had every request refused "
                                            r"\(last: prompt_too_long:\d+\).*selfplay.max_refused_calls"):
        sp.step(2)


def test_sandbox_failure_rejects_the_batch_without_crashing(sp, monkeypatch):
    def broken(*args, **kwargs):
        raise OSError("fork server unavailable (injected)")

    monkeypatch.setattr(stages.validation, "validate_many", broken)
    row = sp.step(1)
    assert row["errors/validate"] == 1 and "injected" in row["errors/validate_reason"]
    assert row["teacher/valid_tasks"] == 0


@pytest.mark.parametrize("strategy", ["sequential", "fused"])
def test_nan_loss_restores_last_good_weights(sp, monkeypatch, strategy):
    """Whichever update strategy runs, a member whose loss is NaN goes back to its last good weights
    (with a fresh optimizer) and the others train."""
    monkeypatch.setattr(sp.cfg.rl, "update_strategy", strategy)
    real_loss = update_mod.member_loss
    target = next(m for m in sp.members.values() if m.role == "student").adapter
    target_id = next(i for i, m in sp.members.items() if m.adapter == target)
    state = {"batch": []}
    real_batches = stages.training_batches

    def recording(*args, **kwargs):
        batches, usage = real_batches(*args, **kwargs)
        state["batch"] = batches[target_id]
        return batches, usage

    def nan_for_target(logprobs, mask, entropy, seqs, *args, **kwargs):
        loss, stats = real_loss(logprobs, mask, entropy, seqs, *args, **kwargs)
        if any(s is t for s in seqs for t in state["batch"]):
            # a corrupted update in flight: the live weights are already damaged when the NaN shows (through
            # .data: the autograd graph of a fused pass, which other members' losses still go back through,
            # does not see it)
            for i, p in enumerate(sp.backend.trainable_parameters(target)):
                p.data.add_(1.0 if i % 2 == 0 else -1.0)
            loss = loss * float("nan")
        return loss, stats

    monkeypatch.setattr(stages, "training_batches", recording)
    monkeypatch.setattr(update_mod, "member_loss", nan_for_target)
    before = _weights(sp)
    row = sp.step(1)
    mid = next(i for i, m in sp.members.items() if m.adapter == target)
    assert row[f"train/{mid}/nan_restored"] == 1
    assert row[f"adapter/{mid}/optimizer_steps"] == 0
    after = _weights(sp)
    assert after[mid].equal(before[mid]) and after[mid].is_finite()
    others = [i for i in sp.members if i != mid]
    assert all(row[f"train/{i}/nan_restored"] == 0 for i in others)
    assert all(row[f"adapter/{i}/optimizer_steps"] == 1 for i in others)
    # the adapter trains normally again at the next step, with a fresh optimizer
    monkeypatch.setattr(update_mod, "member_loss", real_loss)
    row2 = sp.step(2)
    assert row2[f"train/{mid}/nan_restored"] == 0 and row2[f"adapter/{mid}/optimizer_steps"] == 1
    assert all(torch.isfinite(a).all() for a, _ in sp.backend.get_weights(target).tensors.values())


def test_checking_failure_is_an_infrastructure_error_not_the_students_fault(sp, monkeypatch):
    """A crash of the checking sandbox drops the attempts from rho and from training (issue: it was
    scored as a format failure: student -1, rho 0, teacher wins)."""
    def broken(*args, **kwargs):
        raise OSError("verifier down (injected)")

    monkeypatch.setattr(stages.checking, "check_and_rerun", broken)
    before = _weights(sp)
    row = sp.step(1)
    assert row["errors/check"] == 1 and "injected" in row["errors/check_reason"]
    assert row["student/infra_errors"] > 0
    after = _weights(sp)
    for mid, m in sp.members.items():
        if m.role == "student":  # every attempt was lost: nothing to train on, no step
            assert row[f"adapter/{mid}/sequences"] == 0 and row[f"adapter/{mid}/optimizer_steps"] == 0
            assert after[mid].equal(before[mid])
            assert f"member/{mid}/solve_rate" not in row
