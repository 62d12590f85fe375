# attack: compute 10**10**8 (a 100-million-digit integer)
# expect: timeout timeout
# calls: ["0"]
# ruff: noqa
def f(x):
    return 10**10**8 % 7
