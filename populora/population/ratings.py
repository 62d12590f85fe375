"""TrueSkill ratings of population members, match outcomes, win probabilities.

Every step each teacher plays one match against its matched student. The outcome comes from the
student's solve rate on that teacher's valid tasks (``match_outcome``); ratings are then updated
with the ``trueskill`` package, one 1-vs-1 game per pair. Teachers and students share one rating
scale (they play each other), but PBT compares members only within their role.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import trueskill

from populora.population.validation import check_in

STUDENT_WINS = "student"
TEACHER_WINS = "teacher"
DRAW = "draw"
OUTCOMES = (STUDENT_WINS, TEACHER_WINS, DRAW)


class Rating(NamedTuple):
    """A TrueSkill belief about a member's skill: Normal(mu, sigma^2)."""

    mu: float
    sigma: float


@dataclass(frozen=True)
class RatingConfig:
    """TrueSkill parameters (defaults: the package's and the paper's) and the match-outcome margin.

    ``margin`` is the half-width of the draw band around a solve rate of 0.5 (see ``match_outcome``);
    ``conservative_k`` the multiplier of sigma in the conservative score ``mu - k sigma``.
    """

    mu: float = 25.0
    sigma: float = 25.0 / 3.0
    beta: float = 25.0 / 6.0
    tau: float = 25.0 / 300.0
    draw_probability: float = 0.10
    conservative_k: float = 3.0
    margin: float = 0.10

    def __post_init__(self) -> None:
        where = "ratings"
        check_in(where, "mu", self.mu, "(-inf, inf)")
        check_in(where, "sigma", self.sigma, "(0, inf)")
        check_in(where, "beta", self.beta, "(0, inf)")
        check_in(where, "tau", self.tau, "[0, inf)")
        check_in(where, "draw_probability", self.draw_probability, "[0, 1)")
        check_in(where, "conservative_k", self.conservative_k, "[0, inf)")
        check_in(where, "margin", self.margin, "[0, 0.5)")


def prior(cfg: RatingConfig) -> Rating:
    """The rating of a newcomer: ``(mu0, sigma0)``."""
    return Rating(cfg.mu, cfg.sigma)


def trueskill_env(cfg: RatingConfig) -> trueskill.TrueSkill:
    return trueskill.TrueSkill(
        mu=cfg.mu, sigma=cfg.sigma, beta=cfg.beta, tau=cfg.tau, draw_probability=cfg.draw_probability
    )


def win_probability(a: Rating, b: Rating, cfg: RatingConfig) -> float:
    """P(a beats b) = Phi((mu_a - mu_b) / sqrt(2 beta^2 + sigma_a^2 + sigma_b^2))."""
    denom = math.sqrt(2.0 * cfg.beta**2 + a.sigma**2 + b.sigma**2)
    return 0.5 * (1.0 + math.erf((a.mu - b.mu) / (denom * math.sqrt(2.0))))


def conservative_score(r: Rating, cfg: RatingConfig) -> float:
    """``mu - k sigma``: a lower bound on skill, which ranks uncertain newcomers low."""
    return r.mu - cfg.conservative_k * r.sigma


def match_outcome(rho_mean: float | None, n_valid: int, margin: float) -> str:
    """Who won a (teacher, student) match, from the student's mean solve rate ``rho_mean``.

    The rule: a teacher with no valid task (``n_valid == 0``) loses; otherwise the student wins if
    ``rho > 0.5 + margin`` (the tasks were too easy for it), the teacher wins if
    ``rho < 0.5 - margin`` (the student mostly failed), and anything in between is a draw.
    """
    if n_valid <= 0:
        return STUDENT_WINS
    if rho_mean is None or not 0.0 <= rho_mean <= 1.0:
        raise ValueError(f"match_outcome: rho_mean must be in [0, 1] when n_valid > 0, got {rho_mean!r}")
    if rho_mean > 0.5 + margin:
        return STUDENT_WINS
    if rho_mean < 0.5 - margin:
        return TEACHER_WINS
    return DRAW


def update(
    ratings: Mapping[str, Rating],
    pairs: Sequence[tuple[str, str]],
    outcomes: Sequence[str],
    cfg: RatingConfig,
) -> dict[str, Rating]:
    """New ratings after the matches ``pairs[i] = (teacher_id, student_id)`` ended as ``outcomes[i]``.

    One TrueSkill 1-vs-1 game per pair, applied in order (a student matched with two teachers
    plays two games, the second from its updated rating). Members that did not play keep their
    rating. The input mapping is not modified.
    """
    if len(pairs) != len(outcomes):
        raise ValueError(f"ratings.update: {len(pairs)} pairs but {len(outcomes)} outcomes")
    env = trueskill_env(cfg)
    out = dict(ratings)
    for (teacher, student), outcome in zip(pairs, outcomes):
        for member in (teacher, student):
            if member not in out:
                raise KeyError(f"ratings.update: member {member!r} has no rating")
        if outcome not in OUTCOMES:
            raise ValueError(f"ratings.update: outcome {outcome!r} is not one of {OUTCOMES}")
        t = env.create_rating(*out[teacher])
        s = env.create_rating(*out[student])
        if outcome == TEACHER_WINS:
            t, s = trueskill.rate_1vs1(t, s, env=env)
        else:
            s, t = trueskill.rate_1vs1(s, t, drawn=outcome == DRAW, env=env)
        out[teacher] = Rating(float(t.mu), float(t.sigma))
        out[student] = Rating(float(s.mu), float(s.sigma))
    return out
