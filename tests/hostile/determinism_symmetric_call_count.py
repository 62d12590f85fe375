# attack: issue 32: a code_f program whose output depends on how many times f was called in the process, symmetrically (the first and the last call from either end), so the forward and reversed replicas and the forward rerun all agree while f on a hidden input alone gives another value; since issue 37 every input runs alone everywhere, so every call is the first: a valid task whose own program the checker judges right
# expect: ok
# validate: valid
# task: code_f
# calls: ["1", "2", "3", "4", "5", "6", "7", "8", "9", "10"]
# ruff: noqa
calls = []
def f(n):
    calls.append(n)
    return n + (100 if len(calls) in (1, 10) else 0)
