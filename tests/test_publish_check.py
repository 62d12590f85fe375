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
