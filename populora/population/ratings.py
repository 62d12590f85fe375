"""TrueSkill ratings of population members: games decided by each role's own RL reward.

Every step each role is rated on its own objective against the opponent it met:

- a teacher plays one game against its matched student; the outcome is a step function of the
  teacher's mean RL reward over all its proposals of the step (``tasks.rewards.teacher_reward``:
  ``-1`` invalid, ``0`` if the student's solve rate rho is 0 or 1, else ``1 - rho``);
- a student plays one game per teacher it met; the outcome is a step function of its mean RL reward
  (``+1`` correct, ``-0.5`` wrong, ``-1`` bad format) over its attempts on that teacher's fresh
  valid tasks. No attempts, no game.

Both roles use the same draw band: the rewards their role earns at solve rates ``0.5 - margin`` and
``0.5 + margin`` (teacher: mean reward above ``0.5 + margin`` wins, below ``0.5 - margin`` loses;
student: above ``0.25 + 1.5 margin`` wins, below ``0.25 - 1.5 margin`` loses). Where every
proposal is valid, every answer well formed and 0 < rho < 1, the two games therefore give opposite
outcomes, exactly as the zero-sum match of the previous rule did, so teachers and students stay on
one rating scale (PFSP's win probabilities compare them). Where that rule was inconsistent with the
rewards, the new one follows the rewards: invalid proposals and tasks nobody (or everybody) solves
lower the teacher's mean reward and so its outcome. The outcome is monotone in the member's mean
reward, so ranking members of a role by the rating they gain orders them as their mean reward does.

Each game is a TrueSkill 1-vs-1 game against the opponent's rating from BEFORE the step; only the
rated member's new rating is kept. A member with several games (a student matched with two
teachers) plays them in order, each from its own updated rating. See docs/population.md for the
alternatives considered.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import trueskill

from populora.population.validation import check_in
from populora.tasks.rewards import STUDENT_CORRECT, STUDENT_WRONG, teacher_reward

TEACHER = "teacher"
STUDENT = "student"
GAME_ROLES = (TEACHER, STUDENT)

WIN = "win"
DRAW = "draw"
LOSS = "loss"
OUTCOME_SCORE = {WIN: 1.0, DRAW: 0.5, LOSS: 0.0}  # the rated member's score, for logging
_EDGE = 1e-9  # a mean reward within this of a band edge is on the edge (a draw): float sums are inexact


class Rating(NamedTuple):
    """A TrueSkill belief about a member's skill: Normal(mu, sigma^2)."""

    mu: float
    sigma: float


@dataclass(frozen=True)
class RatingConfig:
    """TrueSkill parameters and the draw band of a game.

    Sources: ``conservative_k = 3`` (rank by ``mu - 3 sigma``) is the paper's. ``mu``, ``sigma``,
    ``beta``, ``tau`` and ``draw_probability`` are ours: the ``trueskill`` package's defaults
    (mu0 = 25, sigma0 = 25/3, beta = sigma0/2, tau = sigma0/100, 10% draws), since neither the paper
    as we have it nor AZR (which has no ratings) gives values. ``margin`` is ours: the half-width,
    in solve-rate units, of the draw band around a solve rate of 0.5 (see the module docstring).
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


# -- games ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Game:
    """One rated game: ``member`` playing ``role`` against ``opponent``, decided by ``rewards``.

    ``rewards`` are the member's own RL rewards of the step that this game stands for: a teacher's
    reward for each of its proposals, or a student's reward for each of its attempts on the
    opponent's fresh valid tasks. Each lies in [-1, 1].
    """

    member: str
    role: str
    opponent: str
    rewards: tuple[float, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "rewards", tuple(float(r) for r in self.rewards))
        if self.role not in GAME_ROLES:
            raise ValueError(f"game of {self.member!r}: role must be one of {GAME_ROLES}, got {self.role!r}")
        if not self.rewards:
            raise ValueError(f"game of {self.member!r} vs {self.opponent!r}: no rewards (a member without any plays no game)")
        for r in self.rewards:
            if not -1.0 <= r <= 1.0:  # also rejects NaN
                raise ValueError(f"game of {self.member!r} vs {self.opponent!r}: reward {r!r} outside [-1, 1]")

    @property
    def mean_reward(self) -> float:
        return sum(self.rewards) / len(self.rewards)


@dataclass(frozen=True)
class GameResult:
    """A played game: its outcome for ``game.member`` and that member's rating before and after."""

    game: Game
    outcome: str
    before: Rating
    after: Rating


