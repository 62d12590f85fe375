# attack: arm a SIGALRM whose handler calls os._exit(0) just after f returns (issue 37: a timer is a clock, refused)
# expect: error refused:clock
# calls: ["0"]
# ruff: noqa
import os, signal
signal.signal(signal.SIGALRM, lambda *a: os._exit(0))
def f(x):
    signal.setitimer(signal.ITIMER_REAL, 0.3)
    return 7
