# attack: os._exit(0): exit status 0 without a result
# expect: crashed crashed:exit_0
# calls: ["0"]
# ruff: noqa
import os
def f(x):
    os._exit(0)
