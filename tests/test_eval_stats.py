"""The evaluation's statistics against their definitions (milliseconds): pass@k against brute-force
enumeration of every k-subset of the samples; the t interval against tabled quantiles; the Wilson
interval against scipy; the paired comparison against the textbook tests it reduces to (the paired t
test with one seed per arm, the pooled two-sample t test on the run means when the items add nothing)
and against its variance components computed by hand. Its calibration by simulation is
tests/test_eval_calibration.py."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats as sp

from eval.stats import (
    avg_at_n,
    estimate_pass_at_k,
    mean_interval,
    paired_moments,
    paired_test,
    pass_at_k,
    pass_at_k_curve,
    wilson_interval,
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


def test_t_interval_quantiles_match_the_table():
    # two-sided 95% critical values of Student's t (any statistics table): the half-width / (sd / sqrt(s))
    table = {2: 12.706, 3: 4.303, 4: 3.182, 5: 2.776, 6: 2.571, 10: 2.262, 30: 2.045}
    for s, t in table.items():
        xs = np.linspace(0.3, 0.4, s)
        iv = mean_interval(xs)
        assert iv.half_width / (iv.sd / math.sqrt(s)) == pytest.approx(t, abs=5e-4)


def test_wilson_interval_is_scipys_for_whole_counts():
    for k, n in ((0, 10), (6, 10), (10, 10), (15, 30), (1, 164)):
        ci = sp.binomtest(k, n).proportion_ci(confidence_level=0.95, method="wilson")
        assert wilson_interval(k, n) == pytest.approx((ci.low, ci.high), abs=1e-9)
    lo, hi = wilson_interval(6.5, 10)  # a sampled evaluation's summed solve rates
    assert wilson_interval(6, 10)[0] < lo < hi < wilson_interval(7, 10)[1]
    assert wilson_interval(0, 0) == (0.0, 1.0)


def test_one_seed_per_arm_is_the_paired_t_test_of_the_two_runs():
    rng = np.random.default_rng(1)
    a, b = rng.random(40), rng.random(40)
    test = paired_test(a, b)
    ref = sp.ttest_rel(a, b)
    assert test.difference == pytest.approx(np.mean(a - b)) and test.p_value == pytest.approx(ref.pvalue, rel=1e-10)
    ci = ref.confidence_interval(0.95)
    assert (test.low, test.high) == pytest.approx((ci.low, ci.high), rel=1e-10)
    assert test.df == 39 and test.run_variance is None and test.about_runs
    assert test.to_json()["about"] == "these runs on these items"


def test_without_an_item_effect_it_is_the_pooled_t_test_of_the_run_means():
    rng = np.random.default_rng(2)
    item = rng.random(30)
    a = item + rng.normal(0, 0.05, (3, 1)) + 0.02  # every run a constant shift of the same items: nothing per item
    b = item + rng.normal(0, 0.05, (4, 1))
    test = paired_test(a, b)
    ref = sp.ttest_ind(a.mean(1), b.mean(1), equal_var=True)
    assert test.item_variance == 0 and test.df == pytest.approx(3 + 4 - 2)
    assert test.p_value == pytest.approx(ref.pvalue, rel=1e-9) and not test.about_runs
    ci = ref.confidence_interval(0.95)
    assert (test.low, test.high) == pytest.approx((ci.low, ci.high), rel=1e-9)


def variance_by_hand(a: np.ndarray, b: np.ndarray) -> tuple[float, float, float]:
    """Run part, item part and Satterthwaite's df of the module docstring, written out with loops."""
    (sa, n), sb = a.shape, b.shape[0]
    k, h = sa + sb - 2, 1 / sa + 1 / sb
    means = [[row.mean() for row in x] for x in (a, b)]
    s2 = sum((m - np.mean(ms)) ** 2 for ms in means for m in ms) / k
    resid = 0.0
    for x in (a, b):
        for s in range(x.shape[0]):
            for i in range(n):
                resid += (x[s, i] - x[s].mean() - x[:, i].mean() + x.mean()) ** 2
    sigma_e2 = resid / (k * (n - 1))
    d = [a[:, i].mean() - b[:, i].mean() for i in range(n)]
    vd = sum((x - np.mean(d)) ** 2 for x in d) / (n - 1)
    g = vd - (1 + math.sqrt(2 / (n - 1) + 2 / (k * (n - 1)))) * h * sigma_e2
    run, item = h * s2, max(g, 0.0) / n
    den = run**2 / k + ((vd**2 / (n - 1) + (h * sigma_e2) ** 2 / (k * (n - 1))) / n**2 if g > 0 else 0.0)
    return run, item, (run + item) ** 2 / den


