"""Rated games: each role's outcome follows its own RL reward (property tests and the scenario of issue 15)."""

from __future__ import annotations

import pytest
import trueskill
from hypothesis import given, settings
from hypothesis import strategies as st

from populora.population.ratings import (
    DRAW,
    LOSS,
    STUDENT,
    TEACHER,
    WIN,
    Game,
    Rating,
    RatingConfig,
    conservative_score,
    draw_band,
    game_outcome,
    play,
    prior,
    step_games,
)
from populora.tasks.rewards import student_reward, teacher_reward

CFG = RatingConfig()
PROPERTY = settings(max_examples=300, deadline=None, derandomize=True)

rho_values = st.integers(0, 8).map(lambda k: k / 8)  # solve rates of 8 rollouts
proposal = st.tuples(st.booleans(), rho_values)  # (valid, rho)
attempt = st.sampled_from([(True, True), (True, False), (False, False)])  # (format_ok, correct)
ratings = st.builds(Rating, st.floats(5.0, 45.0), st.floats(0.5, 25.0 / 3.0))


def _teacher_rewards(proposals, variant):
    return [teacher_reward(valid, rho, variant) for valid, rho in proposals]


def _gain(game: Game, own: Rating, opponent: Rating) -> tuple[float, float]:
    """(conservative score gained, mu gained) by ``game.member`` from one game."""
    new, _ = play({game.member: own, game.opponent: opponent}, [game], CFG)
    after = new[game.member]
    return conservative_score(after, CFG) - conservative_score(own, CFG), after.mu - own.mu


@PROPERTY
@given(
    a=st.lists(proposal, min_size=1, max_size=24),
    b=st.lists(proposal, min_size=1, max_size=24),
    variant=st.sampled_from(["populora", "azr"]),
    own=ratings,
    opponent=ratings,
)
def test_teachers_ranked_by_rating_gain_are_ranked_by_mean_reward(a, b, variant, own, opponent):
    ga = Game("ta", TEACHER, "s", _teacher_rewards(a, variant))
    gb = Game("tb", TEACHER, "s", _teacher_rewards(b, variant))
    (score_a, mu_a), (score_b, mu_b) = _gain(ga, own, opponent), _gain(gb, own, opponent)
    if ga.mean_reward > gb.mean_reward:
        assert score_a >= score_b - 1e-9 and mu_a >= mu_b - 1e-9
    elif gb.mean_reward > ga.mean_reward:
        assert score_b >= score_a - 1e-9 and mu_b >= mu_a - 1e-9


@PROPERTY
@given(
    a=st.lists(attempt, min_size=1, max_size=40),
    b=st.lists(attempt, min_size=1, max_size=40),
    own=ratings,
    opponent=ratings,
)
def test_students_ranked_by_rating_gain_are_ranked_by_mean_reward(a, b, own, opponent):
    ga = Game("sa", STUDENT, "t", [student_reward(f, c) for f, c in a])
    gb = Game("sb", STUDENT, "t", [student_reward(f, c) for f, c in b])
    (score_a, mu_a), (score_b, mu_b) = _gain(ga, own, opponent), _gain(gb, own, opponent)
    if ga.mean_reward > gb.mean_reward:
        assert score_a >= score_b - 1e-9 and mu_a >= mu_b - 1e-9
    elif gb.mean_reward > ga.mean_reward:
        assert score_b >= score_a - 1e-9 and mu_b >= mu_a - 1e-9


