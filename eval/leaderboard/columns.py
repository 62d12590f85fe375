"""The leaderboard's columns: every benchmark metric (``BenchmarkSpec.column_names``), then the
averages over complete groups (code, math) and their mean. One place, read by the per-run table, the
across-seed tables, the paired comparisons and the pass@k figures."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from eval.benchmarks import BENCHMARKS

GROUPS = {g: tuple(s.average_column() for s in BENCHMARKS.values() if s.group == g) for g in ("code", "math")}
ALL_COLUMNS = tuple(col for s in BENCHMARKS.values() for _, col in s.column_names())
MAIN_COLUMNS = GROUPS["code"] + GROUPS["math"]  # the metric of each benchmark that enters its group's average
AVERAGES = ("code avg", "math avg", "overall")
AVERAGE_RULE = (f"code avg = mean of {', '.join(GROUPS['code'])}, shown only when all {len(GROUPS['code'])} are "
                f"present; math avg = mean of the {len(GROUPS['math'])} math sets, only when all are present; "
                "overall = mean of code avg and math avg, only when both exist. Blank = not evaluated.")
# column -> the benchmark (registry name) it belongs to
BENCHMARK_OF = {col: name for name, s in BENCHMARKS.items() for _, col in s.column_names()}


def group_average(values: Mapping[str, float | None], cols: Sequence[str]) -> float | None:
    """Mean of ``values`` over ``cols``; None unless every one is present."""
    got = [values.get(c) for c in cols]
    return None if any(v is None for v in got) else sum(got) / len(got)


def with_averages(values: Mapping[str, float | None]) -> dict[str, float | None]:
    """``values`` plus ``code avg``, ``math avg`` and ``overall`` (see :data:`AVERAGE_RULE`)."""
    v = dict(values)
    v["code avg"] = group_average(v, GROUPS["code"])
    v["math avg"] = group_average(v, GROUPS["math"])
    v["overall"] = None if v["code avg"] is None or v["math avg"] is None else (v["code avg"] + v["math avg"]) / 2
    return v
