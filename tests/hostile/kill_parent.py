# attack: SIGKILL the fork server (the child's parent)
# expect: error runtime_error:PermissionError
# calls: ["0"]
# ruff: noqa
import os
def f(x):
    os.kill(os.getppid(), 9)
