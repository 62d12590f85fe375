# attack: return a 10**7 character string (must not be truncated)
# expect: output_too_large output_too_large
# calls: ["0"]
# ruff: noqa
def f(x):
    return 'z' * 10**7
