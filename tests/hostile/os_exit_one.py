# attack: os._exit(1)
# expect: crashed crashed:exit_1
# calls: ["0"]
# ruff: noqa
import os
def f(x):
    os._exit(1)
