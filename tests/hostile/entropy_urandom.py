# attack: issue 37: random bytes from os.urandom (the getrandom system call), secrets-style
# expect: error refused:entropy
# validate: refused:entropy
# calls: ["0"]
# ruff: noqa
import os
def f(x):
    return os.urandom(1)[0] % 2
