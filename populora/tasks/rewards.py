"""Rewards of teachers (proposers) and students (solvers). Pure functions.

Teacher reward for one proposal, given the matched student's solve rate ``rho`` on the task:

- PopuLoRA (``variant="populora"``): ``-1`` if the proposal is invalid; ``0`` if ``rho`` is 0 or 1
  (too hard or too easy teaches nothing); else ``1 - rho`` (harder but solvable tasks earn more).
- AZR (``variant="azr"``): the same, except that a valid task with ``rho`` 0 or 1 earns ``-0.5``
  (AZR's format-aware penalty for valid but unlearnable proposals).

Student reward for one attempt (AZR's verifier reward): ``+1`` correct, ``-0.5`` wrong but well
formed, ``-1`` bad format.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

TEACHER_VARIANTS = ("populora", "azr")

STUDENT_CORRECT = 1.0
STUDENT_WRONG = -0.5
STUDENT_FORMAT_ERROR = -1.0
TEACHER_INVALID = -1.0
AZR_UNLEARNABLE = -0.5


def solve_rate(scores: Sequence[float]) -> float:
    """Mean score of a student's attempts on one task (scores in [0, 1]; correct = 1)."""
    if len(scores) == 0:
        raise ValueError("solve_rate: no attempts")
    for s in scores:
        if not 0.0 <= float(s) <= 1.0:
            raise ValueError(f"solve_rate: score {s!r} outside [0, 1]")
    return float(sum(float(s) for s in scores)) / len(scores)


def teacher_reward(valid: bool, rho: float | None, variant: str = "populora") -> float:
    """Reward of a teacher for one proposal; ``rho`` is the solve rate (ignored when invalid)."""
    if variant not in TEACHER_VARIANTS:
        raise ValueError(f"teacher_reward: unknown variant {variant!r}; expected one of {TEACHER_VARIANTS}")
    if not valid:
        return TEACHER_INVALID
    if rho is None or math.isnan(rho) or not 0.0 <= rho <= 1.0:
        raise ValueError(f"teacher_reward: a valid task needs a solve rate in [0, 1], got {rho!r}")
    if rho == 0.0 or rho == 1.0:
        return AZR_UNLEARNABLE if variant == "azr" else 0.0
    return 1.0 - rho


def student_reward(format_ok: bool, correct: bool) -> float:
    """Reward of a student for one attempt: +1 correct, -0.5 wrong but well formed, -1 bad format."""
    if not format_ok:
        return STUDENT_FORMAT_ERROR
    return STUDENT_CORRECT if correct else STUDENT_WRONG
