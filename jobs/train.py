"""One training run as a submitit job that survives preemption and time limits.

:class:`TrainingJob` runs ``populora.selfplay.runner.train`` for one run directory. The training
loop itself writes an atomic checkpoint under ``RUN_DIR/checkpoints/`` after every step and resumes
bit-identically from the last complete one, so this job keeps no state of its own: when Slurm sends
USR2 (preemption, or ``signal_delay_s`` before the time limit) submitit calls :meth:`checkpoint`,
which saves nothing and returns a resubmission of the same job with ``resume=True``; submitit then
requeues the job, and the new attempt resumes from the loop's last checkpoint (losing at most the
step that was running). A run that already finished returns its existing summary at once, so
resubmitting a finished run is a no-op.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import submitit

DEFAULT_ENTRY = "populora.selfplay.runner:train"


def resolve_entry(entry: str) -> Callable[..., dict]:
    """Import ``module:function``."""
    module, _, attr = entry.partition(":")
    if not module or not attr:
        raise ValueError(f"training entry '{entry}' must look like 'package.module:function'")
    return getattr(importlib.import_module(module), attr)


def has_started(run_dir: str | Path) -> bool:
    """True when the run directory already holds a run (its saved ``config.yaml``, a checkpoint or
    a summary): the job must resume it, not start it again."""
    run = Path(run_dir)
    checkpoints = run / "checkpoints"
    return ((run / "config.yaml").exists() or (run / "summary.json").exists()
            or (checkpoints.is_dir() and any(checkpoints.iterdir())))


class TrainingJob(submitit.helpers.Checkpointable):
    """Run or resume the training run in ``run_dir``.

    ``config_file`` and ``overrides`` (opaque ``key=value`` strings) define a new run; they are
    ignored once the run directory holds a checkpoint, because the run's saved config wins on
    resume. ``entry`` names the training function (``module:function`` with the signature of
    ``populora.selfplay.runner.train(config_file, overrides, run_dir, resume, *, handle_signals)
    -> dict``); a callable can be given instead of the name.
    """

    def __init__(self, run_dir: str | Path, config_file: str | None = None, overrides: Sequence[str] = (),
                 entry: str | Callable[..., dict] = DEFAULT_ENTRY) -> None:
        self.run_dir = str(Path(run_dir).absolute())
        self.config_file = str(Path(config_file).absolute()) if config_file else None
        self.overrides = list(overrides)
        self.entry = entry

    def __call__(self, resume: bool = False) -> dict[str, Any]:
        train = resolve_entry(self.entry) if isinstance(self.entry, str) else self.entry
        # handle_signals=False: submitit's own USR2 handler must stay installed (it calls
        # checkpoint() and requeues); the loop's handler would swallow the signal and end the job.
        if resume or has_started(self.run_dir):
            return train(None, [], self.run_dir, True, handle_signals=False)
        return train(self.config_file, list(self.overrides), self.run_dir, False, handle_signals=False)

    def checkpoint(self, *args: Any, **kwargs: Any) -> submitit.helpers.DelayedSubmission:
        """Called by submitit on USR2. Nothing to save: the loop checkpoints every step
        atomically; the resubmitted job resumes from that checkpoint."""
        return submitit.helpers.DelayedSubmission(self, resume=True)

    def __repr__(self) -> str:
        return f"TrainingJob(run_dir={self.run_dir!r}, overrides={self.overrides!r})"
