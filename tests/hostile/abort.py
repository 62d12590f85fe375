# attack: os.abort()
# expect: crashed crashed:SIGABRT
# calls: ["0"]
# ruff: noqa
import os
def f(x):
    os.abort()
