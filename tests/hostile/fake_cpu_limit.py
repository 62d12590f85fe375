# attack: die by SIGXCPU at once, passing for a program that used its whole CPU-time limit
# expect: error runtime_error:PermissionError|error runtime_error:OSError
# calls: ["0"]
# ruff: noqa
import os, signal
def f(x):
    os.kill(os.getpid(), signal.SIGXCPU)
    signal.raise_signal(signal.SIGXCPU)
    return 1
