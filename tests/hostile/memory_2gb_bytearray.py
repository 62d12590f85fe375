# attack: one 2 GB allocation
# expect: memory memory
# calls: ["0"]
# ruff: noqa
def f(x):
    return len(bytearray(2 * 1024**3))
