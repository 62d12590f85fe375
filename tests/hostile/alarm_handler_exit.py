# attack: arm a SIGALRM whose handler calls os._exit(0) just after f returns
# expect: ok
# calls: ["0"]
# ruff: noqa
# values: ["7"]
import os, signal
signal.signal(signal.SIGALRM, lambda *a: os._exit(0))
def f(x):
    signal.setitimer(signal.ITIMER_REAL, 0.3)
    return 7
