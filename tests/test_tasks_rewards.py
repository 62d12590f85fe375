"""Teacher and student rewards with hand-computed values."""

from __future__ import annotations

import math

import pytest

from populora.tasks.rewards import solve_rate, student_reward, teacher_reward


@pytest.mark.parametrize(
    "valid,rho,variant,expected",
    [
        (False, None, "populora", -1.0),
        (False, 0.5, "populora", -1.0),
        (True, 0.0, "populora", 0.0),
        (True, 1.0, "populora", 0.0),
        (True, 0.25, "populora", 0.75),
        (True, 0.75, "populora", 0.25),
        (True, 1 / 3, "populora", 2 / 3),
        (False, None, "azr", -1.0),
        (True, 0.0, "azr", -0.5),
        (True, 1.0, "azr", -0.5),
        (True, 0.25, "azr", 0.75),
    ],
)
def test_teacher_reward(valid, rho, variant, expected):
    assert math.isclose(teacher_reward(valid, rho, variant), expected)


def test_teacher_reward_errors():
    with pytest.raises(ValueError, match="variant"):
        teacher_reward(True, 0.5, "nope")
    with pytest.raises(ValueError, match="solve rate"):
        teacher_reward(True, None)
    with pytest.raises(ValueError, match="solve rate"):
        teacher_reward(True, 1.5)
    with pytest.raises(ValueError, match="solve rate"):
        teacher_reward(True, math.nan)


def test_student_reward():
    assert student_reward(True, True) == 1.0
    assert student_reward(True, False) == -0.5
    assert student_reward(False, False) == -1.0
    assert student_reward(False, True) == -1.0  # no credit without format


def test_solve_rate():
    assert solve_rate([1, 0, 0, 1]) == 0.5
    assert solve_rate([True, True, True]) == 1.0
    assert math.isclose(solve_rate([0.2, 0.4]), 0.3)
    with pytest.raises(ValueError):
        solve_rate([])
    with pytest.raises(ValueError):
        solve_rate([2])


def test_end_to_end_rewards_of_one_task():
    # 4 attempts: 1 correct, 2 wrong well formed, 1 bad format -> rho = 1/4
    attempts = [(True, True), (True, False), (True, False), (False, False)]
    rho = solve_rate([c for _, c in attempts])
    assert rho == 0.25
    assert teacher_reward(True, rho) == 0.75
    assert [student_reward(f, c) for f, c in attempts] == [1.0, -0.5, -0.5, -1.0]
