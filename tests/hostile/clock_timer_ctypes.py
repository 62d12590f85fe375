# attack: issue 37: POSIX timers and timerfd (an event at a time) through ctypes
# expect: error refused:clock
# validate: refused:clock
# calls: ["0"]
# ruff: noqa
import ctypes
def f(x):
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.timerfd_create(1, 0) == -1:  # CLOCK_MONOTONIC
        raise OSError(ctypes.get_errno(), 'timerfd_create')
    return 1
