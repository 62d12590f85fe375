"""Read a run directory back for diagnostics (no torch, no model: plain JSON files).

What a run directory offers (``populora.run_dir.RunDir``, which owns its layout) and what is read from it:

- ``metrics.jsonl``: one row per step (every time series of the report);
- ``lineage.jsonl``: founders and replacements (the family tree, the roles of member ids);
- ``examples.jsonl``: a few tasks per step (shown in the report; also a source of programs);
- ``config.yaml`` / ``summary.json``: the run's name and whether it is the single-agent baseline;
- the valid tasks (programs) behind the complexity and coverage series, from the most complete
  source present (``Run.task_source`` says which):

  1. ``tasks.jsonl``: every valid task of every step, one ``Task`` JSON per line, when the step
     loop writes it (complete);
  2. otherwise the union of the task buffers in every kept checkpoint
     (``checkpoints/step_*/state.json``) and the valid rows of ``examples.jsonl``. Limits: a
     buffer is capacity-bounded (the oldest non-seed tasks are evicted), only the last few
     checkpoints are kept, and ``examples.jsonl`` keeps the first three valid tasks of each step,
     so early steps of a long run are under-sampled and per-step counts are not proposal counts.

Seed tasks (teacher ``seed``) are kept apart: they describe the start, not anything a teacher did.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

from populora.jsonl import JsonlError, read_jsonl_numbered
from populora.run_dir import RunDir, RunDirError
from populora.tasks.records import SEED_TEACHER

__all__ = ["SEED_TEACHER", "Run", "RunDirError", "ValidTask", "finite", "load_run", "load_tasks"]


@dataclass
class ValidTask:
    """A valid task as diagnostics need it: who wrote it, when, its type and program."""

    step: int
    teacher: str
    type: str
    program: str

    @property
    def teacher_id(self) -> str:  # the name Task records use (complexity.complexity_metrics reads it)
        return self.teacher


@dataclass
class Run:
    path: Path
    name: str
    baseline: bool
    metrics: list[dict]
    lineage: list[dict]
    examples: list[dict]
    tasks: list[ValidTask]
    seed_tasks: list[ValidTask]
    task_source: str
    roles: dict[str, str] = field(default_factory=dict)

    @property
    def steps(self) -> list[int]:
        return [int(r["step"]) for r in self.metrics]

    @property
    def last_step(self) -> int:
        return max(self.steps, default=0)

    def role_of(self, member_id: str) -> str:
        """``teacher``/``student``/``agent`` from the lineage (``seed`` for the seed tasks)."""
        if member_id == SEED_TEACHER:
            return SEED_TEACHER
        return self.roles.get(member_id, "teacher" if member_id.startswith("t") else "unknown")

    @property
    def retention_dir(self) -> Path:
        return self.path / "retention"


def _config_facts(run: RunDir) -> tuple[str, bool]:
    """(name, baseline) from config.yaml, falling back to the directory name."""
    data = run.read_config_data()
    population = data.get("population") or {}
    if not isinstance(population, dict):
        raise RunDirError(f"{run.config_file}: 'population' must be a mapping, got {population!r:.60}")
    return str(data.get("name") or run.name), bool(population.get("baseline", False))


def _from_task_json(d: dict) -> ValidTask:
    return ValidTask(_int(d.get("step", 0), "step"), str(d.get("teacher_id", "")), _str(d, "type"), _str(d, "program"))


def _from_example(d: dict) -> ValidTask:
    return ValidTask(_int(d.get("step"), "step"), str(d.get("teacher", "")), _str(d, "type"), _str(d, "program"))


def _int(v, key: str) -> int:
    if not isinstance(v, int) or isinstance(v, bool):
        raise ValueError(f"{key!r} must be an integer, got {v!r:.60}")
    return v


def _str(d: dict, key: str) -> str:
    if not isinstance(d.get(key), str):
        raise ValueError(f"{key!r} must be a string, got {d.get(key)!r:.60}")
    return d[key]


def _rows(path: Path, convert, what: str = "JSON") -> list:
    """``convert(row)`` for every row of a JSON-lines file; RunDirError naming file and line otherwise."""
    out = []
    try:
        for line, row in read_jsonl_numbered(path, what=what):
            try:
                out.append(convert(row))
            except (KeyError, TypeError, ValueError) as e:
                why = f"missing key {e}" if isinstance(e, KeyError) else str(e)
                raise RunDirError(f"{path}:{line}: {why}") from None
    except JsonlError as e:
        raise RunDirError(str(e)) from None
    return out


def load_tasks(path: Path, examples: list[dict]) -> tuple[list[ValidTask], str]:
    """Every valid task the run directory keeps, deduplicated, oldest step first; and the source used."""
    run = RunDir(path)
    if run.tasks_file.is_file():
        rows = _rows(run.tasks_file, _from_task_json)
        source = RunDir.TASKS
    else:
        rows = []
        ckpts = sorted(run.checkpoints.glob("step_*/state.json"))
        for state_file in ckpts:
            try:
                state = json.loads(state_file.read_text(encoding="utf-8"))
                for buf in (state.get("buffers") or {}).values():
                    rows += [_from_task_json(t) for t in buf.get("tasks", [])]
            except (OSError, UnicodeDecodeError, RecursionError, json.JSONDecodeError, AttributeError, KeyError,
                    TypeError, ValueError) as e:
                raise RunDirError(f"{state_file}: cannot read its task buffers ({type(e).__name__}: {e})") from e
        rows += [_from_example(d) for d in examples if _shows_valid_task(d)]
        source = f"checkpoint buffers ({len(ckpts)} checkpoints) + examples.jsonl"
    # Complexity and coverage depend on the program only: one task per (author, step, type, program)
    # (a buffer task and the example row showing it are the same task; so are two inputs to one program).
    seen: dict[tuple, ValidTask] = {}
    for t in sorted(rows, key=lambda t: t.step):
        seen.setdefault((t.teacher, t.step, t.type, t.program.strip()), t)
    return list(seen.values()), source


def _metrics_row(row: dict) -> dict:
    _int(row.get("step"), "step")
    return row


def _shows_valid_task(row: dict) -> bool:
    return bool(row.get("valid") and row.get("program"))


def _example_row(row: dict) -> dict:
    if _shows_valid_task(row):
        _from_example(row)
    return row


def _lineage_row(row: dict) -> dict:
    if "member" in row:
        m = row["member"]
        if not isinstance(m, dict):
            raise ValueError(f"'member' must be an object, got {m!r:.60}")
        _str(m, "id")
        _str(m, "role")
    return row


def load_run(path: str | os.PathLike) -> Run:
    """Everything diagnostics need from one run directory."""
    path = Path(path)
    if not path.is_dir():
        raise RunDirError(f"{path}: not a directory")
    run = RunDir(path)
    run.format()
    metrics = _rows(run.metrics_file, _metrics_row)
    if not metrics:
        raise RunDirError(f"{run.metrics_file}: missing or empty; is {path} a run directory?")
    lineage = _rows(run.lineage_file, _lineage_row, what="lineage record")
    examples = _rows(run.examples_file, _example_row)
    name, baseline = _config_facts(run)
    roles = {r["member"]["id"]: r["member"]["role"] for r in lineage if "member" in r}
    if baseline and not roles:
        roles = {"a0": "agent"}
    tasks, source = load_tasks(path, examples)
    seed = [t for t in tasks if t.teacher == SEED_TEACHER]
    own = [t for t in tasks if t.teacher != SEED_TEACHER]
    return Run(path, name, baseline, metrics, lineage, examples, own, seed, source, roles)


def finite(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
