# attack: block SIGXCPU, then loop past the CPU-time limit (killed a second of CPU later, still the CPU-time limit)
# expect: timeout timeout
# calls: ["0"]
# ruff: noqa
import signal
def f(x):
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGXCPU})
    while True:
        pass
