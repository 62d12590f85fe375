# attack: start a new session to leave the process group, then fork
# expect: error runtime_error:PermissionError|runtime_error:BlockingIOError
# calls: ["0"]
# ruff: noqa
import os
def f(x):
    os.setsid()
    os.fork()
