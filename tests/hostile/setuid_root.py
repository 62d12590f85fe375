# attack: os.setuid(0)
# expect: error runtime_error:PermissionError
# calls: ["0"]
# ruff: noqa
import os
def f(x):
    os.setuid(0)
