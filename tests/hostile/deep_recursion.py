# attack: unbounded recursion
# expect: error runtime_error:RecursionError
# calls: ["0"]
# ruff: noqa
def f(x):
    return f(x + 1)
