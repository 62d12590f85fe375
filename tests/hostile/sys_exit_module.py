# attack: sys.exit(0) while the module is executed
# expect: crashed crashed:SystemExit
# calls: ["0"]
# ruff: noqa
import sys
sys.exit(0)
def f(x):
    return x