def test_variance_components_match_the_formulas_written_out():
    rng = np.random.default_rng(3)
    per_item = rng.normal(0, 0.3, 25)  # the methods fare differently item by item
    a = np.clip(0.5 + per_item + rng.normal(0, 0.05, (3, 1)) + rng.normal(0, 0.1, (3, 25)), 0, 1)
    b = np.clip(0.5 + rng.normal(0, 0.05, (2, 1)) + rng.normal(0, 0.1, (2, 25)), 0, 1)
    test = paired_test(a, b)
    run, item, df = variance_by_hand(a, b)
    assert item > 0 and (test.run_variance, test.item_variance, test.df) == pytest.approx((run, item, df), rel=1e-10)
    assert test.se == pytest.approx(math.sqrt(run + item))
    assert test.p_value == pytest.approx(2 * sp.t.sf(abs(a.mean() - b.mean()) / test.se, df), rel=1e-10)
    assert test.high - test.difference == pytest.approx(sp.t.ppf(0.975, df) * test.se)


def test_a_group_average_is_the_mean_of_the_groups_and_a_run_is_one_seed_for_all():
    rng = np.random.default_rng(4)
    a, b = rng.random((3, 20)), rng.random((3, 20))
    a2, b2 = rng.random((3, 12)), rng.random((3, 12))
    test = paired_test(groups=[(a, b), (a2, b2)])
    assert test.difference == pytest.approx(((a.mean() - b.mean()) + (a2.mean() - b2.mean())) / 2)
    assert test.items == (20, 12)
    ra, rb = (a.mean(1) + a2.mean(1)) / 2, (b.mean(1) + b2.mean(1)) / 2
    assert test.run_variance == pytest.approx((2 / 3) * (ra.var(ddof=1) + rb.var(ddof=1)) / 2)
    twice = paired_test(groups=[(a, b), (a, b)])  # one benchmark twice: the same difference and runs, item part halved
    once = paired_test(a, b)
    assert (twice.difference, twice.run_variance) == pytest.approx((once.difference, once.run_variance))
    assert twice.item_variance == pytest.approx(once.item_variance / 2)


def test_the_batched_moments_are_the_single_tests():
    rng = np.random.default_rng(5)
    a, b = rng.random((6, 3, 15)), rng.random((6, 2, 15))
    m = paired_moments([(a, b)])
    for t in range(6):
        one = paired_test(a[t], b[t])
        assert (m.difference[t], m.variance[t] ** 0.5, m.df[t], m.p_values()[t]) == pytest.approx(
            (one.difference, one.se, one.df, one.p_value))


def test_the_obvious_cases_and_bad_input():
    rng = np.random.default_rng(0)
    a, b = rng.random((3, 50)), rng.random((3, 50))
    assert paired_test(a, b) == paired_test(a, b)  # deterministic: nothing is drawn
    same = paired_test(a[0], a[0])
    assert (same.difference, same.low, same.high, same.p_value) == (0.0, 0.0, 0.0, 1.0)
    seeds = paired_test(a, a)
    assert seeds.difference == 0.0 and seeds.p_value == 1.0 and seeds.low < 0 < seeds.high
    better = paired_test(np.clip(b + 0.2, 0, 1), b)
    assert better.p_value < 0.01 and better.low > 0
    shifted = paired_test(a[0] + 0.1, a[0])  # every item exactly 0.1 better, one run each: no variance at all
    assert (shifted.p_value, shifted.low, shifted.high) == (0.0, pytest.approx(0.1), pytest.approx(0.1))
    with pytest.raises(ValueError, match="same items"):
        paired_test(a, b[:, :40])
    with pytest.raises(ValueError, match="either a and b, or groups"):
        paired_test(a)
    with pytest.raises(ValueError, match="another number of seeds"):
        paired_test(groups=[(a, b), (a[:2], b)])
    with pytest.raises(ValueError, match="one seed per arm and one item per benchmark: nothing to estimate"):
        paired_test([1.0], [0.0])
    assert paired_test([[1.0], [0.0]], [[0.0], [0.0]]).run_variance > 0  # one item, two seeds: the runs vary
    with pytest.raises(ValueError, match="non-finite"):
        paired_test(a, np.full((3, 50), np.nan))
