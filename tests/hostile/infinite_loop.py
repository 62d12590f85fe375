# attack: while True: pass
# expect: timeout timeout
# calls: ["0"]
# ruff: noqa
def f(x):
    while True:
        pass
