# attack: rebind os.write/os._exit so the result is lost or faked
# expect: ok
# calls: ["0"]
# ruff: noqa
# values: ["5"]
import os
os.write = lambda fd, data: len(data)
os._exit = lambda code: None
def f(x):
    return 5
