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

import json
import math
import os
from collections.abc import Iterable
from pathlib import Path

from populora.jsonl import read_jsonl, step_of, truncate_jsonl

TIME_PREFIX = "time/"


def mean(xs: Iterable[float]) -> float:
    xs = list(xs)
    return sum(xs) / len(xs) if xs else float("nan")


def _clean(v):
    if isinstance(v, float) and not math.isfinite(v):
        return None  # JSON has no NaN; null means "no data this step"
    return v


class MetricsLog:
    """Append-only ``metrics.jsonl`` (plus TensorBoard when available)."""

    def __init__(self, run_dir: str | os.PathLike, tensorboard: bool = True, sinks: Iterable = ()):
        self.path = Path(run_dir) / "metrics.jsonl"
        self.sinks = [x for x in sinks if x is not None]
        self._tb = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter  # needs the tensorboard package

                self._tb = SummaryWriter(str(Path(run_dir) / "tensorboard"))
            except Exception:  # tensorboard not installed: JSONL only
                self._tb = None

    def log(self, step: int, metrics: dict) -> None:
        row = {"step": step, **{k: _clean(v) for k, v in sorted(metrics.items())}}
        with open(self.path, "a") as f:
            f.write(json.dumps(row, sort_keys=False) + "\n")
            f.flush()
            os.fsync(f.fileno())
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
    return read_jsonl(Path(run_dir) / "metrics.jsonl")


def without_timings(row: dict) -> dict:
    """A metrics row minus wall-clock values (for comparing runs)."""
    return {k: v for k, v in row.items() if not k.startswith(TIME_PREFIX)}
