"""Prioritized fictitious self-play (PFSP): which student each teacher plays this step.

For teacher ``t`` and student ``s`` let ``p = P(s beats t)`` from their TrueSkill ratings. The
student is drawn with weight ``f(p)``:

- ``variance``: ``p (1 - p)``, largest for balanced pairs (the default);
- ``hard``: ``(1 - p)^k``, students the teacher tends to beat (hard for the student);
- ``uniform``: 1.

Students are drawn without replacement while any is left: with as many teachers as students
every student plays exactly once per step; with more teachers, the pool refills after each full
round, so loads differ by at most one. Teachers pick in a random order each step so no teacher
always chooses first. All randomness comes from the ``random.Random`` passed in.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from populora.population.ratings import Rating, RatingConfig, win_probability
from populora.population.validation import ConfigError, check_in

WEIGHTINGS = ("variance", "hard", "uniform")


@dataclass(frozen=True)
class MatchmakingConfig:
    """``weighting``: one of ``variance|hard|uniform``; ``hard_exponent``: k of ``(1 - p)^k``."""

    weighting: str = "variance"
    hard_exponent: float = 2.0

    def __post_init__(self) -> None:
        if self.weighting not in WEIGHTINGS:
            raise ConfigError(f"matchmaking: weighting must be one of {WEIGHTINGS}, got {self.weighting!r}")
        check_in("matchmaking", "hard_exponent", self.hard_exponent, "(0, inf)")


def pfsp_weight(p: float, cfg: MatchmakingConfig) -> float:
    """``f(p)`` for ``p = P(student beats teacher)``."""
    if cfg.weighting == "variance":
        return p * (1.0 - p)
    if cfg.weighting == "hard":
        return (1.0 - p) ** cfg.hard_exponent
    return 1.0


def pfsp_weights(
    teacher: str,
    students: Sequence[str],
    ratings: Mapping[str, Rating],
    cfg: MatchmakingConfig,
    rating_cfg: RatingConfig,
) -> list[float]:
    """Weights ``f(P(s beats teacher))`` of the given students for one teacher."""
    t = ratings[teacher]
    return [pfsp_weight(win_probability(ratings[s], t, rating_cfg), cfg) for s in students]


def pair(
    teachers: Sequence[str],
    students: Sequence[str],
    ratings: Mapping[str, Rating],
    cfg: MatchmakingConfig,
    rating_cfg: RatingConfig,
    rng: random.Random,
) -> list[tuple[str, str]]:
    """One ``(teacher, student)`` pair per teacher, in the order of ``teachers``."""
    if not teachers or not students:
        raise ValueError(f"matchmaking: need teachers and students, got {len(teachers)} and {len(students)}")
    for m in (*teachers, *students):
        if m not in ratings:
            raise KeyError(f"matchmaking: member {m!r} has no rating")
    order = list(teachers)
    rng.shuffle(order)
    pool: list[str] = []
    chosen: dict[str, str] = {}
    for t in order:
        if not pool:
            pool = list(students)
        w = pfsp_weights(t, pool, ratings, cfg, rating_cfg)
        if sum(w) <= 0.0:  # every candidate has weight 0 (e.g. hard and p == 1): fall back to uniform
            w = [1.0] * len(pool)
        s = rng.choices(pool, weights=w, k=1)[0]
        pool.remove(s)
        chosen[t] = s
    return [(t, chosen[t]) for t in teachers]
