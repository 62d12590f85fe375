# attack: register an atexit handler that never returns
# expect: ok
# calls: ["0"]
# ruff: noqa
# values: ["3"]
import atexit
def spin():
    while True:
        pass
atexit.register(spin)
def f(x):
    return 3
