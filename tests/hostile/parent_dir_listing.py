# attack: list and write the directory holding other programs' work directories
# expect: error runtime_error:PermissionError
# calls: ["0"]
# ruff: noqa
import os
def f(x):
    return os.listdir('..')
