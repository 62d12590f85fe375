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


def export_rank_environment() -> None:
    """In a job of several tasks (ranks), torch's ``env://`` variables from submitit's job environment
    (``TorchDistributedEnvironment``: master = the job's first host, port from the job id), each rank
    seeing only its own GPU. A job of one task needs nothing."""
    try:
        env = submitit.JobEnvironment()
    except RuntimeError:  # not inside a submitit job (a direct call)
        return
    if env.num_tasks > 1:
        submitit.helpers.TorchDistributedEnvironment().export(set_cuda_visible_devices=True)


class TrainingJob(submitit.helpers.Checkpointable):
    """Run or resume the training run in ``run_dir``.

    ``config_file`` and ``overrides`` (opaque ``key=value`` strings) define a new run; they are
    ignored once the run has started (its model loaded, step 0 saved: ``RunDir.holds_run``), because
    the run's saved config wins on resume. A start that failed before that is started again with them. ``entry`` names the training function (``module:function`` with the signature of
    ``populora.selfplay.runner.train(config_file, overrides, run_dir, resume, *, handle_signals)
    -> dict``, ``resume="auto"``); a callable can be given instead of the name. In a job of several
    tasks every task is one rank of the run (see docs/distributed.md).
    """

    def __init__(self, run_dir: str | Path, config_file: str | None = None, overrides: Sequence[str] = (),
                 entry: str | Callable[..., dict] = DEFAULT_ENTRY) -> None:
        self.run_dir = str(Path(run_dir).absolute())
        self.config_file = str(Path(config_file).absolute()) if config_file else None
        self.overrides = list(overrides)
        self.entry = entry

    def __call__(self, resume: bool = False) -> dict[str, Any]:
        train = resolve_entry(self.entry) if isinstance(self.entry, str) else self.entry
        export_rank_environment()
        # handle_signals=False: submitit's own USR2 handler must stay installed (it calls
        # checkpoint() and requeues); the loop's handler would swallow the signal and end the job.
        # "auto": rank 0 looks at the run directory and every rank follows (ranks start together,
        # so they must not each decide from a directory that rank 0 may be creating).
        return train(self.config_file, list(self.overrides), self.run_dir, "auto", handle_signals=False)

    def checkpoint(self, *args: Any, **kwargs: Any) -> submitit.helpers.DelayedSubmission:
        """Called by submitit on USR2. Nothing to save: the loop checkpoints every step
        atomically; the resubmitted job resumes from that checkpoint."""
        return submitit.helpers.DelayedSubmission(self, resume=True)

    def __repr__(self) -> str:
        return f"TrainingJob(run_dir={self.run_dir!r}, overrides={self.overrides!r})"
