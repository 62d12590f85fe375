"""The paired comparison: each population configuration against the single-agent baseline, on the
same items, per benchmark and for the code and math averages.

Per run, an item's score is its solve rate (correct samples / N; 0 or 1 when greedy): for a
population run the mean over its members (the population mean, the paper's claim), for a baseline
run its one adapter. The population configuration's runs (one per seed) form arm A, the baseline's
arm B; only items that every run of both arms was evaluated on enter (the item count is printed).
The difference, its 95% interval and the p-value come from ``eval.stats.paired_bootstrap``: items
resampled with replacement, the same draw for both arms and every seed (paired on items), and each
arm's seeds resampled when it has at least two. A group average (code avg, math avg) is the mean of
its benchmarks' differences, its replicates resampling the items of every benchmark and the seeds
once for all (one seed is one trained run); it exists only when every benchmark of the group does.

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
from eval.stats import PairedTest, paired_bootstrap

N_BOOT = 10_000  # ours: p-values down to 1e-4; the Monte Carlo error of a 95% bound is well under 0.1 pp
BOOTSTRAP_SEED = 0


@dataclass(frozen=True)
class Comparison:
    """Population configuration ``config`` minus baseline ``baseline`` on ``column``."""

    config: str
    baseline: str
    column: str  # a benchmark column, "code avg" or "math avg"
    benchmarks: tuple[str, ...]  # the columns pooled (one for a benchmark)
    test: PairedTest | None
    reason: str = ""  # why there is no test

    def to_json(self) -> dict:
        return {"config": self.config, "baseline": self.baseline, "column": self.column,
                "benchmarks": list(self.benchmarks), **(self.test.to_json() if self.test else {"reason": self.reason})}


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


def compare(groups: Sequence[RunGroup], scores: Mapping[str, AdapterScores], columns: Sequence[str],
            n_boot: int = N_BOOT, seed: int = BOOTSTRAP_SEED) -> list[Comparison]:
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
            out.append(Comparison(g.config, base.config, col, (col,), paired_bootstrap(a, b, n_boot=n_boot, seed=seed)))
        for name in ("code", "math"):
            cols = GROUPS[name]
            if all(c in matrices for c in cols):
                test = paired_bootstrap(groups=[matrices[c] for c in cols], n_boot=n_boot, seed=seed)
                out.append(Comparison(g.config, base.config, f"{name} avg", cols, test))
    return out
