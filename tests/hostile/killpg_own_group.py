# attack: SIGKILL the child's own process group
# expect: crashed crashed:SIGKILL
# calls: ["0"]
# ruff: noqa
import os
def f(x):
    os.killpg(0, 9)
