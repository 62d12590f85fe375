"""The paired comparison: each population configuration against the single-agent baseline, on the
same items, per benchmark and for the code and math averages.

Per run, an item's score is its solve rate (correct samples / N; 0 or 1 when greedy): for a
population run the mean over its members (the population mean, the paper's claim), for a baseline
run its one adapter. The population configuration's runs (one per seed) form arm A, the baseline's
arm B; only items that every run of both arms was evaluated on enter (the item count is printed).
The difference, its 95% interval and the p-value come from ``eval.stats.paired_test``: a linear mixed
model of items and runs, paired by item, whose variance has a part for the runs (the spread of the
run means, which carries the item noise once) and a part for the items (how differently the two
configurations fare item by item), with Student's t and Satterthwaite's degrees of freedom. A group
average (code avg, math avg) is the mean of its benchmarks' differences, a run's mean taken over
every benchmark of the group (one seed is one trained run); it exists only when every benchmark of
the group does.

With one seed per arm the runs' spread cannot be measured: the p-value is then about these two runs
on these items only, not about the configurations, and the comparison says so (``Comparison.note``).
With one seed in one arm, the other arm's seeds measure the runs' spread, assumed the same in both.

Which baseline: the baseline configuration with the same extra keys (a sweep's grid values) as the
population configuration, else the only baseline there is; otherwise no comparison, and the reason
is given. The best member is not compared: it is chosen on the same items, so its p-value would not
mean what it says.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from eval.leaderboard.columns import GROUPS
from eval.leaderboard.seeds import AdapterScores, RunGroup
from eval.stats import PairedTest, paired_test

ONE_SEED_MARK = "†"  # marks, in every table and the forest plot, a p-value about two runs only
ONE_SEED_NOTE = ("one seed per arm: this p-value is about these two runs on these items only, not about the method "
                 "(how runs of other seeds differ is not measured)")


@dataclass(frozen=True)
class Comparison:
    """Population configuration ``config`` minus baseline ``baseline`` on ``column``."""

    config: str
    baseline: str
    column: str  # a benchmark column, "code avg" or "math avg"
    benchmarks: tuple[str, ...]  # the columns pooled (one for a benchmark)
    test: PairedTest | None
    reason: str = ""  # why there is no test

    @property
    def note(self) -> str:
        """What the p-value speaks of, when that is less than the configurations ("" otherwise)."""
        t = self.test
        if t is None:
            return ""
        if t.about_runs:
            return ONE_SEED_NOTE
        if min(t.seeds_a, t.seeds_b) == 1:
            one, other, n = ("population", "baseline", t.seeds_b) if t.seeds_a == 1 else ("baseline", "population", t.seeds_a)
            return (f"one {one} seed: the spread between runs is measured on the {other}'s {n} seeds only, "
                    "assumed the same for both")
        return ""

    def to_json(self) -> dict:
        return {"config": self.config, "baseline": self.baseline, "column": self.column,
                "benchmarks": list(self.benchmarks),
                **(self.test.to_json() | ({"note": self.note} if self.note else {}) if self.test else {"reason": self.reason})}


def _extra(label: str) -> str:
    return label.split(" ", 1)[1] if " " in label else ""


def matching_baseline(group: RunGroup, baselines: Sequence[RunGroup]) -> RunGroup | None:
    same = [b for b in baselines if _extra(b.config) == _extra(group.config)]
    if len(same) == 1:
        return same[0]
    return baselines[0] if len(baselines) == 1 else None


def item_scores(runs: Sequence[str], by_run: Mapping[str, Sequence[AdapterScores]], roles: tuple[str, ...],
                col: str) -> tuple[list[dict[str, float]], str]:
    """Per run, item -> score (the mean over the run's adapters of ``roles``: the population's members,
    or the baseline's one adapter), and ``""``; or ``[]`` and the reason when a run lacks the data."""
    out = []
    for run in runs:
        mine = [a for a in by_run.get(run, []) if a.role in roles]
        if not mine:
            return [], f"run {run} has no {'/'.join(roles)} scores"
        rates = [a.solve_rates.get(col) for a in mine]
        if any(r is None for r in rates):
            missing = next(a.key for a, r in zip(mine, rates) if r is None)
            return [], (f"{missing} has no per-item solve rates for {col} (evaluated before they were recorded, "
                        "or not on this benchmark)")
        items = set.intersection(*(set(r) for r in rates))
        out.append({i: float(np.mean([r[i] for r in rates])) for i in items})
    return out, ""


def _comparison(config: str, baseline: str, column: str, cols: tuple[str, ...], groups) -> Comparison:
    try:
        return Comparison(config, baseline, column, cols, paired_test(groups=groups))
    except ValueError as e:  # nothing varies (one item, one seed per arm): the reason instead of a test
        return Comparison(config, baseline, column, cols, None, str(e))


def compare(groups: Sequence[RunGroup], scores: Mapping[str, AdapterScores], columns: Sequence[str]) -> list[Comparison]:
    """Every population configuration vs its baseline on ``columns`` and the complete group averages."""
    by_run: dict[str, list[AdapterScores]] = {}
    for a in scores.values():
        by_run.setdefault(a.run, []).append(a)
    baselines = [g for g in groups if g.baseline]
    out = []
    for g in (g for g in groups if not g.baseline):
        base = matching_baseline(g, baselines)
        if base is None:
            why = "no baseline run on the leaderboard" if not baselines else \
                f"several baselines ({', '.join(b.config for b in baselines)}) and none with the same settings"
            out.append(Comparison(g.config, "-", "all", (), None, why))
            continue
        matrices: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        for col in columns:
            a_runs, why_a = item_scores(g.runs, by_run, ("teacher", "student"), col)
            b_runs, why_b = item_scores(base.runs, by_run, ("baseline",), col)
            if why_a or why_b:
                out.append(Comparison(g.config, base.config, col, (col,), None, why_a or why_b))
                continue
            items = sorted(set.intersection(*(set(r) for r in a_runs + b_runs)))
            if not items:
                out.append(Comparison(g.config, base.config, col, (col,), None, "no item evaluated in every run"))
                continue
            a = np.array([[r[i] for i in items] for r in a_runs])
            b = np.array([[r[i] for i in items] for r in b_runs])
            matrices[col] = (a, b)
            out.append(_comparison(g.config, base.config, col, (col,), [(a, b)]))
        for name in ("code", "math"):
            cols = GROUPS[name]
            if all(c in matrices for c in cols):
                out.append(_comparison(g.config, base.config, f"{name} avg", cols, [matrices[c] for c in cols]))
    return out
