"""Read a run directory back for diagnostics (no torch, no model: plain JSON files).

What a run directory offers (see ``populora.selfplay.runner``) and what is read from it:

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

from populora.jsonl import read_jsonl

SEED_TEACHER = "seed"
TASKS_FILE = "tasks.jsonl"


class RunDirError(ValueError):
    """A run directory is missing or a file in it cannot be read (the message names the file)."""


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


def _config_facts(path: Path) -> tuple[str, bool]:
    """(name, baseline) from config.yaml, falling back to the directory name."""
    cfg = path / "config.yaml"
    name, baseline = path.name, False
    if cfg.is_file():
        from omegaconf import OmegaConf

        try:
            data = OmegaConf.to_container(OmegaConf.load(cfg))
        except Exception as e:  # noqa: BLE001 - yaml errors have several types
            raise RunDirError(f"{cfg}: cannot parse ({e})") from e
        name = str(data.get("name") or name)
        baseline = bool((data.get("population") or {}).get("baseline", False))
    return name, baseline


def _from_task_json(d: dict) -> ValidTask:
    return ValidTask(int(d.get("step", 0)), str(d.get("teacher_id", "")), d["type"], d["program"])


def _from_example(d: dict) -> ValidTask:
    return ValidTask(int(d["step"]), str(d.get("teacher", "")), d["type"], d["program"])


def load_tasks(path: Path, examples: list[dict]) -> tuple[list[ValidTask], str]:
    """Every valid task the run directory keeps, deduplicated, oldest step first; and the source used."""
    tasks_file = path / TASKS_FILE
    if tasks_file.is_file():
        rows = [_from_task_json(d) for d in read_jsonl(tasks_file)]
        source = TASKS_FILE
    else:
        rows = []
        ckpts = sorted((path / "checkpoints").glob("step_*/state.json"))
        for state_file in ckpts:
            try:
                state = json.loads(state_file.read_text(encoding="utf-8"))
            except (OSError, json.JSONDecodeError) as e:
                raise RunDirError(f"{state_file}: cannot read ({e})") from e
            for buf in (state.get("buffers") or {}).values():
                rows += [_from_task_json(t) for t in buf.get("tasks", [])]
        rows += [_from_example(d) for d in examples if d.get("valid") and d.get("program")]
        source = f"checkpoint buffers ({len(ckpts)} checkpoints) + examples.jsonl"
    # Complexity and coverage depend on the program only: one task per (author, step, type, program)
    # (a buffer task and the example row showing it are the same task; so are two inputs to one program).
    seen: dict[tuple, ValidTask] = {}
    for t in sorted(rows, key=lambda t: t.step):
        seen.setdefault((t.teacher, t.step, t.type, t.program.strip()), t)
    return list(seen.values()), source


def load_run(path: str | os.PathLike) -> Run:
    """Everything diagnostics need from one run directory."""
    path = Path(path)
    if not path.is_dir():
        raise RunDirError(f"{path}: not a directory")
    metrics = read_jsonl(path / "metrics.jsonl")
    if not metrics:
        raise RunDirError(f"{path / 'metrics.jsonl'}: missing or empty; is {path} a run directory?")
    lineage = read_jsonl(path / "lineage.jsonl")
    examples = read_jsonl(path / "examples.jsonl")
    name, baseline = _config_facts(path)
    roles = {r["member"]["id"]: r["member"]["role"] for r in lineage if "member" in r}
    if baseline and not roles:
        roles = {"a0": "agent"}
    tasks, source = load_tasks(path, examples)
    seed = [t for t in tasks if t.teacher == SEED_TEACHER]
    own = [t for t in tasks if t.teacher != SEED_TEACHER]
    return Run(path, name, baseline, metrics, lineage, examples, own, seed, source, roles)


def finite(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
