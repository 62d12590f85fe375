# attack: a SIGALRM every microsecond whose handler calls os._exit(0)
# expect: error refused:clock
# calls: ["0"]
# ruff: noqa
import os, signal
signal.signal(signal.SIGALRM, lambda *a: os._exit(0))
def f(x):
    signal.setitimer(signal.ITIMER_REAL, 0.000001, 0.000001)
    return 7
