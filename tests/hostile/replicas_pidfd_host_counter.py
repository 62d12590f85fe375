# attack: issue 32: read how many processes the host has started (the inode number of a pidfd counts them) and pin to a CPU, the raw material of a channel between executions and a view of host activity
# expect: error runtime_error:PermissionError
# calls: ["0"]
# ruff: noqa
import os
def f(x):
    fd = os.pidfd_open(os.getpid())
    return os.fstat(fd).st_ino
