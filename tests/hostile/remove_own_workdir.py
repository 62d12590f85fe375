# attack: remove the work directory itself
# expect: error runtime_error:PermissionError|runtime_error:OSError
# calls: ["0"]
# ruff: noqa
import os
def f(x):
    os.rmdir(os.getcwd())
