"""How often the leaderboard's paired comparison (``eval.stats.paired_test``) rejects, by simulation:
its false-positive rate when two configurations do not differ and its power when they do, in worlds
with and without run-to-run spread, with 1-5 seeds per arm, few and many items, greedy and sampled
scores. ``tests/test_eval_calibration.py`` holds the rates to their bounds; this command prints the
table of docs/evaluation.md, beside the alternatives the test was chosen over::

    python -m eval.leaderboard.calibration                 # 4,000 trials per world (a few minutes)
    python -m eval.leaderboard.calibration --trials 1000 --no-alternatives

A world: items with logit difficulty ~ N(``item_mean``, ``item_sd``), shared by both arms; per run a
logit shift ~ N(0, ``spread``) (training randomness: what differs between seeds beyond item noise);
per arm and item a logit shift ~ N(0, ``interaction``) (the methods fare differently item by item);
arm A shifted so that its mean solve rate over the item population exceeds B's by ``difference``;
each run scores every item by ``samples`` Bernoulli draws (its solve rate), arm A's runs averaging
``members`` adapters (a population's mean). Every trial draws a new world of that kind, and the test
sees the ``[seeds, items]`` score matrices of the two arms, as the leaderboard does.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from eval.stats import paired_moments

ALPHA = 0.05


@dataclass(frozen=True)
class World:
    name: str
    seeds_a: int = 3
    seeds_b: int = 3
    items: int = 80
    samples: int = 4
    spread: float = 0.0  # sd of a run's logit shift
    difference: float = 0.0  # true A - B in mean solve rate over the item population
    interaction: float = 0.0  # sd of each arm's own logit shift per item
    item_mean: float = 0.0
    item_sd: float = 1.5
    members: int = 1  # adapters averaged in each run of arm A

    def describe(self) -> str:
        parts = [f"{self.seeds_a}/{self.seeds_b} seeds", f"{self.items} items",
                 "greedy" if self.samples == 1 else f"{self.samples} samples"]
        parts.append(f"run spread {self.spread:g}" if self.spread else "no run spread")
        if self.interaction:
            parts.append(f"arm×item sd {self.interaction:g}")
        if self.members > 1:
            parts.append(f"A = mean of {self.members} members")
        if (self.item_mean, self.item_sd) != (0.0, 1.5):
            parts.append(f"difficulty N({self.item_mean:g}, {self.item_sd:g})")
        return ", ".join(parts)


def _expit(x: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-x))


def logit_shift(difference: float, item_mean: float = 0.0, item_sd: float = 1.5, interaction: float = 0.0) -> float:
    """The logit shift of arm A whose mean solve rate over the item population exceeds B's by
    ``difference`` (Gauss-Hermite quadrature over the item logits; scipy's root finder)."""
    if difference == 0:
        return 0.0
    from scipy.optimize import brentq

    x, w = np.polynomial.hermite_e.hermegauss(120)
    w = w / w.sum()
    z = item_mean + math.sqrt(item_sd**2 + interaction**2) * x

    def gap(shift: float) -> float:
        return float(np.sum(w * (_expit(z + shift) - _expit(z)))) - difference

    return float(brentq(gap, -20, 20))


def simulate(world: World, trials: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``trials`` draws of the world: the arms' score matrices, ``[trials, seeds, items]`` each."""
    item = rng.normal(world.item_mean, world.item_sd, (trials, 1, world.items))
    shift = logit_shift(world.difference, world.item_mean, world.item_sd, world.interaction)

    def arm(seeds: int, offset: float, members: int) -> np.ndarray:
        logit = item + offset + rng.normal(0, world.spread, (trials, seeds, 1))
        if world.interaction:
            logit = logit + rng.normal(0, world.interaction, (trials, 1, world.items))
        p = np.broadcast_to(_expit(logit)[..., None], (trials, seeds, world.items, members))
        return (rng.binomial(world.samples, p) / world.samples).mean(-1)

    return arm(world.seeds_a, shift, world.members), arm(world.seeds_b, 0.0, 1)


def p_values(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The leaderboard's p-value of every trial (``eval.stats``, the same code it runs)."""
    return paired_moments([(a, b)]).p_values()


def rejection_rate(world: World, trials: int, seed: int = 0, test=p_values) -> float:
    """The share of ``trials`` in which ``test`` rejects at ``ALPHA`` (seeded: the same every time)."""
    a, b = simulate(world, trials, np.random.default_rng(seed))
    return float(np.mean(test(a, b) < ALPHA))


# -- the alternatives, for the table ----------------------------------------------------------------
def items_only(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Miller 2024's paired test over items of the run-averaged scores (runs ignored)."""
    from scipy.stats import t

    d = a.mean(1) - b.mean(1)
    n = d.shape[-1]
    return 2 * t.sf(np.abs(d.mean(-1)) / np.sqrt(d.var(-1, ddof=1) / n), n - 1)


def runs_only(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Student's pooled t on the run means (items fixed); NaN with one seed per arm."""
    from scipy.stats import t

    ra, rb = a.mean(-1), b.mean(-1)
    k = ra.shape[-1] + rb.shape[-1] - 2
    if k == 0:
        return np.full(ra.shape[0], np.nan)
    s2 = (((ra - ra.mean(-1, keepdims=True)) ** 2).sum(-1) + ((rb - rb.mean(-1, keepdims=True)) ** 2).sum(-1)) / k
    h = 1 / ra.shape[-1] + 1 / rb.shape[-1]
    with np.errstate(divide="ignore", invalid="ignore"):
        return 2 * t.sf(np.abs(ra.mean(-1) - rb.mean(-1)) / np.sqrt(h * s2), k)


def two_level_bootstrap(a: np.ndarray, b: np.ndarray, n_boot: int = 500, seed: int = 0, chunk: int = 25) -> np.ndarray:
    """The test this project used before: items resampled once for both arms and every seed, each
    arm's seeds resampled when it has two or more, p from the centred replicates (``chunk`` trials at once)."""
    rng = np.random.default_rng(seed)
    trials, s_a, n = a.shape
    s_b = b.shape[1]

    def weights(s: int, m: int) -> np.ndarray:
        if s < 2:
            return np.full((m, n_boot, s), 1 / s)
        return rng.multinomial(s, [1 / s] * s, size=(m, n_boot)) / s

    out = np.empty(trials)
    for lo in range(0, trials, chunk):
        x, y = a[lo:lo + chunk], b[lo:lo + chunk]
        m = x.shape[0]
        wi = rng.multinomial(n, [1 / n] * n, size=(m, n_boot)) / n  # [trials, replicates, items], shared by A and B
        reps = np.einsum("tms,tmi,tsi->tm", weights(s_a, m), wi, x) - np.einsum("tms,tmi,tsi->tm", weights(s_b, m), wi, y)
        theta = (x.mean((1, 2)) - y.mean((1, 2)))[:, None]
        out[lo:lo + m] = (1 + np.sum(np.abs(reps - theta) >= np.abs(theta) - 1e-12, axis=1)) / (n_boot + 1)
    return out


def no_margin(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """This test with the plain positive part of the arm-by-item variance (no one-SE margin)."""
    return paired_moments([(a, b)], margin=0.0).p_values()


def reml_like(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Variance components truncated at zero, as REML fits them (lme4): the run variance is
    ``max(0, s2 - sigma_e2 / n)``, the arm-by-item one ``max(0, vd - h sigma_e2)``; Satterthwaite's df
    over the parts that are kept."""
    from scipy.stats import t

    s_a, s_b, n = a.shape[1], b.shape[1], a.shape[2]
    k, h = s_a + s_b - 2, 1 / s_a + 1 / s_b
    if k == 0:
        return np.full(a.shape[0], np.nan)
    ra, rb = a.mean(-1), b.mean(-1)
    s2 = (((ra - ra.mean(-1, keepdims=True)) ** 2).sum(-1) + ((rb - rb.mean(-1, keepdims=True)) ** 2).sum(-1)) / k

    def resid(x):
        r = x - x.mean(-1, keepdims=True) - x.mean(-2, keepdims=True) + x.mean((-2, -1), keepdims=True)
        return (r * r).sum((-2, -1))

    e2 = (resid(a) + resid(b)) / (k * (n - 1))
    vd = (a.mean(1) - b.mean(1)).var(-1, ddof=1)
    run, item = np.maximum(0, s2 - e2 / n), np.maximum(0, vd - h * e2)
    var = h * run + item / n + h * e2 / n
    den = (h * s2) ** 2 / k * (run > 0) + (vd / n) ** 2 / (n - 1) * (item > 0) + (h * e2 / n) ** 2 / (k * (n - 1))
    return 2 * t.sf(np.abs(a.mean((1, 2)) - b.mean((1, 2))) / np.sqrt(var), var**2 / den)


ALTERNATIVES = {"two-level bootstrap (before)": two_level_bootstrap, "items only (Miller 2024)": items_only,
                "runs only (t on run means)": runs_only, "no margin": no_margin, "REML-like truncation": reml_like}

NULL_WORLDS = (
    World("one seed, no spread", 1, 1),
    World("one seed, spread", 1, 1, spread=0.3),
    World("2 seeds, no spread", 2, 2),
    World("2 seeds, spread", 2, 2, spread=0.3),
    World("3 seeds, no spread", 3, 3),
    World("3 seeds, spread", 3, 3, spread=0.3),
    World("5 seeds, no spread", 5, 5),
    World("5 seeds, spread", 5, 5, spread=0.3),
    World("3 seeds, 30 items, no spread", items=30),
    World("3 seeds, 30 items, spread", items=30, spread=0.3),
    World("2 seeds, 30 items, no spread", 2, 2, items=30),
    World("3 seeds, 300 items, no spread", items=300),
    World("3 seeds, greedy, no spread", samples=1),
    World("3 seeds, greedy, spread", samples=1, spread=0.3),
    World("3 seeds, small spread", spread=0.1),
    World("3 seeds, large spread", spread=0.6),
    World("3 seeds, population of 8, spread", samples=8, members=8, spread=0.3),
    World("3 seeds, hard items, no spread", item_mean=-2.0),
    World("3 seeds, arm×item, no spread", interaction=0.7),
    World("3 seeds, arm×item, spread", interaction=0.7, spread=0.3),
    World("2 seeds, arm×item, no spread", 2, 2, interaction=0.7),
    World("2 vs 4 seeds, spread", 2, 4, spread=0.3),
    World("1 vs 3 seeds, spread", 1, 3, spread=0.3),
)
POWER_WORLDS = (
    World("3 seeds, no spread, +0.08", difference=0.08),
    World("3 seeds, spread, +0.08", spread=0.3, difference=0.08),
    World("2 seeds, no spread, +0.08", 2, 2, difference=0.08),
    World("5 seeds, no spread, +0.08", 5, 5, difference=0.08),
    World("5 seeds, spread, +0.08", 5, 5, spread=0.3, difference=0.08),
    World("one seed, no spread, +0.08", 1, 1, difference=0.08),
)


def table(worlds: Sequence[World], trials: int, seed: int = 0, alternatives: bool = True) -> Iterator[str]:
    """Markdown rows, one at a time: each world's rejection rate under the test (and the alternatives)."""
    names = list(ALTERNATIVES) if alternatives else []
    head = ["world", "seeds A/B, items, scores", "this test", *names]
    yield "| " + " | ".join(head) + " |"
    yield "|---|---|" + "---:|" * (1 + len(names))
    for i, w in enumerate(worlds):
        a, b = simulate(w, trials, np.random.default_rng(seed + i))
        rates = [np.mean(p_values(a, b) < ALPHA)]
        for name in names:
            p = ALTERNATIVES[name](a, b)
            rates.append(np.nan if np.all(np.isnan(p)) else np.mean(p < ALPHA))
        yield f"| {w.name} | {w.describe()} | " + " | ".join("-" if np.isnan(r) else f"{r:.3f}" for r in rates) + " |"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m eval.leaderboard.calibration", description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=4000, help="trials per world (default 4000: binomial SE 0.0034 at 0.05)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-alternatives", action="store_true", help="only this test (the bootstrap is the slow one)")
    args = ap.parse_args(argv)
    alt = not args.no_alternatives
    se = math.sqrt(ALPHA * (1 - ALPHA) / args.trials)
    print(f"False-positive rate at p < {ALPHA} (no true difference), {args.trials} trials per world "
          f"(binomial SE {se:.4f}), seed {args.seed}:\n")
    for row in table(NULL_WORLDS, args.trials, args.seed, alt):
        print(row, flush=True)
    print(f"\nPower at p < {ALPHA} (true difference of mean solve rates 0.08):\n")
    for row in table(POWER_WORLDS, args.trials, args.seed + 1000, alt):
        print(row, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
