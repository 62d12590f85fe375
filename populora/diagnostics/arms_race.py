"""Arms-race time series from ``metrics.jsonl`` rows (pure functions of the rows).

A series is ``(steps, values)`` over the steps where the metric was logged with a finite value.
What the paper reads from them: in a population the TrueSkill means of members spread apart and
solve rates oscillate (teachers keep up with students); a single agent's solve rate climbs to 1,
its responses and policy entropy shrink (self-calibration, collapse).

Names read (``populora.selfplay.metrics``): ``member/<id>/mu``, ``member/<id>/sigma``,
``member/<id>/reward_mean``, ``student/<type>/solve_rate``, ``teacher/<type>/valid_rate``,
``adapter/<id>/completion_tokens``, ``adapter/<id>/sequences``, ``train/<id>/entropy/mean``
(logged at every update whatever ``rl.entropy_coef`` is).
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Callable, Sequence

from populora.diagnostics.runs import finite

Series = tuple[list[int], list[float]]
ENTROPY_KEYS = ("entropy/mean",)


def series(rows: Sequence[dict], key: str) -> Series:
    steps, values = [], []
    for r in rows:
        v = r.get(key)
        if finite(v):
            steps.append(int(r["step"]))
            values.append(float(v))
    return steps, values


def keys_matching(rows: Sequence[dict], pattern: str) -> dict[str, str]:
    """``{group: key}`` for every metric name matching ``pattern`` (one capture group), sorted."""
    rx = re.compile(pattern)
    out = {}
    for r in rows:
        for k in r:
            m = rx.fullmatch(k)
            if m:
                out[m.group(1)] = k
    return dict(sorted(out.items()))


def per_member(rows: Sequence[dict], metric: str) -> dict[str, Series]:
    """``member/<id>/<metric>`` for every member id."""
    return {mid: series(rows, k) for mid, k in keys_matching(rows, rf"member/([^/]+)/{re.escape(metric)}").items()}


def by_task_type(rows: Sequence[dict], scope: str, metric: str) -> dict[str, Series]:
    """``<scope>/<type>/<metric>`` for every task type (e.g. student/code_o/solve_rate)."""
    pat = rf"{scope}/(code_[a-z]+)/{re.escape(metric)}"
    return {tt: series(rows, k) for tt, k in keys_matching(rows, pat).items()}


def role_stats(rows: Sequence[dict], metric_of: Callable[[dict, str], float | None], ids_of_role: dict[str, list[str]]
               ) -> dict[str, tuple[list[int], list[float], list[float]]]:
    """Per role: ``(steps, mean, std)`` over the members of the role that have a value at each step."""
    out = {}
    for role, ids in ids_of_role.items():
        steps, means, stds = [], [], []
        for r in rows:
            vals = [v for mid in ids if (v := metric_of(r, mid)) is not None and finite(v)]
            if vals:
                m = sum(vals) / len(vals)
                steps.append(int(r["step"]))
                means.append(m)
                stds.append(math.sqrt(sum((v - m) ** 2 for v in vals) / len(vals)))
        if steps:
            out[role] = (steps, means, stds)
    return out


def ids_by_role(roles: dict[str, str], rows: Sequence[dict]) -> dict[str, list[str]]:
    """Member ids per role, over every id that appears in ``rows`` (lineage roles, else the id's letter)."""
    ids = set()
    for r in rows:
        for k in r:
            parts = k.split("/")
            if len(parts) >= 3 and parts[0] in ("member", "adapter", "train"):
                ids.add(parts[1])
    out: dict[str, list[str]] = defaultdict(list)
    for mid in sorted(ids):
        role = roles.get(mid) or {"t": "teacher", "s": "student", "a": "agent"}.get(mid[:1], "unknown")
        out[role].append(mid)
    return dict(out)


def rating_stats(rows, ids_of_role) -> dict:
    """Per role TrueSkill mu: mean and spread (std) over the live members at each step."""
    return role_stats(rows, lambda r, mid: r.get(f"member/{mid}/mu"), ids_of_role)


def response_length(row: dict, mid: str) -> float | None:
    """Completion tokens per trained sequence of member ``mid`` at that step."""
    n = row.get(f"adapter/{mid}/sequences")
    tok = row.get(f"adapter/{mid}/completion_tokens")
    if finite(n) and finite(tok) and n > 0:
        return tok / n
    return None


def entropy(row: dict, mid: str) -> float | None:
    for k in ENTROPY_KEYS:
        v = row.get(f"train/{mid}/{k}")
        if finite(v):
            return float(v)
    return None


def has_entropy(rows: Sequence[dict]) -> bool:
    return any(k.startswith("train/") and k.endswith(ENTROPY_KEYS) and finite(r[k]) for r in rows for k in r)


def member_series(rows: Sequence[dict], mid: str, fn: Callable[[dict, str], float | None]) -> Series:
    steps, values = [], []
    for r in rows:
        v = fn(r, mid)
        if v is not None:
            steps.append(int(r["step"]))
            values.append(float(v))
    return steps, values
