# attack: block far beyond the wall-clock limit without a clock (no CPU used): wait for a signal that never comes
# expect: timeout timeout
# calls: ["0"]
# ruff: noqa
import signal
def f(x):
    signal.pause()
