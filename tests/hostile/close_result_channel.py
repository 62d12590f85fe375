# attack: close every descriptor, result channel included, then return
# expect: crashed crashed:exit_*
# calls: ["0"]
# ruff: noqa
import os
def f(x):
    os.closerange(0, 64)
    return 1
