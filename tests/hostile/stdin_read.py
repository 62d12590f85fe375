# attack: read standard input (nothing is fed)
# expect: error runtime_error:EOFError
# calls: ["0"]
# ruff: noqa
def f(x):
    return input()
