# attack: raise the scheduling priority
# expect: error runtime_error:PermissionError
# calls: ["0"]
# ruff: noqa
import os
def f(x):
    os.nice(-10)
