"""Seeds as a dimension: which configuration and seed each run is, and the across-seed tables.

A run's **configuration** is its population size (``4t4s``: 4 teachers + 4 students; ``baseline``: the
single-agent baseline) plus every other config key whose value differs between the runs on the
leaderboard (a sweep's grid, e.g. ``4t4s lr=3e-05``); the run name, the ``run:`` section and the seed
are not part of it. Both come from the run's ``config.yaml`` (the seed from ``seed``, or the key a
sweep names with ``--seed-key``). A run without a config is read from its name, as a sweep names runs
(``<configuration>-s<seed>[-<grid>]``), its population from ``members.json``; a run whose seed cannot
be told is a configuration of its own, named after the run (two such runs are never pooled as seeds).

Across-seed tables (:func:`seed_table`): per configuration and column, the mean over seeds of the
population mean over members (and of the best member: the member with the highest value of that
column in its run, so the best member of a column is one adapter), with the 95% Student-t interval
across seeds (``eval.stats.mean_interval``); the baseline configuration's single adapter the same
way; the base model as it is (it has no training seed). One seed gives the mean and no interval.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from eval.leaderboard.columns import ALL_COLUMNS, AVERAGES, with_averages
from eval.stats import Interval, mean_interval

SWEEP_NAME = re.compile(r"^(?P<config>.+?)-s(?P<seed>\d+)(?P<grid>(?:-.+)?)$")
IGNORED_TOP = ("name", "run")  # never part of a configuration (names, output places, logging)


@dataclass(frozen=True)
class RunIdentity:
    run: str  # the run directory's name
    config: str  # configuration label (what is pooled across seeds)
    seed: int | None
    baseline: bool
    source: str  # where config and seed were read: "config.yaml", "run name" or "run directory"


@dataclass
class AdapterScores:
    """One evaluated adapter's numbers per leaderboard column (averages included)."""

    key: str
    run: str
    role: str
    member: str
    model: str | None = None  # the base model's name (base rows)
    values: dict[str, float | None] = field(default_factory=dict)  # pass@1 (greedy) / avg@N
    pass_at_k: dict[str, dict[int, float]] = field(default_factory=dict)
    solve_rates: dict[str, dict[str, float]] = field(default_factory=dict)
    n: dict[str, int] = field(default_factory=dict)
    samples: dict[str, int] = field(default_factory=dict)

    def at(self, k: int | None) -> dict[str, float | None]:
        """Column -> pass@k (``k`` None: the value, pass@1 / avg@N), averages recomputed over pass@k."""
        if k is None:
            return self.values
        raw = {c: self.pass_at_k.get(c, {}).get(k) for c in self.pass_at_k}
        return with_averages(raw)


def adapter_scores(rows: Sequence[dict]) -> dict[str, AdapterScores]:
    """Score rows (``scores.json``) -> one record per adapter key, in row order."""
    out: dict[str, AdapterScores] = {}
    for r in rows:
        a = out.setdefault(r["key"], AdapterScores(r["key"], r["run"], r["role"], r["member_id"], r.get("model")))
        c = r["column"]
        a.values[c] = r["value"]
        a.n[c] = r.get("n")
        a.samples[c] = int(r.get("samples", 1))
        pk = r.get("pass_at_k") or ({"1": r["value"]} if r["value"] is not None else {})
        a.pass_at_k[c] = {int(k): v for k, v in pk.items()}
        if r.get("solve_rates") is not None:
            a.solve_rates[c] = dict(r["solve_rates"])
    for a in out.values():
        a.values = with_averages(a.values)
    return out


# -- configuration and seed of a run --------------------------------------------------------------
def _flatten(data, prefix: str = "") -> dict[str, object]:
    if isinstance(data, Mapping):
        out = {}
        for k, v in data.items():
            out.update(_flatten(v, f"{prefix}{k}."))
        return out
    return {prefix[:-1]: repr(data) if isinstance(data, (list, tuple)) else data}


def _get(data: Mapping, dotted: str):
    for part in dotted.split("."):
        if not isinstance(data, Mapping) or part not in data:
            return None
        data = data[part]
    return data


def _population_label(teachers: int, students: int, baseline: bool) -> str:
    return "baseline" if baseline else f"{teachers}t{students}s"


def identify_runs(run_dirs: Sequence[str | Path], seed_key: str = "seed",
                  roles: Mapping[str, Sequence[str]] | None = None) -> dict[str, RunIdentity]:
    """Every run's configuration label and seed (module docstring); keyed by run name. ``roles``: the
    roles of each run's evaluated adapters (default: those of its ``members.json``)."""
    from populora.run_dir import RunDir

    configs: dict[str, dict | None] = {}
    members: dict[str, list[str]] = {}
    for r in run_dirs:
        run = RunDir(r)
        configs[run.name] = run.read_config_data() if run.config_file.is_file() else None
        if roles is not None and run.name in roles:
            members[run.name] = list(roles[run.name])
        else:
            members[run.name] = [m.get("role") for m in run.read_members()] if run.members_file.is_file() else []
    flat = {name: _flatten({k: v for k, v in c.items() if k not in IGNORED_TOP}) for name, c in configs.items() if c}
    varying = sorted(k for k in {k for f in flat.values() for k in f}
                     if k != seed_key and not k.startswith("population.") and len({repr(f.get(k)) for f in flat.values()}) > 1)
    out = {}
    for name, cfg in configs.items():
        roles = members[name]
        if cfg:
            pop = cfg.get("population") or {}
            baseline = bool(pop.get("baseline", False))
            label = _population_label(pop.get("teachers", roles.count("teacher")), pop.get("students", roles.count("student")),
                                      baseline)
            extra = " ".join(f"{k.split('.')[-1]}={flat[name].get(k)}" for k in varying)
            seed = _get(cfg, seed_key)
            seed = seed if isinstance(seed, int) and not isinstance(seed, bool) else None
            out[name] = RunIdentity(name, f"{label} {extra}".strip() if seed is not None else name, seed, baseline,
                                    "config.yaml")
            continue
        baseline = bool(roles) and all(r == "baseline" for r in roles)
        m = SWEEP_NAME.match(name)
        if m:
            label = m["config"] + m["grid"]
            out[name] = RunIdentity(name, label, int(m["seed"]), baseline or m["config"] == "baseline", "run name")
        else:
            out[name] = RunIdentity(name, name, None, baseline, "run directory")
    return out


