# attack: SIGKILL the fork server's process group (its group id is 0 in the namespace: the child hits its own)
# expect: crashed crashed:SIGKILL|error runtime_error:PermissionError
# calls: ["0"]
# ruff: noqa
import os
def f(x):
    os.killpg(os.getpgid(os.getppid()), 9)
