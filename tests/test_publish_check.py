"""The publish check's pure parts (milliseconds), and its wiring with an engine that reports other
log-probabilities than the trainer's: a stand-in engine defined here, over the real tiny trainer."""

from __future__ import annotations

import pytest
import torch

from populora.policy.backend import Policy, check_sequences, mean_difference
from populora.policy.config import PolicyConfig, PolicyConfigError
from populora.policy.engine import GenerationEngine, ServedMismatch


def test_check_sequences_are_fixed_and_inside_the_vocabulary():
    a = check_sequences(4096, 3, 16)
    assert a == check_sequences(4096, 3, 16)
    prompts, completions = a
    assert len(prompts) == len(completions) == 3 and all(len(c) == 16 for c in completions)
    assert all(10 <= t < 4096 for seq in prompts + completions for t in seq)


def test_mean_difference_reads_only_the_valid_tokens():
    trainer = torch.tensor([[-1.0, -2.0, 0.0], [-0.5, 0.0, 0.0]])
    mask = torch.tensor([[True, True, False], [True, False, False]])
    assert mean_difference(trainer, mask, [[-1.0, -2.0], [-0.5]]) == 0.0
    assert mean_difference(trainer, mask, [[-1.3, -2.0], [-0.2]]) == pytest.approx(0.2)
    assert mean_difference(trainer, mask, [[-1.0], [-0.5]]) == float("inf")  # other tokens scored


def test_the_check_keys_are_validated():
    with pytest.raises(PolicyConfigError, match="policy.publish_check_every must be an integer >= 0, got -1"):
        PolicyConfig(publish_check_every=-1)
    with pytest.raises(PolicyConfigError, match="policy.publish_check_tokens must be an integer >= 1, got 0"):
        PolicyConfig(publish_check_tokens=0)


class ShiftedEngine(GenerationEngine):
    """Scores with the trainer's own weights, then adds ``shift[name]`` to every token (a stand-in for an
    engine serving other weights; the real engine's cases are in test_vllm_publish_real.py)."""

    logprob_tolerance = 1e-3

    def __init__(self, trainer, shift):
        self.trainer, self.shift, self.published = trainer, shift, []

    def publish(self, name, weights):
        self.published.append(name)

    def retire(self, name):
        pass

    def generate(self, requests, sampling):
        raise AssertionError("not used")

    def score(self, adapters, prompt_ids, completion_ids):
        out = []
        for name, p, c in zip(adapters, prompt_ids, completion_ids):
            tl = self.trainer.completion_logprobs(name, [p], [c], with_grad=False)
            out.append([float(x) + self.shift.get(name, 0.0) for x in tl.logprobs[0, : len(c)]])
        return out


@pytest.fixture(scope="module")
def trainer():
    from populora.policy.hf import HFBackend

    t = HFBackend(PolicyConfig(model="tiny", device="cpu", lora={"rank": 4, "alpha": 8}))
    for i, name in enumerate(("t0", "s0")):
        t.add_adapter(name, t.new_adapter_weights(seed=i))
    return t


def test_a_shift_above_the_tolerance_stops_with_the_member_the_step_and_the_difference(trainer):
    config = PolicyConfig(model="tiny", device="cpu", publish_check_every=2)
    good = Policy(config, trainer, ShiftedEngine(trainer, {"s0": 5e-4}))
    assert good.publish().published == ["s0", "t0"] and good.engine.published == ["s0", "t0"]
    assert good.publish().published == []  # only changed adapters go
    diffs = good.check_served(["t0", "s0"], 4)
    assert diffs["t0"] < 1e-6 and diffs["s0"] == pytest.approx(5e-4, rel=1e-3)
    assert good.check_due(4) and not good.check_due(3)
    bad = Policy(config, trainer, ShiftedEngine(trainer, {"s0": 0.25}))
    with pytest.raises(ServedMismatch, match=r"^at step 4, engine '' does not serve member 's0' as the trainer holds "
                                             r"it: .* differ from the trainer's by 0\.25 nats per token on average "
                                             r"\(tolerance 0\.001\)$"):
        bad.check_served(["t0", "s0"], 4)


def test_ranks_turn_a_served_mismatch_into_the_same_error_on_every_rank():
    """``Ranks.check_served`` hands a rank's mismatch to the gather every rank is in and raises it (one
    rank here: the error comes out as it went in, without a rank prefix); a due step without a mismatch
    reports the largest difference, a step that is not due reports nothing."""
    from populora.distributed.comm import LocalComm
    from populora.selfplay.ranks import Ranks

    class Backend:  # the two calls Ranks makes of a Policy for the check
        def __init__(self, diffs, fail):
            self.diffs, self.fail = diffs, fail

        def publish(self):
            raise AssertionError("not used")

        def adapter_names(self):
            return list(self.diffs)

        def check_due(self, step):
            return step % 2 == 0

        def check_served(self, names, step):
            if self.fail:
                raise ServedMismatch(f"at step {step}, engine 'x' does not serve member 't0' as the trainer holds it")
            return self.diffs

    ok = Ranks(LocalComm(), Backend({"t0": 1e-7, "s0": 3e-7}, fail=False), "x", 3)
    assert ok.check_served(2) == {"publish/check_max_diff": 3e-7}
    assert ok.check_served(3) == {}
    bad = Ranks(LocalComm(), Backend({"t0": 1.0}, fail=True), "x", 3)
    with pytest.raises(ServedMismatch, match=r"^at step 4, engine 'x' does not serve member 't0'"):
        bad.check_served(4)


@pytest.mark.slow
def test_a_step_times_its_publish_and_reports_it(tmp_path):
    from pathlib import Path

    from populora.config import load_config
    from populora.selfplay.loop import SelfPlay

    sp = SelfPlay(load_config(Path(__file__).resolve().parents[1] / "configs" / "tiny.yaml", ["selfplay.steps=1"]),
                  tmp_path)
    try:
        row = sp.step(1)
    finally:
        sp.close()
    assert row["time/publish_s"] >= 0 and row["time/check_served_s"] >= 0
    assert row["publish/adapters"] == 4  # every member trained, so every adapter changed
    assert "publish/check_max_diff" not in row  # the HF engine serves the trainer's weights: nothing to check