@dataclass
class RunGroup:
    """The runs of one configuration, ordered by seed."""

    config: str
    baseline: bool
    runs: list[str]
    seeds: list[int | None]

    def seeds_text(self) -> str:
        known = [s for s in self.seeds if s is not None]
        if not known:
            return "seed unknown"
        return f"seed{'s' if len(known) > 1 else ''} {', '.join(map(str, known))}"


def group_runs(identities: Mapping[str, RunIdentity]) -> list[RunGroup]:
    """Runs pooled by configuration: population configurations first, then baselines, by label."""
    groups: dict[str, RunGroup] = {}
    for ident in sorted(identities.values(), key=lambda i: (i.seed is None, i.seed or 0, i.run)):
        g = groups.setdefault(ident.config, RunGroup(ident.config, ident.baseline, [], []))
        g.baseline = g.baseline and ident.baseline
        g.runs.append(ident.run)
        g.seeds.append(ident.seed)
    for g in groups.values():
        known = [s for s in g.seeds if s is not None]
        if len(set(known)) != len(known):
            raise ValueError(f"configuration {g.config}: two runs share a seed ({', '.join(g.runs)}); "
                             "evaluate one run per seed, or pass --seed-key naming the key that tells them apart")
    return sorted(groups.values(), key=lambda g: (g.baseline, _size_order(g.config), g.config))


def _size_order(label: str) -> int:
    m = re.match(r"(\d+)t(\d+)s", label)
    return int(m[1]) + int(m[2]) if m else 0


# -- across-seed tables -----------------------------------------------------------------------------
@dataclass
class SeedRow:
    """One row of an across-seed table: a configuration's statistic per column."""

    label: str
    config: str
    stat: str  # "population mean" | "best member" | "baseline" | "base model"
    cells: dict[str, Interval | None]
    group: RunGroup | None
    per_seed: dict[str, list[float]] = field(default_factory=dict)  # column -> the value of each run


def run_statistic(adapters: Sequence[AdapterScores], col: str, stat: str, k: int | None) -> float | None:
    """One run's population statistic of a column: mean or max over its members (None if one lacks it)."""
    xs = [a.at(k).get(col) for a in adapters]
    if not xs or any(x is None for x in xs):
        return None
    return max(xs) if stat == "best member" else sum(xs) / len(xs)


def seed_table(groups: Sequence[RunGroup], scores: Mapping[str, AdapterScores], cols: Sequence[str],
               k: int | None = None) -> list[SeedRow]:
    """Across-seed rows (module docstring) for ``cols`` at pass@k (``k`` None: the value)."""
    by_run: dict[str, list[AdapterScores]] = {}
    for a in scores.values():
        by_run.setdefault(a.run, []).append(a)
    rows = []
    for g in groups:
        stats = ("baseline",) if g.baseline else ("population mean", "best member")
        for stat in stats:
            cells, per_seed = {}, {}
            for c in cols:
                xs = []
                for run in g.runs:
                    mine = [a for a in by_run.get(run, []) if a.role in (("baseline",) if g.baseline else ("teacher", "student"))]
                    xs.append(run_statistic(mine, c, "mean" if stat == "baseline" else stat, k))
                ok = all(x is not None for x in xs) and bool(xs)
                cells[c] = mean_interval(xs, bounds=(0.0, 1.0)) if ok else None
                per_seed[c] = xs if ok else []
            label = g.config if g.baseline and g.config == "baseline" else f"{g.config} {stat}"
            rows.append(SeedRow(label, g.config, stat, cells, g, per_seed))
    for a in scores.values():
        if a.role == "base":
            vals = a.at(k)
            cells = {c: None if vals.get(c) is None else Interval(vals[c], None, None, 1, None) for c in cols}
            rows.append(SeedRow(f"base model {a.model or ''}".strip(), "base", "base model",
                                cells, None, {c: [vals[c]] for c in cols if vals.get(c) is not None}))
    return rows


def present_columns(scores: Mapping[str, AdapterScores]) -> list[str]:
    """The benchmark columns any adapter has, in registry order, then the averages any adapter has."""
    cols = [c for c in ALL_COLUMNS if any(c in a.values for a in scores.values())]
    return cols + [c for c in AVERAGES if any(a.values.get(c) is not None for a in scores.values())]
