"""TrueSkill ratings, win probability, conservative score, the previous joint-match rule; PFSP matchmaking.

The games that rate each role on its own reward are tested in test_population_games.py.
"""

from __future__ import annotations

import math
import random
from collections import Counter

import pytest

from populora.population.matchmaking import MatchmakingConfig, pair, pfsp_weight, pfsp_weights
from populora.population.ratings import (
    Rating,
    RatingConfig,
    conservative_score,
    prior,
    win_probability,
)
from populora.population.validation import ConfigError

CFG = RatingConfig()


def test_defaults_trueskill_package_and_paper_conservative_k():
    # mu0, sigma0, beta, tau: the trueskill package's defaults (ours); k = 3: the paper's
    assert (CFG.mu, CFG.sigma, CFG.beta, CFG.tau, CFG.conservative_k) == (25.0, 25 / 3, 25 / 6, 25 / 300, 3.0)
    assert prior(CFG) == Rating(25.0, 25 / 3)
    assert conservative_score(prior(CFG), CFG) == pytest.approx(0.0)
    assert conservative_score(Rating(30, 2), RatingConfig(conservative_k=2)) == 26


def test_win_probability_formula_and_symmetry():
    a, b = Rating(30.0, 2.0), Rating(25.0, 4.0)
    z = 5.0 / math.sqrt(2 * CFG.beta**2 + 4 + 16)
    assert win_probability(a, b, CFG) == pytest.approx(0.5 * (1 + math.erf(z / math.sqrt(2))))
    assert win_probability(a, b, CFG) + win_probability(b, a, CFG) == pytest.approx(1.0)
    assert win_probability(a, a, CFG) == 0.5


def test_rating_config_validation_names_key_and_value():
    with pytest.raises(ConfigError, match=r"ratings: sigma must be in \(0, inf\), got -1"):
        RatingConfig(sigma=-1)
    with pytest.raises(ConfigError, match=r"ratings: margin must be in \[0, 0.5\), got 0.5"):
        RatingConfig(margin=0.5)
    with pytest.raises(ConfigError, match="matchmaking: weighting must be one of"):
        MatchmakingConfig(weighting="greedy")


# -- matchmaking --------------------------------------------------------------------------------
def test_pfsp_weight_functions():
    assert pfsp_weight(0.5, MatchmakingConfig()) == 0.25
    assert pfsp_weight(0.9, MatchmakingConfig()) == pytest.approx(0.09)
    assert pfsp_weight(0.25, MatchmakingConfig("hard", 3.0)) == pytest.approx(0.75**3)
    assert pfsp_weight(0.99, MatchmakingConfig("uniform")) == 1.0


def _ratings(teachers, students):
    return {**{t: Rating(mu, 2.0) for t, mu in teachers.items()}, **{s: Rating(mu, 2.0) for s, mu in students.items()}}


def test_balanced_pairs_are_chosen_in_proportion_to_their_weights():
    students = {"s0": 25.0, "s1": 29.0, "s2": 33.0, "s3": 40.0}
    ratings = _ratings({"t0": 25.0}, students)
    cfg = MatchmakingConfig()
    weights = pfsp_weights("t0", list(students), ratings, cfg, CFG)
    expected = [w / sum(weights) for w in weights]
    rng = random.Random(1234)
    n = 4000
    counts = Counter(pair(["t0"], list(students), ratings, cfg, CFG, rng)[0][1] for _ in range(n))
    for s, p in zip(students, expected):
        # binomial standard error; 4 sigma tolerance
        assert abs(counts[s] / n - p) < 4 * math.sqrt(p * (1 - p) / n), (s, counts[s] / n, p)
    assert counts["s0"] > counts["s2"] > counts["s3"]  # the balanced pair is chosen most


def test_hard_weighting_prefers_students_the_teacher_beats():
    ratings = _ratings({"t0": 30.0}, {"weak": 20.0, "strong": 40.0})
    rng = random.Random(0)
    counts = Counter(
        pair(["t0"], ["weak", "strong"], ratings, MatchmakingConfig("hard"), CFG, rng)[0][1] for _ in range(500)
    )
    assert counts["weak"] > 4 * counts["strong"]


@pytest.mark.parametrize("n_teachers,n_students", [(4, 4), (8, 3), (2, 5), (1, 1)])
def test_every_teacher_gets_one_student_and_load_is_even(n_teachers, n_students):
    teachers = [f"t{i}" for i in range(n_teachers)]
    students = [f"s{i}" for i in range(n_students)]
    ratings = _ratings({t: 25.0 + 3 * i for i, t in enumerate(teachers)}, {s: 20.0 + 4 * i for i, s in enumerate(students)})
    rng = random.Random(7)
    for _ in range(50):
        pairs = pair(teachers, students, ratings, MatchmakingConfig(), CFG, rng)
        assert [t for t, _ in pairs] == teachers
        load = Counter(s for _, s in pairs)
        assert set(load) <= set(students)
        if n_teachers >= n_students:
            assert set(load) == set(students) and max(load.values()) - min(load.values()) <= 1
        else:
            assert max(load.values()) == 1  # distinct students while any is left


def test_pairing_is_reproducible_from_the_seed():
    teachers, students = ["t0", "t1", "t2"], ["s0", "s1", "s2"]
    ratings = _ratings({t: 25.0 for t in teachers}, {"s0": 20.0, "s1": 25.0, "s2": 30.0})
    runs = [[pair(teachers, students, ratings, MatchmakingConfig(), CFG, rng) for _ in range(20)]
            for rng in (random.Random(3), random.Random(3))]
    assert runs[0] == runs[1]
    other = [pair(teachers, students, ratings, MatchmakingConfig(), CFG, random.Random(4)) for _ in range(20)]
    assert other != runs[0]
