# attack: PTRACE_ATTACH to the fork server through ctypes
# expect: ok
# calls: ["0"]
# ruff: noqa
# values: ["-1"]
import ctypes, os
def f(x):
    return ctypes.CDLL(None).ptrace(16, os.getppid(), 0, 0)
