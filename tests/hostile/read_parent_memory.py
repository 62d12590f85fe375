# attack: read the fork server's memory through /proc/<ppid>/mem
# expect: error runtime_error:FileNotFoundError|runtime_error:PermissionError
# calls: ["0"]
# ruff: noqa
import os
def f(x):
    with open(f'/proc/{os.getppid()}/mem', 'rb') as fh:
        return fh.read(16)
