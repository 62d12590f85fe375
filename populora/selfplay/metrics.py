"""Metrics of a run: one JSON line per step in ``metrics.jsonl`` under stable names.

Names are ``<scope>/<...>/<metric>``, for example ``teacher/code_o/valid_rate``,
``student/code_f/solve_rate``, ``member/t0/mu``, ``adapter/t0/sequences``, ``time/generate_s``.
They never change meaning between versions; new metrics get new names (CleanRL's rule).
Values under ``time/`` are wall-clock measurements and are the only ones that differ between two
runs of the same config and seed.

TensorBoard event files are written too when the ``tensorboard`` package is installed, and any
further sinks (``log(step, row)`` / ``close()``: Weights & Biases, ``populora.selfplay.wandb_log``)
receive every row after it is on disk.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from populora.jsonl import step_of, truncate_jsonl
from populora.run_dir import RunDir, append_jsonl

TIME_PREFIX = "time/"
# the per-type and per-member rates a step reports (``selfplay.stages.step_rates``); the run summary
# shows the last step's
RATE_SUFFIXES = ("valid_rate", "solve_rate")


def mean(xs: Iterable[float]) -> float:
    xs = list(xs)
    return sum(xs) / len(xs) if xs else float("nan")


@dataclass
class StepMetrics:
    """What one self-play step measured, as the values its stages made; ``row()`` is its line in
    ``metrics.jsonl`` (the stable names are made here and in the records' ``as_metrics``).

    ``seeding``: the buffers' seeding report's metrics (first step only); ``errors``: stages the
    infrastructure failed (``StageError``); ``games``: each rated game's outcome score
    (``match/<member>/<opponent>``); ``training``: each member's update statistics
    (``train/<id>/<stat>``); ``rates``: the step's rates (``stages.step_rates``); ``ratings`` /
    ``population``: members' (mu, sigma) before and after evolution; ``usage``: each member's
    ``Usage`` (``adapter/<id>/...``); ``timings``: wall-clock seconds per phase (``time/<phase>_s``);
    ``counts``: the remaining single values (``check/...``, ``buffer/...``, ``evolution/replaced``,
    ``complexity/...``) under their names.
    """

    seeding: dict = field(default_factory=dict)
    errors: list = field(default_factory=list)
    games: dict[str, float] = field(default_factory=dict)
    training: dict[str, dict] = field(default_factory=dict)
    rates: dict = field(default_factory=dict)
    ratings: dict[str, tuple[float, float]] = field(default_factory=dict)
    population: dict[str, tuple[float, float]] = field(default_factory=dict)
    usage: dict = field(default_factory=dict)
    counts: dict = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)

    def row(self) -> dict:
        """The flat metrics of the step under their stable names."""
        out: dict = dict(self.seeding)
        for error in self.errors:
            out.update(error.as_metrics())
        out.update(self.counts)
        out.update(self.games)
        for mid, stats in self.training.items():
            out.update({f"train/{mid}/{k}": v for k, v in stats.items()})
        out.update(self.rates)
        for mid, (mu, sigma) in self.ratings.items():
            out[f"member/{mid}/mu"], out[f"member/{mid}/sigma"] = mu, sigma
        for mid, (mu, sigma) in self.population.items():
            out[f"population/{mid}/mu"], out[f"population/{mid}/sigma"] = mu, sigma
        for mid, u in self.usage.items():
            out.update(u.as_metrics(mid))
        out.update({f"{TIME_PREFIX}{phase}_s": s for phase, s in self.timings.items()})
        return out


class Stopwatch:
    """Times the phases of a step (``with watch.phase("validate"):``) and tells the progress display
    which phase runs (``on_phase``); ``seconds[timing]`` is each timed phase's wall-clock time."""

    def __init__(self, on_phase: Callable[[str], None] = lambda name: None) -> None:
        self.on_phase = on_phase
        self.seconds: dict[str, float] = {}

    @contextmanager
    def phase(self, name: str, timing: str | None = None) -> Iterator[None]:
        """Phase ``name``, timed as ``timing`` (default: the name; "" for an untimed phase)."""
        self.on_phase(name)
        t = time.perf_counter()
        try:
            yield
        finally:
            if timing != "":
                self.seconds[timing or name] = time.perf_counter() - t


def last_rates(row: dict) -> dict:
    """The rates of a metrics row (``RATE_SUFFIXES``), NaN as None: what a run's summary shows."""
    return {k: (v if isinstance(v, float) and math.isfinite(v) else None)
            for k, v in row.items() if k.endswith(RATE_SUFFIXES)}


def progress_line(row: dict) -> str:
    """The progress bar's text for a step: mean teacher valid rate, mean student solve rate over the
    task types, and the step's seconds."""
    valid = [v for k, v in row.items() if k.startswith("teacher/") and k.endswith("/valid_rate") and v is not None]
    solve = [v for k, v in row.items() if k.startswith("student/") and k.endswith("/solve_rate") and v is not None]
    fmt = lambda xs: f"{sum(xs) / len(xs):.2f}" if xs else "-"  # noqa: E731
    return f"valid {fmt(valid)} solve {fmt(solve)} step {row['time/step_s']:.1f}s"


def _clean(v):
    if isinstance(v, float) and not math.isfinite(v):
        return None  # JSON has no NaN; null means "no data this step"
    return v


class MetricsLog:
    """Append-only ``metrics.jsonl`` (plus TensorBoard when available)."""

    def __init__(self, run_dir: str | os.PathLike, tensorboard: bool = True, sinks: Iterable = ()):
        rd = RunDir(run_dir)
        self.path = rd.metrics_file
        self.sinks = [x for x in sinks if x is not None]
        self._tb = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter  # needs the tensorboard package

                self._tb = SummaryWriter(str(rd.tensorboard_dir))
            except Exception:  # tensorboard not installed: JSONL only
                self._tb = None

    def log(self, step: int, metrics: dict) -> None:
        row = {"step": step, **{k: _clean(v) for k, v in sorted(metrics.items())}}
        append_jsonl(self.path, [row], fsync=True)
        if self._tb is not None:
            for k, v in metrics.items():
                if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
                    self._tb.add_scalar(k, v, step)
            self._tb.flush()
        for sink in self.sinks:
            sink.log(step, row)

    def truncate_after(self, step: int) -> None:
        """Drop lines of steps after ``step`` (written before a crash, redone after resume).

        A malformed line other than a torn last one is an error naming file and line; nothing is dropped then.
        """
        truncate_jsonl(self.path, lambda row: step_of(row) <= step)

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()
        for sink in self.sinks:
            sink.close()


def read_metrics(run_dir: str | os.PathLike) -> list[dict]:
    """The rows of ``RUN_DIR/metrics.jsonl``, one per step ([] before the first step).

    JsonlError (a ValueError) naming file and line for a malformed line other than a torn last one.
    """
    return RunDir(run_dir).read_metrics()


def without_timings(row: dict) -> dict:
    """A metrics row minus wall-clock values (for comparing runs)."""
    return {k: v for k, v in row.items() if not k.startswith(TIME_PREFIX)}
