# attack: allocate a 10 GB string
# expect: memory memory
# calls: ["0"]
# ruff: noqa
def f(x):
    return len(' ' * 10**10)
