# attack: read the fork server's environment through /proc
# expect: error runtime_error:FileNotFoundError|runtime_error:PermissionError
# calls: ["0"]
# ruff: noqa
import os
def f(x):
    return open(f'/proc/{os.getppid()}/environ').read()
