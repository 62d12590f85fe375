"""The sweep file: its keys, validated, and the grid it expands to (populations x seeds x grid).

See ``jobs/sweep.py`` for the sweep file's keys and what a sweep submits. Every problem is a
``SweepError`` naming the file and the key, raised before anything is submitted.
"""

from __future__ import annotations

import itertools
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

# Population sizes of the paper's sweeps, as config overrides.
POPULATIONS: dict[str, tuple[str, ...]] = {
    "1t1s": ("population.teachers=1", "population.students=1", "population.baseline=false"),
    "4t4s": ("population.teachers=4", "population.students=4", "population.baseline=false"),
    "8t8s": ("population.teachers=8", "population.students=8", "population.baseline=false"),
    "16t16s": ("population.teachers=16", "population.students=16", "population.baseline=false"),
    "32t32s": ("population.teachers=32", "population.students=32", "population.baseline=false"),
    "baseline": ("population.teachers=1", "population.students=1", "population.baseline=true"),
}
SPEC_KEYS = ("name", "config", "model", "profile", "eval_profile", "leaderboard_profile", "populations", "seeds",
             "seed_key", "grid", "overrides", "gpus", "eval", "out")
EVAL_KEYS = ("benchmarks", "shards", "max_retries", "args")


class SweepError(ValueError):
    """A sweep file or directory problem; raised before anything is submitted."""


@dataclass(frozen=True)
class RunSpec:
    name: str
    overrides: tuple[str, ...]
    gpus: int | None = None  # None: the training profile's whole allocation
    population: str = ""  # the sweep's population name the run belongs to


@dataclass
class SweepSpec:
    name: str
    config: str
    source: str = "<dict>"
    model: str | None = None  # the base model of every run (policy.model) and of its evaluation (--model)
    profile: str = "local"
    eval_profile: str | None = None
    leaderboard_profile: str | None = None
    populations: dict[str, tuple[str, ...]] = field(default_factory=lambda: {"1t1s": POPULATIONS["1t1s"]})
    seeds: tuple[int, ...] = (0,)
    seed_key: str = "seed"
    grid: dict[str, tuple[Any, ...]] = field(default_factory=dict)
    overrides: tuple[str, ...] = ()
    gpus: dict[str, int] = field(default_factory=dict)  # population -> GPUs (ranks) per run
    benchmarks: tuple[str, ...] = ("code", "math")
    shards: int = 1
    max_retries: int | None = None
    eval_args: tuple[str, ...] = ()
    out: str | None = None


def _fail_unknown(where: str, keys: Any, valid: Sequence[str]) -> None:
    bad = [str(k) for k in keys if k not in valid]
    if bad:
        raise SweepError(f"{where}: unknown key(s) {', '.join(bad)}; valid keys: {', '.join(valid)}")


def _populations(where: str, value: Any) -> dict[str, tuple[str, ...]]:
    if isinstance(value, list):
        unknown = [v for v in value if v not in POPULATIONS]
        if unknown:
            raise SweepError(f"{where}: unknown population(s) {unknown}; built in: {', '.join(POPULATIONS)} "
                             "(or give a mapping name -> list of overrides)")
        return {v: POPULATIONS[v] for v in value}
    if isinstance(value, dict):
        out = {}
        for name, overrides in value.items():
            if overrides is None and name in POPULATIONS:
                overrides = POPULATIONS[name]
            if not isinstance(overrides, (list, tuple)) or not all(isinstance(o, str) and "=" in o for o in overrides):
                raise SweepError(f"{where}: populations.{name} must be a list of key=value strings, got {overrides!r}")
            out[str(name)] = tuple(overrides)
        return out
    raise SweepError(f"{where}: populations must be a list of names or a mapping, got {value!r}")


