"""What a forked child does right around the program: the hooks built before it runs.

``make_before_run`` says that the child's setup is over; ``make_finish`` sends the one result frame
and leaves. Both are built from functions captured before the program runs, so a program that
rebinds names changes nothing of what they do.

Standard library only: the fork server imports it as a top-level module.
"""

from __future__ import annotations

import os
import signal

import protocol

SETUP_FAILED = 121  # exit code of a child whose confinement failed (the program never ran)


def make_before_run():
    """What the child does right before the program's module body runs: say that its setup is over
    (one byte on descriptor 4, then closed, so the program cannot touch it)."""
    write, close = os.write, os.close

    def before_run():
        write(4, b"1")
        close(4)

    return before_run


def make_finish(token: str, out, err):
    """The child's last act, built before the program runs: block signals (a program can set no
    timer: seccomp.py), flush the program's output, send the one result frame on fd 3, leave with ``os._exit`` (no
    ``atexit`` handler or finalizer of the program runs after it). A program that breaks any of
    this only spoils its own outcome (``crashed:``); the server checks the frame against the limits.
    """
    write, exit_, pack = os.write, os._exit, protocol.pack_fields
    sigmask = signal.pthread_sigmask
    everything = set(signal.Signals) - {signal.SIGKILL, signal.SIGSTOP}

    def finish(result) -> None:
        try:
            sigmask(signal.SIG_BLOCK, everything)
        except BaseException:
            pass
        for stream in (out, err):
            try:
                stream.flush()
            except BaseException:
                pass
        try:
            status, reason, values, detail = result
            frame = pack([token, status, reason, detail, *values])
            view = memoryview(frame)
            while view:
                view = view[write(3, view) :]
        except BaseException:
            exit_(SETUP_FAILED + 1)
        exit_(0)

    return finish