def test_the_outcome_is_a_three_step_function_of_the_mean_reward():
    # teacher band: rewards at solve rates 0.6 and 0.4; student band: rewards at 0.4 and 0.6
    assert draw_band(TEACHER, 0.1) == pytest.approx((0.4, 0.6))
    assert draw_band(STUDENT, 0.1) == pytest.approx((0.1, 0.4))
    assert draw_band(STUDENT, 0.0) == pytest.approx((0.25, 0.25))  # 50% solved, all well formed
    t = lambda *r: game_outcome(Game("t", TEACHER, "s", r), 0.1)  # noqa: E731
    assert t(0.7) == WIN and t(0.6) == DRAW and t(0.5) == DRAW and t(0.4) == DRAW and t(0.3) == LOSS
    assert t(-1.0) == LOSS  # an invalid proposal
    assert t(0.0) == LOSS  # the zero floor: a task nobody (or everybody) solves is no teacher win
    assert t(-1.0, 0.875) == LOSS  # one invalid proposal cancels one excellent task
    s = lambda *r: game_outcome(Game("s", STUDENT, "t", r), 0.1)  # noqa: E731
    # 3 of 5 correct and well formed is a solve rate of 0.6: the band's edge, a draw (as before)
    assert s(1, 1, 1, -0.5, -0.5) == DRAW
    assert s(1, 1, 1, 1, -0.5) == WIN and s(1, -0.5, -0.5, -0.5) == LOSS
    assert s(1, 1, -0.5, -0.5) == DRAW and s(1, 1, -1, -1) == LOSS  # format failures count against the student


def test_in_the_consistent_regime_the_two_games_agree_with_the_joint_match():
    """All valid, all well formed, 0 < rho < 1: teacher wins exactly when its student loses."""
    for k in range(1, 8):
        rho = k / 8
        teacher = game_outcome(Game("t", TEACHER, "s", [teacher_reward(True, rho)]), CFG.margin)
        student = game_outcome(Game("s", STUDENT, "t", [1.0] * k + [-0.5] * (8 - k)), CFG.margin)
        assert {teacher, student} in ({WIN, LOSS}, {DRAW}), (rho, teacher, student)


def test_games_reject_bad_input_with_a_clear_message():
    with pytest.raises(ValueError, match="no rewards"):
        Game("t0", TEACHER, "s0", [])
    with pytest.raises(ValueError, match=r"reward 1.5 outside \[-1, 1\]"):
        Game("t0", TEACHER, "s0", [1.5])
    with pytest.raises(ValueError, match="reward nan"):
        Game("t0", TEACHER, "s0", [float("nan")])
    with pytest.raises(ValueError, match="role must be one of"):
        Game("t0", "judge", "s0", [0.0])
    with pytest.raises(KeyError, match="'s9' has no rating"):
        play({"t0": prior(CFG)}, [Game("t0", TEACHER, "s9", [0.0])], CFG)
    with pytest.raises(ValueError, match="was not paired with"):
        step_games({"t0": "s0"}, {}, {("s1", "t0"): [1.0]})


def test_step_games_skip_members_without_rewards_and_are_ordered():
    pairs = {"t1": "s0", "t0": "s0", "t2": "s1"}
    games = step_games(pairs, {"t0": [0.5], "t1": [-1.0, 0.25], "t2": []},
                       {("s0", "t1"): [1.0], ("s0", "t0"): [-0.5, 1.0], ("s1", "t2"): []})
    assert [(g.member, g.opponent) for g in games] == [("t0", "s0"), ("t1", "s0"), ("s0", "t0"), ("s0", "t1")]
    assert games[1].rewards == (-1.0, 0.25) and games[1].role == TEACHER


def test_play_uses_the_ratings_from_before_the_step():
    env = trueskill.TrueSkill(mu=25, sigma=25 / 3, beta=25 / 6, tau=25 / 300, draw_probability=0.1)
    before = {"t0": Rating(30.0, 4.0), "t1": Rating(22.0, 6.0), "s0": Rating(20.0, 3.0)}
    games = [Game("t0", TEACHER, "s0", [0.9]), Game("s0", STUDENT, "t0", [1.0]),
             Game("s0", STUDENT, "t1", [-0.5]), Game("t1", TEACHER, "s0", [0.5])]
    after, results = play(before, games, CFG)
    assert before["s0"] == Rating(20.0, 3.0)  # input untouched
    t0, _ = trueskill.rate_1vs1(env.create_rating(30, 4), env.create_rating(20, 3), env=env)
    assert after["t0"] == pytest.approx(Rating(t0.mu, t0.sigma))  # against s0's rating before its own games
    s0, _ = trueskill.rate_1vs1(env.create_rating(20, 3), env.create_rating(30, 4), env=env)  # a win vs t0 before
    _, s0 = trueskill.rate_1vs1(env.create_rating(22, 6), s0, env=env)  # then a loss vs t1 before, chained
    assert after["s0"] == pytest.approx(Rating(s0.mu, s0.sigma))
    t1, _ = trueskill.rate_1vs1(env.create_rating(22, 6), env.create_rating(20, 3), drawn=True, env=env)
    assert after["t1"] == pytest.approx(Rating(t1.mu, t1.sigma))
    assert [r.outcome for r in results] == [WIN, WIN, LOSS, DRAW]
    assert results[2].before == results[1].after and results[0].before == Rating(30.0, 4.0)


