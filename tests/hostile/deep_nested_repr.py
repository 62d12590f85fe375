# attack: return a list nested 10**5 deep (repr recursion)
# expect: error runtime_error:RecursionError
# calls: ["0"]
# ruff: noqa
def f(x):
    v = []
    for _ in range(10**5):
        v = [v]
    return v
