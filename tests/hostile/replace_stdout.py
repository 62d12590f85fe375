# attack: set sys.stdout to None, then return
# expect: ok
# calls: ["0"]
# ruff: noqa
# values: ["2"]
import sys
def f(x):
    sys.stdout = None
    return 2
