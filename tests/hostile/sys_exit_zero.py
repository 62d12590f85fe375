# attack: sys.exit(0) inside f: must not look like a valid empty output
# expect: crashed crashed:SystemExit
# calls: ["0"]
# ruff: noqa
import sys
def f(x):
    sys.exit(0)