# -- the scenario of issue 15 -------------------------------------------------------------------------
def _joint_match_before(rho_valid: list[float], env) -> str:
    """The previous rule, for comparison: one joint game decided by the mean rho over valid tasks."""
    if not rho_valid:
        return "student"
    mean = sum(rho_valid) / len(rho_valid)
    return "student" if mean > 0.6 else "teacher" if mean < 0.4 else "draw"


def _scenario(steps: int = 10) -> dict[str, tuple[float, float]]:
    """Teacher A: 95 invalid proposals + 1 valid task its student never solves (8 rollouts).
    Teacher B: 96 valid tasks its student solves at rho = 0.5. Each plays its own student.
    Returns {teacher: (conservative score under the previous rule, under the new rule)}."""
    env = trueskill.TrueSkill(mu=25, sigma=25 / 3, beta=25 / 6, tau=25 / 300, draw_probability=0.1)
    a_props = [(False, None)] * 95 + [(True, 0.0)]
    b_props = [(True, 0.5)] * 96
    a_attempts = [-0.5] * 8  # the one valid task, all rollouts wrong but well formed
    b_attempts = ([1.0] * 4 + [-0.5] * 4) * 96
    old = {m: env.create_rating() for m in ("tA", "sA", "tB", "sB")}
    new = {m: prior(CFG) for m in ("tA", "sA", "tB", "sB")}
    for _ in range(steps):
        for t, s, props in (("tA", "sA", a_props), ("tB", "sB", b_props)):
            outcome = _joint_match_before([rho for valid, rho in props if valid], env)
            if outcome == "teacher":
                old[t], old[s] = trueskill.rate_1vs1(old[t], old[s], env=env)
            else:
                old[s], old[t] = trueskill.rate_1vs1(old[s], old[t], drawn=outcome == "draw", env=env)
        games = step_games({"tA": "sA", "tB": "sB"},
                           {"tA": [teacher_reward(v, r) for v, r in a_props],
                            "tB": [teacher_reward(v, r) for v, r in b_props]},
                           {("sA", "tA"): a_attempts, ("sB", "tB"): b_attempts})
        new, _ = play(new, games, CFG)
    return {t: (old[t].mu - 3 * old[t].sigma, conservative_score(new[t], CFG)) for t in ("tA", "tB")}


def test_issue_scenario_invalid_teacher_no_longer_outranks_the_useful_one(capsys):
    scores = _scenario()
    (a_before, a_after), (b_before, b_after) = scores["tA"], scores["tB"]
    with capsys.disabled():
        print(f"\n95 invalid + 1 unsolved vs 96 valid at rho=0.5, 10 steps (conservative score mu - 3 sigma):"
              f"\n  previous rule: A {a_before:.2f}  B {b_before:.2f}"
              f"\n  new rule:      A {a_after:.2f}  B {b_after:.2f}")
    assert a_before == pytest.approx(19.76, abs=0.01) and b_before == pytest.approx(18.44, abs=0.01)
    assert a_before > b_before  # the bug: evolution would keep A and cull B
    assert a_after < b_after  # fixed: the teacher with the higher mean RL reward ranks higher
