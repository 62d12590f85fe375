"""pass@k curves: for every benchmark, pass@k against k for the base model, each baseline
configuration and each population configuration (the population mean over members, and the best
member at each k), each a mean over the configuration's seeds with its 95% t interval across seeds.

The per-adapter pass@k values are the unbiased estimates written by ``populora eval --samples N``
(``eval.stats.pass_at_k``, averaged over items); a curve runs over the k that every adapter of the
benchmark has (1..N; a greedy evaluation has k = 1 only). "Best member at each k" takes, per run and
k, the member with the highest pass@k (it may be another member at another k), then the mean over
seeds. Curves are grouped by benchmark family (``BenchmarkSpec.family``), one figure per family.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from eval.benchmarks import BENCHMARKS
from eval.leaderboard.columns import BENCHMARK_OF, MAIN_COLUMNS
from eval.leaderboard.seeds import AdapterScores, RunGroup
from eval.stats import Interval, mean_interval

FAMILY_TITLES = {"evalplus": "EvalPlus (HumanEval+, MBPP+)", "livecodebench": "LiveCodeBench", "math": "Math"}


@dataclass
class Curve:
    label: str
    kind: str  # "base model" | "baseline" | "population mean" | "best member"
    config: str
    points: dict[int, Interval]


def common_ks(scores: Mapping[str, AdapterScores], col: str) -> list[int]:
    """The k that every adapter evaluated on ``col`` has."""
    sets = [set(a.pass_at_k[col]) for a in scores.values() if a.pass_at_k.get(col)]
    return sorted(set.intersection(*sets)) if sets else []


def _run_value(adapters: Sequence[AdapterScores], col: str, k: int, stat: str) -> float | None:
    xs = [a.pass_at_k.get(col, {}).get(k) for a in adapters]
    if not xs or any(x is None for x in xs):
        return None
    return max(xs) if stat == "best member" else sum(xs) / len(xs)


def curves(groups: Sequence[RunGroup], scores: Mapping[str, AdapterScores], col: str) -> list[Curve]:
    """The curves of one benchmark column (see the module docstring)."""
    ks = common_ks(scores, col)
    by_run: dict[str, list[AdapterScores]] = {}
    for a in scores.values():
        by_run.setdefault(a.run, []).append(a)
    out = [Curve(f"base model {a.model or ''}".strip(), "base model", "base",
                 {k: Interval(a.pass_at_k[col][k], None, None, 1, None) for k in ks})
           for a in scores.values() if a.role == "base" and a.pass_at_k.get(col)]
    for g in groups:
        roles = ("baseline",) if g.baseline else ("teacher", "student")
        for stat in (("baseline",) if g.baseline else ("population mean", "best member")):
            points = {}
            for k in ks:
                xs = [_run_value([a for a in by_run.get(r, []) if a.role in roles], col, k, stat) for r in g.runs]
                if xs and all(x is not None for x in xs):
                    points[k] = mean_interval(xs, bounds=(0.0, 1.0))
            if points:
                label = g.config if g.baseline and g.config == "baseline" else f"{g.config} {stat}"
                out.append(Curve(label, stat, g.config, points))
    return out


def families(columns: Sequence[str]) -> dict[str, list[str]]:
    """Family -> its benchmarks' main columns among ``columns``, in registry order."""
    out: dict[str, list[str]] = {}
    for c in MAIN_COLUMNS:
        if c in columns:
            out.setdefault(BENCHMARKS[BENCHMARK_OF[c]].family, []).append(c)
    return out
