# attack: block SIGXCPU and count loop turns until it is pending: how fast the host runs this program
# expect: error refused:clock
# validate: refused:clock
# calls: ["0"]
# ruff: noqa
import signal
def f(x):
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGXCPU})
    n = 0
    while signal.SIGXCPU not in signal.sigpending():
        n += 1
    return n // 10**4