def expected_student_reward(rho: float) -> float:
    """A student's mean reward at solve rate ``rho`` when every answer is well formed."""
    return rho * STUDENT_CORRECT + (1.0 - rho) * STUDENT_WRONG


def draw_band(role: str, margin: float) -> tuple[float, float]:
    """``(lo, hi)``: the role's mean reward at solve rates 0.5 -/+ ``margin``; a draw between them.

    Teacher: ``(0.5 - margin, 0.5 + margin)``; student: ``(0.25 - 1.5 margin, 0.25 + 1.5 margin)``.
    """
    check_in("ratings", "margin", margin, "[0, 0.5)")
    if role == TEACHER:  # the teacher's reward falls as the solve rate rises
        return teacher_reward(True, 0.5 + margin), teacher_reward(True, 0.5 - margin)
    if role == STUDENT:
        return expected_student_reward(0.5 - margin), expected_student_reward(0.5 + margin)
    raise ValueError(f"draw_band: role must be one of {GAME_ROLES}, got {role!r}")


def game_outcome(game: Game, margin: float) -> str:
    """``win`` above the role's draw band, ``loss`` below it, ``draw`` inside (edges included)."""
    lo, hi = draw_band(game.role, margin)
    mean = game.mean_reward
    if mean > hi + _EDGE:
        return WIN
    if mean < lo - _EDGE:
        return LOSS
    return DRAW


def step_games(
    pairs: Mapping[str, str],
    teacher_rewards: Mapping[str, Sequence[float]],
    student_rewards: Mapping[tuple[str, str], Sequence[float]],
) -> list[Game]:
    """The games of one step: teachers' games (by teacher id), then students' (by student, teacher).

    ``pairs[teacher] = student`` is the step's matchmaking. ``teacher_rewards[teacher]``: the rewards
    of the teacher's proposals that carry a signal (leave out proposals lost to an infrastructure
    failure and valid tasks the student never attempted). ``student_rewards[(student, teacher)]``:
    the student's rewards on its attempts at that teacher's fresh valid tasks (infrastructure
    failures left out). Empty reward lists give no game.
    """
    games = []
    for teacher in sorted(pairs):
        rewards = tuple(teacher_rewards.get(teacher, ()))
        if rewards:
            games.append(Game(teacher, TEACHER, pairs[teacher], rewards))
    for student, teacher in sorted(student_rewards):
        if pairs.get(teacher) != student:
            raise ValueError(f"step_games: student {student!r} has rewards against {teacher!r}, which it was not paired with")
        rewards = tuple(student_rewards[(student, teacher)])
        if rewards:
            games.append(Game(student, STUDENT, teacher, rewards))
    return games


def play(
    ratings: Mapping[str, Rating], games: Sequence[Game], cfg: RatingConfig
) -> tuple[dict[str, Rating], list[GameResult]]:
    """New ratings after ``games``, and one result per game. The input mapping is not modified.

    Each game is one TrueSkill 1-vs-1 game of the member against the opponent's rating from
    before the step (``ratings``); only the member's rating is updated. A member with several
    games plays them in the given order, each from its own updated rating. Members without a game
    keep their rating.
    """
    env = trueskill_env(cfg)
    out = dict(ratings)
    results = []
    for game in games:
        for who in (game.member, game.opponent):
            if who not in ratings:
                raise KeyError(f"ratings.play: member {who!r} has no rating")
        outcome = game_outcome(game, cfg.margin)
        before = out[game.member]
        me = env.create_rating(*before)
        them = env.create_rating(*ratings[game.opponent])
        if outcome == LOSS:
            _, me = trueskill.rate_1vs1(them, me, env=env)
        else:
            me, _ = trueskill.rate_1vs1(me, them, drawn=outcome == DRAW, env=env)
        out[game.member] = Rating(float(me.mu), float(me.sigma))
        results.append(GameResult(game, outcome, before, out[game.member]))
    return out, results
