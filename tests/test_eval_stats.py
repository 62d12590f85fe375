"""The leaderboard's statistics against their definitions, on synthetic verdicts (milliseconds):
pass@k against brute-force enumeration of every k-subset of the samples; the t interval against
tabled quantiles; the paired bootstrap against the exact bootstrap distribution, enumerated over
every resample of a tiny case."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from eval.stats import (
    avg_at_n,
    bootstrap_replicates,
    estimate_pass_at_k,
    mean_interval,
    paired_bootstrap,
    pass_at_k,
    pass_at_k_curve,
    t_quantile,
)


def brute_pass_at_k(verdicts: list[bool], k: int) -> float:
    """The definition: the fraction of k-subsets of the n samples that hold a correct one."""
    subsets = list(itertools.combinations(range(len(verdicts)), k))
    return sum(any(verdicts[i] for i in s) for s in subsets) / len(subsets)


@pytest.mark.parametrize("n", range(1, 9))
def test_pass_at_k_is_the_fraction_of_k_subsets_with_a_correct_sample(n):
    for c in range(n + 1):
        verdicts = [True] * c + [False] * (n - c)
        for k in range(1, n + 1):
            assert pass_at_k(n, c, k) == pytest.approx(brute_pass_at_k(verdicts, k), abs=1e-12)


def test_pass_at_k_is_stable_where_binomials_are_huge():
    n, c = 1000, 7
    for k in (1, 10, 100, 500, 993, 994, 1000):
        exact = 1 - (math.comb(n - c, k) / math.comb(n, k) if n - c >= k else 0)
        assert pass_at_k(n, c, k) == pytest.approx(exact, rel=1e-9, abs=1e-12)


def test_benchmark_pass_at_k_is_the_mean_over_items():
    rng = np.random.default_rng(3)
    items = [list(rng.random(6) < p) for p in (0.0, 0.1, 0.5, 0.9, 1.0)]
    counts = [sum(v) for v in items]
    curve = pass_at_k_curve(counts, 6)
    assert list(curve) == [1, 2, 3, 4, 5, 6]
    for k, value in curve.items():
        assert value == pytest.approx(np.mean([brute_pass_at_k(v, k) for v in items]))
    assert curve[1] == pytest.approx(avg_at_n(counts, 6))  # pass@1 = avg@n
    assert all(curve[k] <= curve[k + 1] for k in range(1, 6))
    assert list(estimate_pass_at_k(6, counts, 3)) == pytest.approx([brute_pass_at_k(v, 3) for v in items])
    assert list(estimate_pass_at_k([6] * 5, counts, 2)) == pytest.approx([brute_pass_at_k(v, 2) for v in items])


@pytest.mark.parametrize("args", [(0, 0, 1), (4, 5, 1), (4, -1, 1), (4, 2, 0), (4, 2, 5)])
def test_pass_at_k_refuses_impossible_counts(args):
    with pytest.raises(ValueError):
        pass_at_k(*args)


def test_t_quantiles_match_the_table():
    # two-sided 95% critical values of Student's t (any statistics table)
    table = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 9: 2.262, 29: 2.045}
    for df, t in table.items():
        assert t_quantile(0.975, df) == pytest.approx(t, abs=5e-4)
    assert t_quantile(0.975, 1000) == pytest.approx(1.96234, abs=1e-4)  # near the normal 1.95996


def test_t_quantiles_match_scipy_where_installed():
    stats = pytest.importorskip("scipy.stats")
    for df in (1, 2, 3, 7, 30, 200):
        for q in (0.9, 0.975, 0.995):
            assert t_quantile(q, df) == pytest.approx(stats.t.ppf(q, df), rel=1e-8)


def test_interval_across_seeds():
    xs = [0.30, 0.35, 0.32]
    iv = mean_interval(xs)
    sd = np.std(xs, ddof=1)
    assert iv.mean == pytest.approx(np.mean(xs)) and iv.sd == pytest.approx(sd) and iv.n == 3
    assert iv.high - iv.mean == pytest.approx(4.302653 * sd / math.sqrt(3), rel=1e-6)
    assert iv.mean - iv.low == pytest.approx(iv.high - iv.mean)
    one = mean_interval([0.4])
    assert (one.mean, one.low, one.high, one.half_width) == (0.4, None, None, None)
    clipped = mean_interval([0.0, 0.9, 1.0], bounds=(0.0, 1.0))
    assert clipped.low == 0.0 and clipped.high == 1.0
    with pytest.raises(ValueError):
        mean_interval([])


def exact_bootstrap(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Every bootstrap resample of a tiny case, equally likely: items drawn with replacement (one draw
    for both arms and every seed), each arm's seeds drawn with replacement when it has two or more."""
    items = a.shape[1]
    item_draws = list(itertools.product(range(items), repeat=items))

    def seed_draws(s):
        return list(itertools.product(range(s), repeat=s)) if s > 1 else [(0,)]

    out = []
    for idx in item_draws:
        for sa in seed_draws(a.shape[0]):
            for sb in seed_draws(b.shape[0]):
                out.append(a[np.ix_(sa, idx)].mean() - b[np.ix_(sb, idx)].mean())
    return np.array(out)


