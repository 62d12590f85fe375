"""Watching an engine that runs in processes of its own: calls that cannot hang on a dead engine.

vLLM's offline ``LLM`` talks to its EngineCore process (and that to its workers) over queues; when
one of those processes is killed, vLLM 0.32's ``generate`` and ``llm_engine.remove_lora`` wait
forever (measured: SIGKILL of EngineCore, then neither call returned). ``EngineWatch`` records the
processes an engine started and runs each call into the engine in a helper thread while the caller
checks, every ``WATCH_SECONDS``, that those processes still live; a dead one is an ``EngineFailure``
that names it (pid, exit status). Nothing here knows vLLM beyond its process names (``VLLM::<role>``).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator

from populora.policy.engine import EngineFailure
from populora.processes import descendants, running

WATCH_SECONDS = 1.0  # how often a waiting call checks that the engine's processes live (ours)
SHUTDOWN_SECONDS = 10.0  # how long ``stop`` waits for a process before killing it (ours)


def describe_exit(code: int | None) -> str:
    """A multiprocessing exit code in words: ``killed by SIGKILL``, ``exit status 1``, ``running``."""
    if code is None:
        return "running"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit status {code}"


class EngineWatch:
    """The processes one engine started, and calls into the engine that notice when one dies."""

    def __init__(self, name: str) -> None:
        self.name = name  # how failures name the engine ("vllm engine (cpu) of rank 1")
        self.processes: list = []  # multiprocessing children the engine started (exit status known)
        self.workers: dict[int, str] = {}  # their own children named VLLM::*: pid -> name

    @contextlib.contextmanager
    def starting(self) -> Iterator[None]:
        """Around the engine's start: the multiprocessing children that appear are its processes;
        their descendants named ``VLLM::*`` its workers (other descendants, e.g. torch.compile's
        worker pool, may come and go on their own and are not watched)."""
        before = set(multiprocessing.active_children())
        yield
        self.processes = [p for p in multiprocessing.active_children() if p not in before]
        self.workers = {pid: name for p in self.processes for pid, name in descendants(p.pid).items()
                        if name.startswith("VLLM::")}

    def check(self) -> None:
        """An ``EngineFailure`` naming the process when one of the engine's processes has ended."""
        for p in self.processes:
            if p.exitcode is not None:  # polls the child (os.waitpid with WNOHANG)
                raise EngineFailure(f"{self.name}: its process {p.name} (pid {p.pid}) died "
                                    f"({describe_exit(p.exitcode)})")
        for pid, name in self.workers.items():
            if not running(pid):
                raise EngineFailure(f"{self.name}: its worker process {name} (pid {pid}) died")

    def call(self, fn: Callable, *args, expected: tuple[type[BaseException], ...] = (), **kwargs):
        """``fn(*args, **kwargs)`` in a helper thread (a daemon, abandoned if the engine died) while
        this thread checks the processes. An exception of ``fn`` is an ``EngineFailure`` naming the
        engine (and the dead process, if one died), except the ``expected`` ones, raised as they are."""
        box: dict = {}

        def run():
            try:
                box["value"] = fn(*args, **kwargs)
            except BaseException as e:  # handed to the caller's thread
                box["error"] = e

        worker = threading.Thread(target=run, name="engine-call", daemon=True)
        worker.start()
        while worker.is_alive():
            worker.join(WATCH_SECONDS)
            if worker.is_alive():
                self.check()
        error = box.get("error")
        if error is None:
            return box["value"]
        if isinstance(error, (EngineFailure, *expected)):
            raise error
        for _ in range(10):  # the engine saw its process die: name it, once the exit is visible here
            self.check()
            time.sleep(0.1)
        what = getattr(fn, "__name__", "call")
        raise EngineFailure(f"{self.name}: {what} failed: {type(error).__name__}: {first_line(error)}") from error

    def stop(self) -> None:
        """After the engine's own shutdown: wait for its processes, kill what is left."""
        for p in self.processes:
            p.join(timeout=SHUTDOWN_SECONDS)
            if p.exitcode is None:
                p.kill()
        for pid in self.workers:
            if running(pid):
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
        self.processes, self.workers = [], {}


def first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0][:300] if text else "(no message)"
