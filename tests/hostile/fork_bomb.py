# attack: while True: os.fork()
# expect: error runtime_error:BlockingIOError
# calls: ["0"]
# ruff: noqa
import os
def f(x):
    while True:
        os.fork()