def test_paired_bootstrap_on_one_seed_matches_the_exact_bootstrap():
    a = np.array([1.0, 1.0, 0.0, 1.0, 0.5])
    b = np.array([0.0, 1.0, 0.0, 0.0, 0.25])
    test = paired_bootstrap(a, b, n_boot=40_000, seed=1)
    exact = exact_bootstrap(a[None], b[None])  # 5^5 = 3125 resamples
    theta = (a - b).mean()
    assert test.difference == pytest.approx(theta)
    p_exact = np.mean(np.abs(exact - theta) >= abs(theta) - 1e-12)
    assert test.p_value == pytest.approx(p_exact, abs=0.01)
    lo, hi = np.quantile(exact, [0.025, 0.975])
    assert test.low == pytest.approx(lo, abs=0.03) and test.high == pytest.approx(hi, abs=0.03)
    reps = bootstrap_replicates([(a, b)], n_boot=40_000, seed=1)
    assert reps.mean() == pytest.approx(exact.mean(), abs=0.005)
    assert reps.std() == pytest.approx(exact.std(), rel=0.03)


def test_paired_bootstrap_over_seeds_matches_the_exact_two_level_bootstrap():
    a = np.array([[1.0, 0.0, 1.0], [0.5, 0.0, 1.0]])  # 2 seeds x 3 items
    b = np.array([[0.0, 0.0, 1.0], [0.0, 0.5, 0.5], [0.5, 0.0, 0.0]])  # 3 seeds
    exact = exact_bootstrap(a, b)  # 27 item draws x 4 x 27 seed draws
    reps = bootstrap_replicates([(a, b)], n_boot=60_000, seed=2)
    assert reps.mean() == pytest.approx(exact.mean(), abs=0.005)
    assert reps.std() == pytest.approx(exact.std(), rel=0.03)
    test = paired_bootstrap(a, b, n_boot=60_000, seed=2)
    assert test.difference == pytest.approx(a.mean() - b.mean())
    assert (test.seeds_a, test.seeds_b, test.items) == (2, 3, (3,))
    frozen = bootstrap_replicates([(a, b)], n_boot=60_000, seed=2, resample_seeds=False)
    assert frozen.std() < reps.std()  # seed resampling adds the seeds' spread


def test_a_group_average_is_the_mean_of_the_groups_differences():
    g1 = (np.array([[1.0, 1.0, 0.0]]), np.array([[0.0, 1.0, 0.0]]))
    g2 = (np.array([[0.0, 0.0]]), np.array([[1.0, 0.0]]))
    test = paired_bootstrap(groups=[g1, g2], n_boot=2000)
    assert test.difference == pytest.approx(((1 / 3) + (-1 / 2)) / 2)
    assert test.items == (3, 2)


def test_paired_bootstrap_is_seeded_and_answers_the_obvious_cases():
    rng = np.random.default_rng(0)
    a = rng.random((3, 50))
    b = rng.random((3, 50))
    assert paired_bootstrap(a, b, seed=5) == paired_bootstrap(a, b, seed=5)
    assert paired_bootstrap(a, b, seed=5).low != paired_bootstrap(a, b, seed=6).low
    same = paired_bootstrap(a[0], a[0], n_boot=500)  # one seed: nothing varies
    assert (same.difference, same.low, same.high, same.p_value) == (0.0, 0.0, 0.0, 1.0)
    seeds = paired_bootstrap(a, a, n_boot=500)  # three seeds: each arm's seeds resampled on their own
    assert seeds.difference == 0.0 and seeds.p_value == 1.0 and seeds.low < 0 < seeds.high
    better = paired_bootstrap(np.clip(b + 0.2, 0, 1), b, n_boot=2000)
    assert better.p_value < 0.01 and better.low > 0
    assert better.p_value >= 1 / 2001  # never 0
    with pytest.raises(ValueError, match="same items"):
        paired_bootstrap(a, b[:, :40])
    with pytest.raises(ValueError, match="either a and b, or groups"):
        paired_bootstrap(a)
