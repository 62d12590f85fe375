"""The doctor's stages: each in its own guard, each judged against the time budget before it starts,
and the report written after every change, so that a run cut short at any point leaves one.

A :class:`Stage` is a name, an estimate of its seconds (evaluated just before it would start, so it
can use what earlier stages measured), the stages it needs, and a function to run. The runner:

- marks a stage ``blocked`` when a stage it needs failed (``skipped`` or ``unavailable`` when the
  stage it needs was skipped or unavailable);
- marks it ``skipped`` when ``--budget-s`` is set and the seconds spent so far plus its estimate
  exceed the budget (the detail gives both figures);
- else marks it ``running`` (and writes the report: a report left in this state was cut short while
  this stage ran), runs it, and marks it ``done``, ``unavailable`` (it raised :class:`Unavailable`:
  it cannot run on this node, e.g. no vLLM, one GPU) or ``failed`` (any other exception: one line);
- on SIGTERM or Ctrl-C marks the running stage ``interrupted`` and every later one ``pending`` with
  the reason, writes the report, and stops.

``on_change(records)`` is called after every transition; it writes ``doctor.json`` and ``doctor.md``.
"""

from __future__ import annotations

import signal
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, replace

from populora.doctor.records import StageRecord


class Unavailable(Exception):
    """The stage cannot run on this node; the message says why (not a failure)."""


class Interrupted(BaseException):
    """SIGTERM arrived (``timeout``, a scheduler's end of allocation): stop after writing the report."""


@dataclass(frozen=True)
class Stage:
    name: str
    run: Callable[[], str | None]  # returns a one-line detail for the report (or None)
    estimate: Callable[[], float] = lambda: 0.0
    needs: tuple[str, ...] = ()
    cleanup: Callable[[], None] | None = None  # runs whatever became of the stage (frees memory)


def one_line(e: BaseException) -> str:
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0] if text else ''}".rstrip(": ")


def budget_check(spent_s: float, estimate_s: float, budget_s: float | None) -> str | None:
    """Why a stage must not start (pure), or None: its estimate would take the run past the budget."""
    if budget_s is None or spent_s + estimate_s <= budget_s:
        return None
    left = max(0.0, budget_s - spent_s)
    return f"estimate {estimate_s:.0f} s, {left:.0f} s of --budget-s {budget_s:g} left"


class StageRunner:
    def __init__(self, stages: list[Stage], budget_s: float | None, on_change: Callable[[tuple], None],
                 start: float | None = None, clock: Callable[[], float] = time.monotonic):
        self.stages = stages
        self.budget_s, self.on_change, self.clock = budget_s, on_change, clock
        self.start = clock() if start is None else start
        self.records = {s.name: StageRecord(s.name) for s in stages}

    def spent(self) -> float:
        return self.clock() - self.start

    def left(self) -> float | None:
        return None if self.budget_s is None else self.budget_s - self.spent()

    def _set(self, name: str, **changes) -> None:
        self.records[name] = replace(self.records[name], **changes)
        try:
            self.on_change(tuple(self.records.values()))
        except Exception as e:  # the report could not be written (disk full...): say so, keep going
            print(f"populora doctor: could not write the report: {one_line(e)}", file=sys.stderr)

    def run(self) -> tuple[StageRecord, ...]:
        previous = signal.getsignal(signal.SIGTERM)

        def on_term(signum, frame):
            raise Interrupted(f"signal {signal.Signals(signum).name}")

        signal.signal(signal.SIGTERM, on_term)
        try:
            for i, stage in enumerate(self.stages):
                try:
                    self._run_one(stage)
                except (Interrupted, KeyboardInterrupt) as e:
                    why = str(e) or "Ctrl-C"
                    self._set(stage.name, status="interrupted", seconds=None, detail=f"stopped by {why}")
                    for later in self.stages[i + 1:]:
                        self._set(later.name, status="pending", detail=f"not started: the run was stopped by {why}")
                    break
        finally:
            signal.signal(signal.SIGTERM, previous)
        self.on_change(tuple(self.records.values()))
        return tuple(self.records.values())

    def _run_one(self, stage: Stage) -> None:
        missing = {n: self.records[n].status if n in self.records else "absent"
                   for n in stage.needs if n not in self.records or self.records[n].status != "done"}
        if missing:
            what = ", ".join(f"{n} ({status})" for n, status in missing.items())
            self._set(stage.name, status=needs_status(missing.values()), detail=f"needs {what}")
            self._cleanup(stage)
            return
        try:
            estimate = float(stage.estimate())
        except Exception as e:  # an estimate that cannot be made must not stop the run
            estimate, note = 0.0, f" (no estimate: {one_line(e)})"
        else:
            note = ""
        why = budget_check(self.spent(), estimate, self.budget_s)
        if why:
            self._set(stage.name, status="skipped", estimate_s=estimate, detail=why)
            self._cleanup(stage)
            return
        self._set(stage.name, status="running", estimate_s=estimate, detail=note.strip())
        t0 = self.clock()
        try:
            detail = stage.run()
        except Unavailable as e:
            self._set(stage.name, status="unavailable", seconds=self.clock() - t0, detail=str(e))
        except Exception as e:
            traceback.print_exc(file=sys.stderr)
            self._set(stage.name, status="failed", seconds=self.clock() - t0, detail=one_line(e))
        else:
            self._set(stage.name, status="done", seconds=self.clock() - t0, detail=(detail or "") + note)
        finally:
            self._cleanup(stage)

    @staticmethod
    def _cleanup(stage: Stage) -> None:
        if stage.cleanup is not None:
            try:
                stage.cleanup()
            except Exception as e:
                print(f"populora doctor: cleanup after {stage.name}: {one_line(e)}", file=sys.stderr)


def needs_status(statuses) -> str:
    """A stage whose needs did not complete: blocked by a failure, unavailable with an unavailable
    need, else skipped (its need was skipped or not reached: the run is incomplete, not failed)."""
    statuses = set(statuses)
    if statuses & {"failed", "blocked", "absent"}:
        return "blocked"
    if "unavailable" in statuses:
        return "unavailable"
    return "skipped"


def run_status(records) -> str:
    """complete | incomplete (skipped, interrupted or not reached) | failed (a stage failed or was blocked)."""
    statuses = {r.status for r in records}
    if statuses & {"failed", "blocked"}:
        return "failed"
    if statuses & {"skipped", "interrupted", "pending", "running"}:
        return "incomplete"
    return "complete"
