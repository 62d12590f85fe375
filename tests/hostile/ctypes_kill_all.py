# attack: kill(-1, 9) through ctypes
# expect: ok
# calls: ["0"]
# ruff: noqa
# values: ["-1"]
import ctypes
def f(x):
    return ctypes.CDLL(None).kill(-1, 9)
