# attack: dup2 the result channel over stdout and print a fake result
# expect: crashed crashed:bad_result
# calls: ["0"]
# ruff: noqa
import os
def f(x):
    os.dup2(3, 1)
    print("'forged'")
    return 1
