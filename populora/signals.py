"""Preemption signals belong to the trainer: the processes it starts are immune to them.

Slurm announces a preemption or the end of a job's time with SIGUSR2 (``--signal``), and
``scancel --signal`` sends it to EVERY process of the job step, not only to the one that handles it
(``populora.selfplay.runner.StopFlag``: checkpoint, then stop between steps). A process started by
the trainer (vLLM's engine processes, the sandbox's fork servers) that does not handle it dies of its
default action, and the step that was running loses its engine or its verifier.

``children_immune()`` blocks those signals in the calling thread while it starts such processes: a
blocked signal mask survives ``fork`` and ``exec``, so the children start with the signals blocked
(they stay pending there and are never delivered). A signal sent to the trainer meanwhile is not
lost either: the kernel hands a process-directed signal to a thread that does not block it (vLLM's
and torch's threads), whose C-level handler marks it for Python's main thread at once; with no such
thread it stays pending until the block is lifted, then reaches its handler. Processes we write
ourselves also ignore them outright (the sandbox's fork server, ``sandbox/server.py``, which runs
without this package on its path).
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator

PREEMPTION_SIGNALS = (signal.SIGUSR2,)


@contextlib.contextmanager
def children_immune(signals: tuple[signal.Signals, ...] = PREEMPTION_SIGNALS) -> Iterator[None]:
    """Processes started inside this block (from this thread) inherit ``signals`` blocked."""
    old = signal.pthread_sigmask(signal.SIG_BLOCK, signals)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)