def spec_from_dict(data: dict[str, Any], source: str = "<dict>") -> SweepSpec:
    where = f"sweep file {source}"
    if not isinstance(data, dict):
        raise SweepError(f"{where}: expected a mapping")
    _fail_unknown(where, data, SPEC_KEYS)
    for key in ("name", "config"):
        if not data.get(key):
            raise SweepError(f"{where}: key '{key}' is required")
    if not re.fullmatch(r"[A-Za-z0-9._-]+", str(data["name"])):
        raise SweepError(f"{where}: name {data['name']!r} may only use letters, digits, '.', '_' and '-'")
    spec = SweepSpec(name=str(data["name"]), config=str(data["config"]), source=source)
    if data.get("profile"):
        spec.profile = str(data["profile"])
    spec.eval_profile = data.get("eval_profile")
    spec.leaderboard_profile = data.get("leaderboard_profile")
    if data.get("model") is not None:
        spec.model = str(data["model"])
    if "populations" in data:
        spec.populations = _populations(where, data["populations"])
    seeds = data.get("seeds", [0])
    if not isinstance(seeds, list) or not seeds or not all(isinstance(s, int) and not isinstance(s, bool) for s in seeds):
        raise SweepError(f"{where}: seeds must be a non-empty list of integers, got {seeds!r}")
    spec.seeds = tuple(seeds)
    spec.seed_key = str(data.get("seed_key", "seed"))
    grid = data.get("grid") or {}
    if not isinstance(grid, dict):
        raise SweepError(f"{where}: grid must be a mapping key -> list of values, got {grid!r}")
    for key, values in grid.items():
        if not isinstance(values, list) or not values:
            raise SweepError(f"{where}: grid.{key} must be a non-empty list of values, got {values!r}")
    spec.grid = {str(k): tuple(v) for k, v in grid.items()}
    overrides = data.get("overrides") or []
    if not isinstance(overrides, list) or not all(isinstance(o, str) and "=" in o for o in overrides):
        raise SweepError(f"{where}: overrides must be a list of key=value strings, got {overrides!r}")
    spec.overrides = tuple(overrides)
    if spec.model and any(o.startswith("policy.model=") for o in spec.overrides):
        raise SweepError(f"{where}: the model is given twice (model: and policy.model= in overrides); keep model:")
    gpus = data.get("gpus") or {}
    if not isinstance(gpus, dict):
        raise SweepError(f"{where}: gpus must be a mapping population -> GPUs per run, got {gpus!r}")
    for pop, k in gpus.items():
        if pop not in spec.populations:
            raise SweepError(f"{where}: gpus.{pop}: no such population; populations: {', '.join(spec.populations)}")
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise SweepError(f"{where}: gpus.{pop} must be an integer >= 1, got {k!r}")
    spec.gpus = {str(k): int(v) for k, v in gpus.items()}
    ev = data.get("eval") or {}
    if not isinstance(ev, dict):
        raise SweepError(f"{where}: eval must be a mapping, got {ev!r}")
    _fail_unknown(f"{where}: eval", ev, EVAL_KEYS)
    benchmarks = ev.get("benchmarks", ["code", "math"])
    if isinstance(benchmarks, str):
        benchmarks = [benchmarks]
    if not benchmarks or not all(isinstance(b, str) for b in benchmarks):
        raise SweepError(f"{where}: eval.benchmarks must be a non-empty list of names, got {benchmarks!r}")
    spec.benchmarks = tuple(benchmarks)
    spec.shards = int(ev.get("shards", 1))
    if spec.shards < 1:
        raise SweepError(f"{where}: eval.shards must be >= 1, got {spec.shards}")
    spec.max_retries = ev.get("max_retries")
    eval_args = ev.get("args") or []
    if not isinstance(eval_args, list):
        raise SweepError(f"{where}: eval.args must be a list of `populora eval` arguments, got {eval_args!r}")
    spec.eval_args = tuple(str(a) for a in eval_args)
    if spec.model and "--model" in spec.eval_args:
        raise SweepError(f"{where}: the model is given twice (model: and --model in eval.args); keep model:, "
                         "which every run's evaluation uses")
    spec.out = data.get("out")
    return spec


def load_spec(path: str | os.PathLike[str]) -> SweepSpec:
    p = Path(path)
    if not p.is_file():
        raise SweepError(f"sweep file {p} does not exist")
    try:
        data = yaml.safe_load(p.read_text()) or {}
    except yaml.YAMLError as exc:
        raise SweepError(f"sweep file {p}: not valid YAML: {exc}") from exc
    return spec_from_dict(data, source=str(p))


def _value_text(value: Any) -> str:
    return "true" if value is True else "false" if value is False else str(value)


def expand_runs(spec: SweepSpec) -> list[RunSpec]:
    """The cartesian product populations x seeds x grid, as named runs with their overrides."""
    keys = list(spec.grid)
    runs = []
    for pop, seed, values in itertools.product(spec.populations, spec.seeds,
                                               itertools.product(*(spec.grid[k] for k in keys))):
        name = f"{pop}-s{seed}" + "".join(f"-{k.split('.')[-1]}{_value_text(v)}" for k, v in zip(keys, values))
        name = re.sub(r"[^A-Za-z0-9._=-]", "_", name)
        model = (f"policy.model={spec.model}",) if spec.model else ()
        overrides = (*model, *spec.overrides, f"run.wandb_group={spec.name}", f"run.wandb_name={name}",
                     *spec.populations[pop], f"{spec.seed_key}={seed}",
                     *(f"{k}={_value_text(v)}" for k, v in zip(keys, values)))
        runs.append(RunSpec(name, overrides, spec.gpus.get(pop), pop))
    names = [r.name for r in runs]
    if len(set(names)) != len(names):
        raise SweepError(f"sweep {spec.name}: two runs got the same name; rename populations or grid values")
    return runs
