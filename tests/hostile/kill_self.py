# attack: the child kills itself with SIGKILL
# expect: crashed crashed:SIGKILL
# calls: ["0"]
# ruff: noqa
import os
def f(x):
    os.kill(os.getpid(), 9)
