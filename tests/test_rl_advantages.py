"""Advantage estimators: hand-computed values, edge cases, invariances."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from populora.rl.advantages import (
    ADVANTAGE_ESTIMATORS,
    compute_advantages,
    grpo,
    role_advantages,
    rpp_baseline,
    trr_pp,
)

# prompts/groups: [a a a | b b | c]
REWARDS = [1.0, 0.0, 1.0, 1.0, -1.0, 0.5]
GROUPS = ["a", "a", "a", "b", "b", "c"]


def close(x: torch.Tensor, expected: list[float], tol: float = 1e-6) -> None:
    assert x.dtype == torch.float32
    assert x.tolist() == pytest.approx(expected, abs=tol)


def test_rpp_baseline_by_hand():
    # group means 2/3, 0, 0.5 -> centred [1/3, -2/3, 1/3, 1, -1, 0]; mean 0, population
    # variance (1/9 + 4/9 + 1/9 + 1 + 1 + 0) / 6 = 4/9 -> std 2/3
    close(rpp_baseline(REWARDS, GROUPS, whiten=False), [1 / 3, -2 / 3, 1 / 3, 1, -1, 0])
    close(rpp_baseline(REWARDS, GROUPS), [0.5, -1.0, 0.5, 1.5, -1.5, 0.0])


def test_trr_pp_by_hand():
    # group a: centred [1/3, -2/3, 1/3], variance 2/9, std sqrt(2)/3; group b: +-1, std 1; c: singleton
    s = math.sqrt(2) / 3
    close(trr_pp(REWARDS, GROUPS), [1 / 3 / s, -2 / 3 / s, 1 / 3 / s, 1.0, -1.0, 0.0])


def test_grpo_by_hand_uses_sample_std():
    # group a: sample variance (1/9 + 4/9 + 1/9) / 2 = 1/3; group b: sample variance 2
    sa, sb = math.sqrt(1 / 3), math.sqrt(2)
    close(grpo(REWARDS, GROUPS, eps=0.0), [1 / 3 / sa, -2 / 3 / sa, 1 / 3 / sa, 1 / sb, -1 / sb, 0.0])
    close(
        grpo(REWARDS, GROUPS, eps=0.5),
        [1 / 3 / (sa + 0.5), -2 / 3 / (sa + 0.5), 1 / 3 / (sa + 0.5), 1 / (sb + 0.5), -1 / (sb + 0.5), 0.0],
    )


@pytest.mark.parametrize("name", sorted(ADVANTAGE_ESTIMATORS))
def test_singleton_groups_get_zero(name):
    # every sample its own group: no estimator can compare, all advantages are 0
    adv = compute_advantages(name, [1.0, -1.0, 0.5], prompt_ids=[0, 1, 2], group_keys=[0, 1, 2])
    assert adv.tolist() == [0.0, 0.0, 0.0]


@pytest.mark.parametrize("name", sorted(ADVANTAGE_ESTIMATORS))
def test_zero_variance_is_exactly_zero(name):
    # 0.1 is not representable: a naive mean leaves round-off that std division would blow up
    rewards = [0.1] * 7
    adv = compute_advantages(name, rewards, prompt_ids=[0] * 7, group_keys=[0] * 7)
    assert adv.tolist() == [0.0] * 7


def test_centring_alone_is_exact_for_constant_prompts():
    # (0.1 + 0.1 + 0.1) / 3 != 0.1 in floating point; the constant prompt must still centre to 0
    adv = rpp_baseline([0.1, 0.1, 0.1, 1.0, 0.0], [0, 0, 0, 1, 1], whiten=False)
    assert adv.tolist() == [0.0, 0.0, 0.0, 0.5, -0.5]


def test_zero_variance_group_next_to_informative_group():
    adv = trr_pp([0.3, 0.3, 0.3, 1.0, 0.0], ["x", "x", "x", "y", "y"])
    assert adv.tolist() == [0.0, 0.0, 0.0, 1.0, -1.0]
    # rpp_baseline: the constant prompt is zeroed, the rest is whitened over the batch of 5
    # centred [0, 0, 0, .5, -.5], population std sqrt(0.5 / 5)
    close(
        rpp_baseline([0.3, 0.3, 0.3, 1.0, 0.0], [1, 1, 1, 2, 2]),
        [0, 0, 0, 0.5 / math.sqrt(0.1), -0.5 / math.sqrt(0.1)],
    )


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
@pytest.mark.parametrize("name", sorted(ADVANTAGE_ESTIMATORS))
def test_non_finite_rewards_rejected_with_index(name, bad):
    with pytest.raises(ValueError, match=r"rewards\[2\]"):
        compute_advantages(name, [1.0, 0.0, bad], prompt_ids=[0, 0, 0], group_keys=[0, 0, 0])


@pytest.mark.parametrize("name", sorted(ADVANTAGE_ESTIMATORS))
def test_empty_input(name):
    adv = compute_advantages(name, [], prompt_ids=[], group_keys=[])
    assert adv.shape == (0,) and adv.dtype == torch.float32


def test_input_types_agree():
    ref = rpp_baseline(REWARDS, GROUPS)
    assert torch.equal(rpp_baseline(np.array(REWARDS), np.array(GROUPS)), ref)
    assert torch.equal(rpp_baseline(torch.tensor(REWARDS, dtype=torch.bfloat16).float(), GROUPS), ref)
    ids = torch.tensor([0, 0, 0, 1, 1, 2])
    assert torch.equal(rpp_baseline(torch.tensor(REWARDS), ids), ref)


def test_shape_and_label_errors():
    with pytest.raises(ValueError, match="1-D"):
        trr_pp([[1.0, 2.0]], [0])
    with pytest.raises(ValueError, match="3 labels for 2 rewards"):
        rpp_baseline([1.0, 2.0], [0, 0, 1])
    with pytest.raises(ValueError, match="hashable"):
        trr_pp([1.0, 2.0], [[0], [1]])
    with pytest.raises(ValueError, match="eps"):
        grpo([1.0], [0], eps=-1.0)


def test_dispatch_routes_labels():
    keys = [("student", "code_o")] * 3 + [("student", "code_i")] * 3
    prompts = [0, 0, 1, 1, 2, 2]
    rewards = [1.0, 0.0, 0.0, 0.0, 1.0, -1.0]
    assert torch.equal(compute_advantages("trr++", rewards, prompts, keys), trr_pp(rewards, keys))
    assert torch.equal(
        compute_advantages("rpp_baseline", rewards, prompts, keys), rpp_baseline(rewards, prompts)
    )
    assert torch.equal(compute_advantages("grpo", rewards, prompts, keys), grpo(rewards, prompts))
    with pytest.raises(ValueError, match="unknown advantage estimator 'ppo'"):
        compute_advantages("ppo", rewards, prompts, keys)
    with pytest.raises(ValueError, match="group_keys"):
        compute_advantages("trr++", rewards, prompt_ids=prompts)
    with pytest.raises(ValueError, match="prompt_ids"):
        compute_advantages("grpo", rewards, group_keys=keys)


def test_role_advantages_teacher_defaults_and_guard():
    # four teacher proposals, each with its own prompt: trr++ whitens per task type
    rewards = [-1.0, 0.5, 0.0, 1.0]
    types = ["code_o", "code_o", "code_i", "code_i"]
    adv = role_advantages("trr++", "teacher", rewards, prompt_ids=[10, 11, 12, 13], task_types=types)
    assert adv.tolist() == [-1.0, 1.0, -1.0, 1.0]
    # per-prompt centering would silently zero them all: refused with the fix in the message
    with pytest.raises(ValueError, match="every advantage would be 0; use 'trr\\+\\+'"):
        role_advantages("rpp_baseline", "teacher", rewards, prompt_ids=[10, 11, 12, 13], task_types=types)


def test_role_advantages_student_rollouts():
    # two tasks, n = 2 rollouts each
    adv = role_advantages("rpp_baseline", "student", [1.0, -0.5, 1.0, 1.0], [7, 7, 8, 8], ["code_f"] * 4)
    assert torch.equal(adv, rpp_baseline([1.0, -0.5, 1.0, 1.0], [7, 7, 8, 8]))
    with pytest.raises(ValueError, match="one entry per reward"):
        role_advantages("rpp_baseline", "student", [1.0, 0.0], [7, 7], ["code_f"])


rewards_st = st.lists(st.sampled_from([-1.0, -0.5, 0.0, 0.25, 1.0]), min_size=1, max_size=40)


@settings(max_examples=60, deadline=None)
@given(rewards=rewards_st, n_groups=st.integers(1, 5), scale=st.floats(0.1, 10.0), shift=st.floats(-3.0, 3.0))
def test_positive_affine_invariance_and_whitening(rewards, n_groups, scale, shift):
    groups = [i % n_groups for i in range(len(rewards))]
    moved = [scale * r + shift for r in rewards]
    for name in ("rpp_baseline", "trr++"):
        a = compute_advantages(name, rewards, groups, groups)
        b = compute_advantages(name, moved, groups, groups)
        assert torch.allclose(a, b, atol=1e-4)
    a = rpp_baseline(rewards, groups)
    if a.abs().max() > 0:  # whitened batch: mean 0, population std 1
        assert float(a.mean()) == pytest.approx(0.0, abs=1e-5)
        assert float(a.double().std(unbiased=False)) == pytest.approx(1.0, abs=1e-5)
    for g in set(groups):  # trr++: whitened inside every group that has spread
        t = trr_pp(rewards, groups)[torch.tensor(groups) == g]
        if t.abs().max() > 0:
            assert float(t.double().mean()) == pytest.approx(0.0, abs=1e-5)
            assert float(t.double().std(unbiased=False)) == pytest.approx(1.0, abs=1e-5)
