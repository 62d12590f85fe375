# attack: scan /proc for every pid and SIGKILL each (the caller included)
# expect: ok|error runtime_error:PermissionError
# calls: ["0"]
# ruff: noqa
# values: ["0"]
import os
def f(x):
    killed = 0
    for name in os.listdir('/proc'):
        if name.isdigit() and int(name) != os.getpid():
            try:
                os.kill(int(name), 9)
                killed += 1
            except OSError:
                pass
    return killed
